// Command bench measures snowflake-proxy side by side with direct PostgreSQL
// and PgBouncer, in one run on this machine:
//
//	go run ./bench                          # full run: 10s per measurement, 3 rounds
//	go run ./bench -duration 2s -rounds 1   # quick smoke run
//	go run ./bench -only select1,nextval -clients 8 -skip-pgbouncer
//
// What it does, in order (file owning each step in parentheses):
//
//  1. Starts a private PostgreSQL with fixed tuning (postgres.go), builds the
//     proxy from the tree and runs it as a separate process with a
//     Unix-socket upstream (proxy.go), and runs PgBouncer in session mode on
//     the same socket (pgbouncer.go; installed with apt-get when missing,
//     skipped with a notice when it cannot be had). With -upstream-tls
//     both reach the server over TCP with TLS instead, on a certificate
//     made for the run, and are checked to be encrypted before anything
//     is measured; -upstream-tcp is the same TCP path in plaintext
//     (upstream.go). With -client-tls, combinable with either, pgbench
//     reaches both relays over TLS on a certificate made for the run,
//     each relay refusing clients without TLS, checked the same way
//     (clienttls.go).
//  2. Sets up the database through the proxy: CREATE EXTENSION snowflake,
//     t_sf, t_serial, sequence s, pgbench -i -s 1 (setup.go).
//  3. Runs pgbench for every workload x protocol mode x client count, the
//     targets interleaved and repeated for -rounds rounds (workloads.go,
//     pgbench.go).
//  4. Prints one table of median TPS and mean latency per target with the
//     proxy's ratios, and writes it as Markdown and CSV under bench/results/
//     (report.go, machine.go), and where each target's CPU goes and how
//     often it crosses into the kernel, per transaction (cpu.go,
//     crossings.go).
//
// main.go parses the flags and runs the harness (harness.go), the rounds
// (rounds.go) and the results (results.go, output.go); floor.go and
// siderelay.go run the floor relays and PgBouncer beside the proxy;
// idle.go is the idle subcommand (memory per idle session); bulk.go the
// bulk subcommand (COPY FROM STDIN of many rows into a snowflake-default
// table against a bigserial one; with -pgbin also pgEdge's C extension),
// serverrows.go its parts that the server evaluates row by row (INSERT
// ... SELECT, per-row nextval).
//
// Every process it starts is stopped on exit, on error and on Ctrl-C
// (procs.go). All traffic stays on 127.0.0.1 and Unix sockets. A target that
// fails (for example a proxy that does not build yet) shows its error in the
// table's cell; the other columns are still measured.
package main
