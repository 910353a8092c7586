package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

var adminLine = regexp.MustCompile(`msg="admin listening" component=admin addr=(\S+)`)

// adminAddr is the admin listener's address, from the proxy's log line
// (a process's stderr may reach the buffer after its ready line).
func adminAddr(t *testing.T, errOut *pgtest.SyncBuffer) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		changed := errOut.Changed()
		if m := adminLine.FindStringSubmatch(errOut.String()); m != nil {
			return m[1]
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no admin listening line in the log:\n%s", errOut.String())
		}
	}
}

// The proxy started from a config file with admin-listen counts on
// /metrics what the sessions did, per path: IDs answered locally and put
// into INSERTs, the fallbacks to the shim by reason (a failed transaction,
// a role without USAGE on the sequence, a per-row call), the leases, the
// catalog watch, and one upstream dial per session. The server is the
// test's own, so that the counts are exact.
func TestMetricsCountEachPath(t *testing.T) {
	srv := pgtest.Start(t, pgserver.Options{})
	db := pgtest.NewDatabase(t, srv)
	cfg := filepath.Join(t.TempDir(), "proxy.toml")
	writeConfig(t, cfg, fmt.Sprintf(`
listen = "127.0.0.1:0"
upstream = %q
node = 11
admin-listen = "127.0.0.1:0"
log-level = "info"
`, srv.URL("postgres")))
	var out, errOut pgtest.SyncBuffer
	m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }, Signals: make(chan os.Signal, 2)}
	addr, stop := runMain(t, m, &out, &errOut, "--config", cfg)
	defer stop()
	admin := adminAddr(t, &errOut)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := func(user string) *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, "postgres://"+user+"@"+addr+"/"+db+"?sslmode=disable")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	exec := func(c *pgx.Conn, sql string, args ...any) {
		t.Helper()
		if _, err := c.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	setup := connect(srv.Superuser())
	for _, sql := range []string{
		"CREATE EXTENSION snowflake",
		"CREATE SEQUENCE s",
		"CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake.nextval('s'), v int)",
		"CREATE TABLE plain (v int)",
		"CREATE ROLE nousage LOGIN",
		// An INSERT starts the database's catalog watch.
		"INSERT INTO plain VALUES (1)",
	} {
		exec(setup, sql)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		ms := pgtest.Scrape(t, admin)
		if ms.Has(t, "snowflake_proxy_catalog_watch", "database", db) && ms.Value(t, "snowflake_proxy_catalog_watch", "database", db) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the catalog watch of %s is not armed after 30s", db)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	before := pgtest.Scrape(t, admin)

	c := connect(srv.Superuser())
	var ids []int64
	nextval := func() {
		t.Helper()
		var id int64
		if err := c.QueryRow(ctx, "SELECT snowflake.nextval('s')").Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for range 3 {
		nextval()
	}
	exec(c, "INSERT INTO t (v) VALUES ($1)", 1)
	exec(c, "INSERT INTO t (v) VALUES ($1)", 2)
	exec(c, "INSERT INTO t (v) VALUES (3)", pgx.QueryExecModeSimpleProtocol)
	// Per row: the shim issues these, and the next fast-path ID waits
	// for a lease above them.
	exec(c, "SELECT snowflake.nextval('s') FROM generate_series(1, 2)")
	nextval()

	// A failed transaction: both statements reach the proxy as Queries
	// (a Parse would fail first) and the server answers 25P02.
	f := connect(srv.Superuser())
	exec(f, "BEGIN")
	if _, err := f.Exec(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("1/0 did not fail")
	}
	for _, sql := range []string{"SELECT snowflake.nextval('s')", "INSERT INTO t (v) VALUES (4)"} {
		if _, err := f.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err == nil || !strings.Contains(err.Error(), "25P02") {
			t.Fatalf("%s in a failed transaction: %v, want 25P02", sql, err)
		}
	}
	exec(f, "ROLLBACK")

	// A role without USAGE on s: the shim refuses it as the extension
	// does.
	n := connect("nousage")
	if _, err := n.Exec(ctx, "SELECT snowflake.nextval('s')"); err == nil || !strings.Contains(err.Error(), "42501") {
		t.Fatalf("nextval without USAGE: %v, want 42501", err)
	}
	after := pgtest.Scrape(t, admin)
	delta := func(name string, labels ...string) float64 {
		t.Helper()
		return after.Value(t, name, labels...) - before.Value(t, name, labels...)
	}

	for _, w := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"snowflake_proxy_ids_issued_total", []string{"path", "local"}, 4},
		{"snowflake_proxy_ids_issued_total", []string{"path", "injected"}, 3},
		{"snowflake_proxy_local_answers_total", nil, 4},
		{"snowflake_proxy_sessions_total", nil, 3},
		{"snowflake_proxy_upstream_dial_seconds", []string{"result", "ok"}, 3},
		{"snowflake_proxy_upstream_dial_seconds", []string{"result", "error"}, 0},
		{"snowflake_proxy_lease_failures_total", nil, 0},
	} {
		if d := delta(w.name, w.labels...); d != w.want {
			t.Errorf("%s%v moved by %v, want %v", w.name, w.labels, d, w.want)
		}
	}
	wantFallbacks := map[string]float64{"failed_transaction": 2, "no_usage": 1, "parse_declined": 1}
	for _, s := range after["snowflake_proxy_fastpath_fallbacks_total"].GetMetric() {
		reason := s.GetLabel()[0].GetValue()
		if d := delta("snowflake_proxy_fastpath_fallbacks_total", "reason", reason); d != wantFallbacks[reason] {
			t.Errorf("fallbacks for %s moved by %v, want %v", reason, d, wantFallbacks[reason])
		}
		delete(wantFallbacks, reason)
	}
	if len(wantFallbacks) > 0 {
		t.Errorf("fallback reasons missing from /metrics: %v", wantFallbacks)
	}
	// The first fast-path ID of s needed its first lease, the last one a
	// fresh one above the per-row calls' (a fence). Whether a caller
	// blocked for them (lease waits) depends on timing: an event loop hands
	// the statement over and the renewal may be done before it asks again
	// (generator's TestLeaseStats counts waits exactly).
	if r := delta("snowflake_proxy_lease_renewals_total"); r < 2 {
		t.Errorf("lease renewals moved by %v, want at least 2", r)
	}
	if v := after.Value(t, "snowflake_proxy_node_claim", "database", db, "state", "held"); v != 1 {
		t.Errorf("node claim on %s not held: %v", db, v)
	}
	if v := after.Value(t, "snowflake_proxy_catalog_watch", "database", db); v != 1 {
		t.Errorf("catalog watch of %s: %v, want 1", db, v)
	}
	for _, id := range ids {
		if node := id >> 12 & 1023; node != 11 {
			t.Errorf("id %d has node %d, want 11", id, node)
		}
	}
}
