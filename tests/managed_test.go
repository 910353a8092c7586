package tests

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/lib/pq"

	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

const managedPassword = "Managed-pw-7f3a"

// managedServer is a server set up like a managed PostgreSQL: TLS only
// (hostssl), SCRAM only, a certificate from a CA of its own. The CA
// certificate is written to a file, as a provider hands it out. hba lines
// go before the one that gives every role SCRAM.
func managedServer(t *testing.T, hba ...string) (srv *pgserver.Server, caFile string) {
	t.Helper()
	ca := pgtest.NewCA(t, "managed provider CA")
	lines := append(append([]string{"local all all trust"}, hba...), "hostssl all all 127.0.0.1/32 scram-sha-256")
	srv = pgtest.StartTLS(t, pgserver.Options{Password: managedPassword,
		Settings: map[string]string{"password_encryption": "'scram-sha-256'"},
		HBA:      lines},
		ca, ca.Server(t, "localhost", "127.0.0.1"))
	caFile = filepath.Join(t.TempDir(), "provider-ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return srv, caFile
}

// TestManagedPostgres starts the proxy the way docs/managed-postgres.md's "In front of
// managed PostgreSQL" section tells a user to, with the provider's
// connection string (sslmode=verify-full, the provider's CA), in front of
// a hostssl-only SCRAM server, and drives it with psql, pgx and lib/pq:
// every session and every control connection of the proxy is encrypted,
// the fast path works, and the password shows up nowhere in the proxy's
// output.
//
// It runs with the event loops relaying the sessions' TLS records, and
// with the loops off (every session on its goroutines).
func TestManagedPostgres(t *testing.T) {
	t.Parallel()
	srv, caFile := managedServer(t)
	for _, c := range []struct {
		name  string
		loops int
	}{{"loops", 0}, {"goroutines", -1}} {
		t.Run(c.name, func(t *testing.T) { managedPostgres(t, srv, caFile, c.loops) })
	}
}

func managedPostgres(t *testing.T, srv *pgserver.Server, caFile string, loops int) {
	upstream := fmt.Sprintf("postgres://postgres:%s@localhost:%d/postgres?sslmode=verify-full&sslrootcert=%s",
		managedPassword, srv.Port(), url.QueryEscape(caFile))
	logs := &pgtest.SyncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := app.Start(ctx, app.Config{Listen: "127.0.0.1:0", Upstream: upstream, Node: 7, EventLoops: loops,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Close(c)
	})
	if strings.Contains(a.Upstream(), managedPassword) || !strings.Contains(a.Upstream(), "localhost") {
		t.Fatalf("Upstream() must describe the server without its password: %q", a.Upstream())
	}
	host, port := splitHostPort(t, a.Addr())
	proxyURL := fmt.Sprintf("postgres://postgres:%s@%s:%s/postgres?sslmode=disable", managedPassword, host, port)

	c, err := pgx.Connect(ctx, proxyURL)
	if err != nil {
		t.Fatalf("pgx through the proxy: %v", err)
	}
	defer c.Close(context.Background())
	mustRun(t, c, "CREATE EXTENSION IF NOT EXISTS snowflake")
	mustRun(t, c, "DROP TABLE IF EXISTS managed_t")
	mustRun(t, c, "CREATE TABLE managed_t (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), v int)")
	for i := 0; i < 50; i++ {
		mustRun(t, c, "INSERT INTO managed_t (v) VALUES ($1)", i)
	}
	if n := mustInt64(t, c, "SELECT count(DISTINCT snowflake.get_node(id)) FILTER (WHERE snowflake.get_node(id) = 7) FROM managed_t"); n != 1 {
		t.Fatalf("IDs of node 7: %d distinct nodes", n)
	}
	mustInt64(t, c, "SELECT snowflake.nextval()")
	if got := mustString(t, c, "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()"); got != "true" {
		t.Fatalf("pgx session: pg_stat_ssl.ssl = %s", got)
	}
	// Every connection the proxy holds (sessions, leases, claim, catalog
	// watch) is encrypted.
	plain := mustInt64(t, c, `SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
		WHERE a.backend_type = 'client backend' AND NOT s.ssl`)
	if plain != 0 {
		t.Fatalf("%d connections of the server are in plaintext", plain)
	}
	if n := mustInt64(t, c, `SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'snowflake-proxy%'`); n == 0 {
		t.Fatalf("no control connection of the proxy seen: %s", mustString(t, c, "SELECT string_agg(coalesce(application_name,'-') || '/' || backend_type, ', ') FROM pg_stat_activity"))
	}

	db, err := sql.Open("postgres", proxyURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ssl bool
	if err := db.QueryRowContext(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
		t.Fatalf("lib/pq session: ssl %v, err %v", ssl, err)
	}
	var id int64
	if err := db.QueryRowContext(ctx, "INSERT INTO managed_t (v) VALUES (1) RETURNING id").Scan(&id); err != nil || id <= 0 {
		t.Fatalf("lib/pq INSERT: id %d, err %v", id, err)
	}

	psql := pgtest.Tool(t, "psql")
	cmd := exec.CommandContext(ctx, psql, "-X", "-A", "-t", "-h", host, "-p", port, "-U", "postgres", "-d", "postgres",
		"-c", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C", "PGSSLMODE=disable", "PGPASSWORD=" + managedPassword}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "t" {
		t.Fatalf("psql session: %q, err %v", out, err)
	}

	if strings.Contains(logs.String(), managedPassword) {
		t.Fatalf("the password appears in the proxy's log:\n%s", logs)
	}
	want, other := "TLS records relayed by event loop", "TLS records relayed by goroutines"
	if loops < 0 || !wire.EventLoopsAvailable {
		want, other = other, want
	}
	if !strings.Contains(logs.String(), want) || strings.Contains(logs.String(), other) {
		t.Fatalf("the log does not say %q alone:\n%s", want, logs)
	}
}

// TestManagedPostgresRequiresTLS: a proxy told to require TLS refuses to
// start in front of a server without TLS, with one clear line, instead
// of serving in plaintext.
func TestManagedPostgresRequiresTLS(t *testing.T) {
	t.Parallel()
	srv := pgtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	upstream := fmt.Sprintf("postgres://postgres:pw-not-shown@%s/postgres?sslmode=require", srv.Addr())
	a, err := app.Start(ctx, app.Config{Listen: "127.0.0.1:0", Upstream: upstream, Logger: testLogger()})
	if err == nil {
		_ = a.Close(ctx)
		t.Fatal("the proxy started in front of a server without TLS although sslmode=require")
	}
	if !strings.Contains(strings.ToUpper(err.Error()), "TLS") || strings.Contains(err.Error(), "pw-not-shown") {
		t.Fatalf("want a clear error without the password, got: %v", err)
	}
}

// TestManagedPostgresPasswordFile: the control password may come from a
// file instead of the command line.
func TestManagedPostgresPasswordFile(t *testing.T) {
	t.Parallel()
	srv, caFile := managedServer(t)
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte(managedPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	upstream := fmt.Sprintf("host=localhost port=%d user=postgres dbname=postgres sslmode=verify-ca sslrootcert=%s", srv.Port(), caFile)
	a, err := app.Start(ctx, app.Config{Listen: "127.0.0.1:0", Upstream: upstream, PasswordFile: pwFile, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	host, port := splitHostPort(t, a.Addr())
	c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:%s@%s:%s/postgres?sslmode=disable", managedPassword, host, port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if got := mustString(t, c, "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()"); got != "true" {
		t.Fatalf("pg_stat_ssl.ssl = %s", got)
	}
}

// TestManagedPostgresChannelBindingPsql: psql connected to the proxy over
// TLS, in front of a TLS server with SCRAM. With channel_binding=require
// libpq stops with its own error, as in front of PgBouncer (the proxy
// offers no SCRAM-SHA-256-PLUS); with the default (prefer) the proxy
// explains that channel binding cannot cross it; with
// channel_binding=disable the login works.
func TestManagedPostgresChannelBindingPsql(t *testing.T) {
	t.Parallel()
	srv, caFile := managedServer(t)
	ca := pgtest.NewCA(t, "proxy CA")
	certFile, keyFile := ca.Server(t, "127.0.0.1").WriteFiles(t, t.TempDir(), "proxy")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	upstream := fmt.Sprintf("postgres://postgres:%s@localhost:%d/postgres?sslmode=verify-full&sslrootcert=%s",
		managedPassword, srv.Port(), url.QueryEscape(caFile))
	a, err := app.Start(ctx, app.Config{Listen: "127.0.0.1:0", Upstream: upstream, TLSCert: certFile, TLSKey: keyFile, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	host, port := splitHostPort(t, a.Addr())
	psql := pgtest.Tool(t, "psql")
	run := func(channelBinding string) (string, error) {
		conn := fmt.Sprintf("host=%s port=%s user=postgres dbname=postgres sslmode=require", host, port)
		if channelBinding != "" {
			conn += " channel_binding=" + channelBinding
		}
		cmd := exec.CommandContext(ctx, psql, "-X", "-A", "-t", "-d", conn, "-c", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C", "PGPASSWORD=" + managedPassword}
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := run("require"); err == nil || !strings.Contains(out, "channel binding is required, but server did not offer an authentication method that supports channel binding") {
		t.Fatalf("channel_binding=require: %v %q", err, out)
	}
	if out, err := run(""); err == nil || !strings.Contains(out, "channel_binding=disable") {
		t.Fatalf("default channel_binding over TLS: %v %q", err, out)
	}
	if out, err := run("disable"); err != nil || out != "t" {
		t.Fatalf("channel_binding=disable: %v %q", err, out)
	}
}

// TestManagedPostgresChannelBindingRequired: with channel_binding=require
// in --upstream, sessions take only SCRAM from the server, as libpq does:
// a role the server asks for its password in the clear is refused before
// the client is asked for it, while SCRAM roles log in. Without a
// verified server certificate the setting is refused at startup: the
// sessions' SCRAM cannot be bound to the proxy's TLS connection.
func TestManagedPostgresChannelBindingRequired(t *testing.T) {
	t.Parallel()
	srv, caFile := managedServer(t, "hostssl all cleartext 127.0.0.1/32 password")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := fmt.Sprintf("postgres://postgres:%s@localhost:%d/postgres?channel_binding=require", managedPassword, srv.Port())
	if _, err := app.Start(ctx, app.Config{Listen: "127.0.0.1:0", Upstream: base + "&sslmode=require", Logger: testLogger()}); err == nil ||
		!strings.Contains(err.Error(), "channel_binding=require needs sslmode=verify-full or verify-ca") {
		t.Fatalf("channel_binding=require with sslmode=require: %v", err)
	}
	a, err := app.Start(ctx, app.Config{Listen: "127.0.0.1:0", Upstream: base + "&sslmode=verify-full&sslrootcert=" + url.QueryEscape(caFile), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	host, port := splitHostPort(t, a.Addr())
	c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:%s@%s:%s/postgres?sslmode=disable", managedPassword, host, port))
	if err != nil {
		t.Fatalf("SCRAM role through the proxy: %v", err)
	}
	defer c.Close(context.Background())
	mustRun(t, c, "CREATE ROLE cleartext LOGIN PASSWORD 'clear-pw'")
	cc, err := pgx.Connect(ctx, fmt.Sprintf("postgres://cleartext:clear-pw@%s:%s/postgres?sslmode=disable", host, port))
	if err == nil {
		cc.Close(ctx)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "28000" || !strings.Contains(pe.Message, "asked for an authentication method other than SCRAM") {
		t.Fatalf("cleartext role with channel_binding=require: %v", err)
	}
}

// TestManagedPostgresControlUpstreamWithoutTLSRequirement: each of
// --upstream and --control-upstream keeps libpq's sslmode (prefer when
// unset), and the proxy warns when only the sessions were told to
// require TLS: the control connections carry the control password.
func TestManagedPostgresControlUpstreamWithoutTLSRequirement(t *testing.T) {
	t.Parallel()
	srv, caFile := managedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := fmt.Sprintf("postgres://postgres:%s@localhost:%d/postgres?sslrootcert=%s", managedPassword, srv.Port(), url.QueryEscape(caFile))
	for _, tc := range []struct {
		control string
		warn    bool
	}{{base, true}, {base + "&sslmode=verify-full", false}} {
		logs := &pgtest.SyncBuffer{}
		a, err := app.Start(ctx, app.Config{Listen: "127.0.0.1:0", Upstream: base + "&sslmode=verify-full", ControlUpstream: tc.control,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		_ = a.Close(ctx)
		if got := strings.Contains(logs.String(), "--control-upstream may connect without TLS while --upstream requires it"); got != tc.warn {
			t.Errorf("control upstream %s: warned %v, want %v:\n%s", tc.control, got, tc.warn, logs)
		}
		if strings.Contains(logs.String(), managedPassword) {
			t.Fatalf("the password appears in the log:\n%s", logs)
		}
	}
}
