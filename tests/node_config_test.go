package tests

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// startProxyLog starts a proxy with --node node in front of srv and
// returns it with its log (text, debug level).
func startProxyLog(t *testing.T, srv *pgserver.Server, node int) (*app.App, *pgtest.SyncBuffer) {
	t.Helper()
	log := &pgtest.SyncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := app.Start(ctx, app.Config{Listen: "127.0.0.1:0", Upstream: srv.URL("postgres"), Node: node,
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return a, log
}

// nodeOf reads snowflake.node with SHOW and with current_setting, which
// must agree.
func nodeOf(t *testing.T, c *pgx.Conn) string {
	t.Helper()
	show := mustString(t, c, "SHOW snowflake.node")
	if cs := mustString(t, c, "SELECT current_setting('snowflake.node')"); cs != show {
		t.Fatalf("SHOW snowflake.node = %q but current_setting = %q", show, cs)
	}
	return show
}

const nodeWarning = "the server configures another snowflake.node than --node"

// ALTER SYSTEM SET snowflake.node on the server does not reach sessions
// through a proxy started with --node: the proxy's startup parameter
// takes precedence. The proxy says so in its log at start when the two
// differ, and stays quiet when they agree or the server sets none.
func TestServerNodeDiffersFromProxyNode(t *testing.T) {
	srv := pgtest.Start(t, pgserver.Options{}) // ALTER SYSTEM: a server of its own
	db := pgtest.NewDatabase(t, srv)
	through := func(a *app.App) *pgx.Conn {
		cfg, err := pgx.ParseConfig("postgres://postgres@" + a.Addr() + "/" + db + "?sslmode=disable")
		if err != nil {
			t.Fatal(err)
		}
		return connectConfig(t, cfg)
	}

	first, log := startProxyLog(t, srv, 3)
	if strings.Contains(log.String(), nodeWarning) {
		t.Fatalf("warning without a server setting:\n%s", log.String())
	}
	// As a user would, through the proxy (a stock server accepts ALTER
	// SYSTEM for the placeholder only in a session where it is set, which
	// the proxy's --node makes every session).
	c := through(first)
	mustRun(t, c, "CREATE EXTENSION snowflake")
	mustRun(t, c, "ALTER SYSTEM SET snowflake.node = 10")
	mustRun(t, c, "SELECT pg_reload_conf()")
	// The postmaster rereads its files when it gets to the signal: new
	// connections see the setting from then on.
	direct := func() *pgx.Conn {
		cfg, err := pgx.ParseConfig(srv.URL(db))
		if err != nil {
			t.Fatal(err)
		}
		return connectConfig(t, cfg)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := direct()
		v := mustString(t, c, "SELECT coalesce(current_setting('snowflake.node', true), '')")
		_ = c.Close(context.Background())
		if v == "10" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's snowflake.node is %q 30s after pg_reload_conf, want 10", v)
		}
	}

	if got := nodeOf(t, through(first)); got != "3" {
		t.Fatalf("through the proxy snowflake.node = %s, want the proxy's 3", got)
	}
	_, log = startProxyLog(t, srv, 3)
	if got := log.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, nodeWarning) ||
		!strings.Contains(got, "node=3 server_node=10") {
		t.Fatalf("no warning in the log:\n%s", got)
	}
	if got := nodeOf(t, direct()); got != "10" {
		t.Fatalf("directly snowflake.node = %s, want the server's 10", got)
	}

	_, log = startProxyLog(t, srv, 10)
	if strings.Contains(log.String(), nodeWarning) {
		t.Fatalf("warning although the nodes agree:\n%s", log.String())
	}
}
