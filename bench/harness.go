package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// checkpointTimeout bounds the CHECKPOINT issued before each measurement.
const checkpointTimeout = time.Minute

// harness owns everything one benchmark run starts.
type harness struct {
	cfg  *config
	root string // module root
	dir  string // temporary directory
	res  *results
	mach machine

	srv   *pgserver.Server
	admin *pgx.Conn // direct connection for CHECKPOINT between runs
	proxy *proxyTarget
	pgb   sideRelay // PgBouncer
	floor sideRelay // the floor relay (floor.go)
	uring sideRelay // the io_uring floor relay (floor.go)
	notes []string
	perf  bool // perf counts system calls (crossings.go)
	// tlsSeen is what the upstream TLS check saw (upstream.go), for the
	// report.
	tlsSeen []string
	// relayCert is what the relays serve clients with in a -client-tls
	// run, nil otherwise; clientTLSSeen is what its check saw
	// (clienttls.go).
	relayCert     *relayCert
	clientTLSSeen []string
}

// run starts the stack, sets up, measures and reports.
func (h *harness) run(ctx context.Context) error {
	if _, err := exec.LookPath("pgbench"); err != nil {
		return fmt.Errorf("pgbench not found in PATH (install postgresql-client): %w", err)
	}
	wls, err := selectWorkloads(h.cfg.only)
	if err != nil {
		return err
	}
	h.mach = probeMachine(h.root)
	var whyNoPerf string
	if h.perf, whyNoPerf = probePerf(ctx); whyNoPerf != "" {
		fmt.Println("bench: " + whyNoPerf)
		h.notes = append(h.notes, whyNoPerf)
	}

	// The proxy builds while the server starts.
	type built struct {
		bin string
		err error
	}
	buildDone := make(chan built, 1)
	go func() {
		bin, err := buildProxy(ctx, h.root, h.dir)
		buildDone <- built{bin, err}
	}()

	if k := h.cfg.upstream; k != upSocket {
		fmt.Printf("bench: %s: the proxy and PgBouncer reach the server over %s\n", k.flag(), k.describe())
	}
	if h.cfg.clientTLS {
		fmt.Printf("bench: -client-tls: %s\n", describeClients(true))
		if h.relayCert, err = writeRelayCert(clientTLSDir(h.dir)); err != nil {
			<-buildDone
			return err
		}
	}
	fmt.Println("bench: starting PostgreSQL")
	if h.srv, err = startPostgres(ctx, h.dir, h.cfg.upstream); err != nil {
		<-buildDone
		return fmt.Errorf("start PostgreSQL: %w", err)
	}
	if h.admin, err = connect(ctx, h.srv.Port()); err != nil {
		<-buildDone
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if h.mach.Postgres, h.mach.Settings, err = serverFacts(ctx, h.admin); err != nil {
		<-buildDone
		return err
	}
	upstream := proxyUpstream(h.cfg.upstream, h.srv.SocketDir(), h.srv.Port())

	h.startPgBouncer(ctx)
	h.startFloorRelays(ctx)

	fmt.Println("bench: building the proxy (go build ./cmd/snowflake-proxy)")
	b := <-buildDone
	// -proxy-args last: they may override the harness's own flags.
	extra := append(proxyClientTLSArgs(h.relayCert), h.cfg.proxyArgs...)
	h.proxy = &proxyTarget{bin: b.bin, upstream: upstream, dir: h.dir, extra: extra, err: b.err}
	if h.cfg.upstream == upTLS || h.cfg.clientTLS {
		h.proxy.verify = func(ctx context.Context, port int) error {
			if h.cfg.clientTLS {
				if _, err := checkClientTLS(ctx, port); err != nil {
					return fmt.Errorf("client TLS: %w", err)
				}
			}
			if h.cfg.upstream == upTLS {
				_, err := checkProxyTLS(ctx, port, h.relaySSLMode(), h.srv.Port())
				return err
			}
			return nil
		}
	}
	if b.err == nil {
		if err := h.proxy.start(ctx); err != nil {
			h.proxy.err = fmt.Errorf("proxy start: %w", err)
		}
	}
	if h.proxy.err != nil {
		fmt.Printf("bench: PROXY UNAVAILABLE: %v\n", h.proxy.err)
	} else {
		fmt.Printf("bench: proxy on 127.0.0.1:%d, upstream %s\n", h.proxy.port, upstream)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}

	fmt.Println("bench: setting up the database (through the proxy where possible)")
	proxyPort := 0
	if h.proxy.err == nil {
		proxyPort = h.proxy.port
	}
	for _, n := range setupDatabase(ctx, proxyPort, h.relaySSLMode(), h.srv.Port()) {
		fmt.Println("bench: " + n)
		h.notes = append(h.notes, n)
	}
	// After setup, so that the proxy's control connections are open.
	h.verifyUpstreamTLS(ctx)
	h.verifyClientTLS(ctx)

	runErr := h.measure(ctx, wls)
	h.writeReport(wls, runErr)
	return runErr
}

// startPgBouncer starts PgBouncer or records why it is not measured.
func (h *harness) startPgBouncer(ctx context.Context) {
	h.pgb.name = "PgBouncer"
	skip := ""
	if h.cfg.skipPgBouncer {
		skip = "PgBouncer skipped (-skip-pgbouncer)"
	}
	var bin string
	started := h.pgb.start(skip, func() (*proc, int, error) {
		var err error
		if bin, err = findPgBouncer(ctx); err != nil {
			return nil, 0, err
		}
		return startPgBouncer(ctx, bin, h.dir, h.cfg.upstream, h.relayCert, h.srv.SocketDir(), h.srv.Port())
	})
	if started {
		h.mach.PgBouncer = pgbouncerVersion(bin) + ", pool_mode=session, default_pool_size=20, auth_type=trust, upstream " + h.cfg.upstream.describe()
		if h.relayCert != nil {
			h.mach.PgBouncer += ", clients client_tls_sslmode = require"
		}
	}
}

// measure runs every workload x mode x clients row; within a row the
// targets are interleaved, their order rotated every round.
func (h *harness) measure(ctx context.Context, wls []workload) error {
	total := 0
	for _, w := range wls {
		total += len(h.variants(w)) * len(h.cfg.modes) * len(h.cfg.clients) * h.cfg.rounds
	}
	est := time.Duration(total) * (h.cfg.duration + time.Second)
	fmt.Printf("bench: %d measurements of %s each, about %s\n", total, h.cfg.duration, est.Round(time.Minute))
	scripts := map[string]string{}
	done := 0
	for _, w := range wls {
		vs := h.variants(w)
		for _, v := range vs {
			p, err := scriptPath(h.dir, w, v)
			if err != nil {
				return err
			}
			scripts[w.Name+"/"+columnNames[v.Col]] = p
		}
		for _, mode := range h.cfg.modes {
			for _, clients := range h.cfg.clients {
				key := groupKey{w.Name, mode, clients}
				for round := 0; round < h.cfg.rounds; round++ {
					for i := range vs {
						if ctx.Err() != nil {
							return context.Cause(ctx)
						}
						v := vs[(i+round)%len(vs)]
						done++
						m := h.measureOne(ctx, w, v, scripts[w.Name+"/"+columnNames[v.Col]], mode, clients)
						if ctx.Err() != nil {
							return context.Cause(ctx)
						}
						h.res.add(key, v.Col, round, m)
						status := fmt.Sprintf("%8.0f tps %7.3f ms", m.TPS, m.LatMs)
						if m.Err != nil {
							status = "ERROR " + truncate(oneLine(m.Err.Error()), 100)
						}
						fmt.Printf("[%3d/%d] %-11s %-8s c=%d round %d %-11s %s\n", done, total, w.Name, mode, clients, round+1, columnNames[v.Col], status)
					}
				}
			}
		}
	}
	return nil
}

// sideRelay is the relay a route goes through, nil for the proxy and
// direct routes.
func (h *harness) sideRelay(r route) *sideRelay {
	switch r {
	case viaPgBouncer:
		return &h.pgb
	case viaFloor:
		return &h.floor
	case viaFloorUring:
		return &h.uring
	}
	return nil
}

// variants of w that can run: PgBouncer's and the floor relay's only when
// they are up.
func (h *harness) variants(w workload) []variant {
	var out []variant
	for _, v := range w.Variants {
		if r := h.sideRelay(v.Route); r != nil && !r.up() {
			continue
		}
		out = append(out, v)
	}
	return out
}

func (h *harness) measureOne(ctx context.Context, w workload, v variant, script, mode string, clients int) measurement {
	var port int
	cpu := &cpuParts{serverPID: postmasterPID(h.srv.DataDir()), perf: h.perf}
	switch v.Route {
	case viaDirect:
		port = h.srv.Port()
	case viaPgBouncer, viaFloor, viaFloorUring:
		p, pid, err := h.sideRelay(v.Route).target()
		if err != nil {
			return measurement{Err: err}
		}
		port, cpu.relayPID = p, pid
	case viaProxy:
		if err := h.proxy.ensure(ctx); err != nil {
			return measurement{Err: err}
		}
		port = h.proxy.port
		cpu.relayPID = h.proxy.p.cmd.Process.Pid
	}
	if cpu.serverPID == 0 {
		cpu = nil
	}
	h.checkpoint(ctx)
	return runPgbench(ctx, pgbenchRun{Port: port, Script: script, Builtin: w.Builtin, Mode: mode, Clients: clients, Duration: h.cfg.duration,
		SSLMode: clientSSLMode(h.cfg.clientTLS, v.Route)}, cpu)
}

// checkpoint flushes dirty buffers so a checkpoint does not land inside the
// next measurement. Failures are reported once and otherwise ignored.
func (h *harness) checkpoint(ctx context.Context) {
	if h.admin == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	if _, err := h.admin.Exec(ctx, "CHECKPOINT"); err != nil && ctx.Err() == nil {
		fmt.Printf("bench: CHECKPOINT failed (%v); continuing without\n", err)
		h.admin.Close(context.Background())
		h.admin = nil
	}
}

// writeReport prints the table and writes it under outDir.
func (h *harness) writeReport(wls []workload, runErr error) {
	if len(h.res.order) == 0 {
		return
	}
	rep := newReport(h.res, wls, h.pgb.up(), h.floor.up(), h.uring.up())
	var md mdBuffer
	k := h.cfg.upstream
	if v := runVariant(k, h.cfg.clientTLS); v != "" {
		md.printf("# snowflake-proxy benchmark: %s\n\n", v)
	} else {
		md.printf("# snowflake-proxy benchmark\n\n")
	}
	var variant []string
	if k != upSocket {
		variant = append(variant, fmt.Sprintf("The proxy and PgBouncer reach the server over %s.", k.describe()))
	}
	if h.cfg.clientTLS {
		variant = append(variant, "pgbench reaches the proxy and PgBouncer over TLS (sslmode=require; both relays refuse clients without TLS).")
	}
	if len(variant) > 0 {
		md.printf("**%s The direct targets are plaintext, as in every run; the floor relay is not run.**\n\n", strings.Join(variant, " "))
	}
	if runErr != nil {
		md.printf("**Incomplete run: %v.**\n\n", runErr)
	}
	h.mach.write(&md)
	relays := "proxy (--node 1), PgBouncer and the floor relays"
	if k != upSocket || h.cfg.clientTLS {
		relays = "proxy (--node 1) and PgBouncer"
	}
	md.printf("- pgbench: -n, -T %d, -j min(clients,2), %d round(s) per target interleaved, medians; %s; %s reach the server over %s\n",
		int(h.cfg.duration/time.Second), h.cfg.rounds, describeClients(h.cfg.clientTLS), relays, k.describe())
	for _, seen := range h.tlsSeen {
		md.printf("- upstream TLS checked before measuring (pg_stat_ssl): %s\n", seen)
	}
	for _, seen := range h.clientTLSSeen {
		md.printf("- client TLS checked before measuring (psql \\conninfo with sslmode=require, and a session without TLS refused): %s\n", seen)
	}
	md.printf("- command: go run ./bench %s\n\n", h.cfg.argsString())
	rep.writeMarkdown(&md)
	var cpu mdBuffer
	if rep.writeCPUMarkdown(&cpu) {
		md.printf("\nCPU per transaction, µs (medians; exact run time of every thread from /proc/<pid>/task/<tid>/schedstat, read at 20%% and 90%% of each run; server = postmaster and its children, relay = proxy, PgBouncer or the floor relay, client = pgbench):\n\n")
		md.printf("%s", cpu.String())
	}
	var syscalls, switches mdBuffer
	if rep.writeSyscallsMarkdown(&syscalls) {
		md.printf("\nSystem calls per transaction (medians; perf stat counting %s of each part's processes over the same window):\n\n", syscallEvent)
		md.printf("%s", syscalls.String())
	}
	if rep.writeSwitchesMarkdown(&switches) {
		md.printf("\nContext switches per transaction (medians; voluntary + non-voluntary of every thread, /proc/<pid>/task/<tid>/status, same window):\n\n")
		md.printf("%s", switches.String())
	}
	var rounds mdBuffer
	if rep.writeRoundsMarkdown(&rounds) {
		md.printf("\nThe ratios round by round (the main table's are of the medians; within a round the targets run one after another):\n\n")
		md.printf("%s", rounds.String())
	}
	md.printf("\nColumns per workload (cells are median TPS / mean latency in ms; ratios are of TPS; \"added lat proxy/pgb\" = (proxy - direct latency) / (pgbouncer - direct latency)):\n\n")
	for _, w := range wls {
		for _, v := range h.variants(w) {
			md.printf("- %s, %s: %s\n", w.Title, columnNames[v.Col], v.Desc)
		}
	}
	if h.pgb.note != "" || h.floor.note != "" || h.uring.note != "" || len(h.notes) > 0 {
		md.printf("\nNotes:\n\n")
		for _, n := range []string{h.pgb.note, h.floor.note, h.uring.note} {
			if n != "" {
				md.printf("- %s\n", n)
			}
		}
		for _, n := range h.notes {
			md.printf("- %s\n", n)
		}
	}
	fmt.Println()
	fmt.Print(md.String())

	if err := os.MkdirAll(h.cfg.outDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench: results:", err)
		return
	}
	base := filepath.Join(h.cfg.outDir, "bench-"+time.Now().Format("20060102-150405")+resultSuffix(k, h.cfg.clientTLS))
	err := errors.Join(
		os.WriteFile(base+".md", []byte(md.String()), 0o644),
		writeFileWith(base+".csv", rep.writeCSV),
		writeFileWith(base+"-runs.csv", rep.writeRunsCSV),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: results:", err)
		return
	}
	fmt.Printf("\nbench: wrote %s.md, %s.csv and %s-runs.csv\n", base, base, base)
}

// stopAll stops everything started, in reverse order. Safe on a partially
// started harness.
func (h *harness) stopAll() {
	if h.admin != nil {
		h.admin.Close(context.Background())
	}
	h.proxy.stop()
	h.pgb.p.stop()
	h.floor.p.stop()
	h.uring.p.stop()
	if h.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := h.srv.Stop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench: stop PostgreSQL:", err)
		}
	}
}
