package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// startAdmin starts an App in front of the shared server with the admin
// listener on a free port and node; 0 leaves the node unset.
func startAdmin(t *testing.T, node int) *App { return startAdminOn(t, pgtest.Shared(t), node) }

// startAdminOn is startAdmin in front of srv.
func startAdminOn(t *testing.T, srv *pgserver.Server, node int) *App {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := Start(ctx, Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", Upstream: srv.URL("postgres"), Node: node,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeApp(t, a) })
	if a.AdminAddr() == "" {
		t.Fatal("AdminAddr empty with AdminListen set")
	}
	return a
}

var httpClient = &http.Client{Timeout: 15 * time.Second}

// get returns the status and body of path on the admin listener.
func get(t *testing.T, a *App, path string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get("http://" + a.AdminAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// scrape parses /metrics.
func scrape(t *testing.T, a *App) pgtest.Metrics { return pgtest.Scrape(t, a.AdminAddr()) }

// waitMetric polls /metrics until name equals want.
func waitMetric(t *testing.T, a *App, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := scrape(t, a).Value(t, name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v after 15s, want %v", name, got, want)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

// The counters on /metrics move by what the sessions did: two sessions,
// three SELECT snowflake.nextval and two INSERTs with a snowflake default
// are five fast-path IDs; a call in a failed transaction falls back to the
// server (25P02) and is not counted.
func TestAdminMetricsCountSessionsAndFastPathIDs(t *testing.T) {
	a := startAdmin(t, 1)
	srv := pgtest.Shared(t)
	db := pgtest.NewDatabase(t, srv)
	url := "postgres://" + srv.Superuser() + "@" + a.Addr() + "/" + db + "?sslmode=disable"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func() *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	exec := func(c *pgx.Conn, sql string) {
		t.Helper()
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	setup := connect()
	exec(setup, "CREATE EXTENSION snowflake")
	exec(setup, "CREATE SEQUENCE s")
	epoch := a.services.CatalogEpoch(db)
	exec(setup, "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake.nextval('s'), v int)")
	// DDL moves the catalog epoch; the fast path waits until it is seen.
	for deadline := time.Now().Add(15 * time.Second); a.services.CatalogEpoch(db) == epoch; {
		if time.Now().After(deadline) {
			t.Fatal("catalog epoch unchanged 15s after CREATE TABLE")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
	if err := setup.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, a, "snowflake_proxy_client_sessions", 0)
	before := scrape(t, a)

	c1, c2 := connect(), connect()
	defer c1.Close(ctx)
	defer c2.Close(ctx)
	for range 3 {
		var id int64
		if err := c1.QueryRow(ctx, "SELECT snowflake.nextval('s')").Scan(&id); err != nil || id>>12&1023 != 1 {
			t.Fatalf("SELECT snowflake.nextval: %d %v", id, err)
		}
	}
	exec(c1, "INSERT INTO t (v) VALUES (1)")
	exec(c1, "INSERT INTO t (v) VALUES (2)")
	exec(c2, "BEGIN")
	if _, err := c2.Exec(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("1/0 did not fail")
	}
	if _, err := c2.Exec(ctx, "SELECT snowflake.nextval('s')"); err == nil || !strings.Contains(err.Error(), "25P02") {
		t.Fatalf("nextval in a failed transaction: %v, want 25P02", err)
	}
	exec(c2, "ROLLBACK")
	after := scrape(t, a)

	for _, c := range []struct {
		name string
		want float64
	}{
		{"snowflake_proxy_sessions_total", 2},
		{"snowflake_proxy_accept_errors_total", 0},
	} {
		if d := after.Value(t, c.name) - before.Value(t, c.name); d != c.want {
			t.Errorf("%s moved by %v, want %v", c.name, d, c.want)
		}
	}
	delta := func(name string, labels ...string) float64 {
		t.Helper()
		return after.Value(t, name, labels...) - before.Value(t, name, labels...)
	}
	local, injected := delta("snowflake_proxy_ids_issued_total", "path", "local"), delta("snowflake_proxy_ids_issued_total", "path", "injected")
	if local+injected != 5 {
		t.Errorf("ids_issued_total moved by %v local + %v injected, want 5 in all", local, injected)
	}
	// The INSERTs' IDs go to the server; the SELECTs are answered by the
	// proxy (pgx prepares them first), one ID per local answer.
	if injected < 2 || local < 1 || local != delta("snowflake_proxy_local_answers_total") {
		t.Errorf("ids_issued_total: %v local, %v injected, %v local answers", local, injected, delta("snowflake_proxy_local_answers_total"))
	}
	t.Logf("fast-path IDs: %v local, %v injected", local, injected)
	if n := after.Value(t, "snowflake_proxy_client_sessions"); n != 2 {
		t.Errorf("snowflake_proxy_client_sessions = %v with two sessions open", n)
	}
	if n := after.Value(t, "snowflake_proxy_node_claim", "database", db, "state", "held"); n != 1 {
		t.Errorf("node claim on %s not held: %v", db, n)
	}
	// Every error kind is shown, at 0 when it never happened.
	if n := after.Value(t, "snowflake_proxy_session_errors_total", "kind", "upstream_dial"); n != 0 {
		t.Errorf("upstream_dial errors = %v", n)
	}
	for _, name := range []string{"go_goroutines", "process_open_fds", "snowflake_proxy_event_loop_entries_total",
		"snowflake_proxy_local_answers_total", "snowflake_proxy_hidden_queries_total", "snowflake_proxy_prepared_inserts_total"} {
		if mfs := after[name]; mfs == nil {
			t.Errorf("no metric %s", name)
		}
	}
	if err := c1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, a, "snowflake_proxy_client_sessions", 0)
	end := scrape(t, a)
	if d := end.Sum(t, "snowflake_proxy_sessions_ended_total") - before.Sum(t, "snowflake_proxy_sessions_ended_total"); d != 2 {
		t.Errorf("sessions_ended_total moved by %v in all, want 2", d)
	}
	if d := end.Value(t, "snowflake_proxy_sessions_ended_total", "reason", "client_closed") -
		before.Value(t, "snowflake_proxy_sessions_ended_total", "reason", "client_closed"); d != 2 {
		t.Errorf("sessions_ended_total{reason=client_closed} moved by %v, want 2 (pgx sends Terminate)", d)
	}
}

// /healthz answers while the process runs; /readyz is 503 without a node,
// with the reason in one line.
func TestAdminReadyzWithoutNode(t *testing.T) {
	a := startAdmin(t, 0)
	if code, body := get(t, a, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	code, body := get(t, a, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no node set") || strings.Count(body, "\n") != 1 {
		t.Fatalf("/readyz without a node: %d %q", code, body)
	}
}

// /readyz is 200 with a node, a serving listener and the upstream
// answering, and 503 "shutting down" once Close has begun.
func TestAdminReadyzWithNode(t *testing.T) {
	a := startAdmin(t, 3)
	if code, body := get(t, a, "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	if code, body := get(t, a, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	a.closing.Store(true) // as Close does first, before the grace period
	if code, body := get(t, a, "/readyz"); code != http.StatusServiceUnavailable || body != "not accepting clients: shutting down\n" {
		t.Fatalf("/readyz while closing: %d %q", code, body)
	}
}

// A taken admin address fails Start with one line, before anything else
// starts.
func TestAdminListenTakenAddress(t *testing.T) {
	a := startAdmin(t, 1)
	srv := pgtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := Start(ctx, Config{Listen: "127.0.0.1:0", AdminListen: a.AdminAddr(), Upstream: srv.URL("postgres"), Node: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "cannot listen on admin address") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Start on a taken admin address: %v", err)
	}
}

// waitReady polls /readyz until its status is code and its body contains
// want.
func waitReady(t *testing.T, a *App, code int, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, body := get(t, a, "/readyz")
		if got == code && strings.Contains(body, want) && strings.Count(body, "\n") == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %q after 30s, want %d with %q", got, body, code, want)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

// A second proxy with the node of a live one on a database is not ready
// (its fast path is off there), and /metrics shows the conflict; the first
// stays ready with its claim held.
func TestAdminReadyzNodeConflict(t *testing.T) {
	a, b := startAdmin(t, 5), startAdmin(t, 5)
	srv := pgtest.Shared(t)
	db := pgtest.NewDatabase(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nextval := func(p *App) {
		t.Helper()
		c, err := pgx.Connect(ctx, "postgres://"+srv.Superuser()+"@"+p.Addr()+"/"+db+"?sslmode=disable")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS snowflake"); err != nil {
			t.Fatal(err)
		}
		var id int64
		if err := c.QueryRow(ctx, "SELECT snowflake.nextval()").Scan(&id); err != nil {
			t.Fatal(err)
		}
	}
	nextval(a)
	waitReady(t, a, http.StatusOK, "ok")
	if n := scrape(t, a).Value(t, "snowflake_proxy_node_claim", "database", db, "state", "held"); n != 1 {
		t.Fatalf("claim of the first proxy not held")
	}
	nextval(b) // the shim answers: b's claim finds a's
	waitReady(t, b, http.StatusServiceUnavailable, `node 5 is held by another proxy on database "`+db+`"`)
	if n := scrape(t, b).Value(t, "snowflake_proxy_node_claim", "database", db, "state", "conflict"); n != 1 {
		t.Fatalf("conflict not in the second proxy's metrics")
	}
	// Its nextval went to the shim, counted with the reason.
	if n := scrape(t, b).Value(t, "snowflake_proxy_fastpath_fallbacks_total", "reason", "node_conflict"); n != 1 {
		t.Fatalf("fallbacks for node_conflict on the second proxy: %v, want 1", n)
	}
	waitReady(t, a, http.StatusOK, "ok")
}

// /readyz fails with the reason once the upstream stops answering, while
// /healthz still answers.
func TestAdminReadyzUpstreamDown(t *testing.T) {
	srv := pgtest.Start(t, pgserver.Options{}) // stopped by the test: a server of its own
	a := startAdminOn(t, srv, 4)
	waitReady(t, a, http.StatusOK, "ok")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, http.StatusServiceUnavailable, "upstream unreachable: ")
	if code, body := get(t, a, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz with the upstream down: %d %q", code, body)
	}
}

// With NodeAuto the claimed node is on /metrics, and /readyz fails while
// the claim cannot be renewed (its table is locked here), with the reason,
// and passes again once it is.
func TestAdminReadyzNodeClaim(t *testing.T) {
	srv := pgtest.Start(t, pgserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := Start(ctx, Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", Upstream: srv.URL("postgres"), NodeAuto: true,
		NodeMin: 40, NodeMax: 50, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeApp(t, a) })
	if a.Node() != 40 {
		t.Fatalf("node %d, want 40: the lowest of the range", a.Node())
	}
	if v := scrape(t, a).Value(t, "snowflake_proxy_node", "source", "auto"); v != 40 {
		t.Fatalf("snowflake_proxy_node{source=auto} = %v, want 40", v)
	}
	waitReady(t, a, http.StatusOK, "ok")
	c, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE snowflake_proxy.node_claims IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, http.StatusServiceUnavailable, "node claim: compat: node claim not renewed")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitReady(t, a, http.StatusOK, "ok")
}
