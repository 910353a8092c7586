package app

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// TestControlUpstreamChecks: where client sessions and the proxy's own
// connections go, checked at start against real PgBouncers and servers.
// Through a pooler in transaction mode the control connections' session
// state (the claim's advisory lock, the catalog watch's LISTEN) would land
// on server connections other clients then use: the proxy refuses that,
// and refuses a control upstream that is another server than the
// sessions'.
func TestControlUpstreamChecks(t *testing.T) {
	srv := pgtest.Shared(t)
	other := pgtest.Start(t, pgserver.Options{})
	tx := pgtest.StartPgBouncer(t, pgtest.PgBouncerOptions{Host: "127.0.0.1", Port: srv.Port(), PoolMode: "transaction", PoolSize: 4})
	session := pgtest.StartPgBouncer(t, pgtest.PgBouncerOptions{Host: "127.0.0.1", Port: srv.Port(), PoolMode: "session", PoolSize: 4})
	via := func(p *pgtest.PgBouncer) string {
		return "postgres://postgres@" + p.Addr() + "/postgres?sslmode=disable"
	}
	for _, c := range []struct {
		name              string
		upstream, control string
		want              string // error text; empty: starts
	}{
		{"direct", srv.URL("postgres"), "", ""},
		{"transaction pooler alone", via(tx), "", "is a connection pooler in transaction mode"},
		{"transaction pooler for both", via(tx), via(tx), "--control-upstream postgres://postgres@" + tx.Addr()},
		{"transaction pooler, control direct", via(tx), srv.URL("postgres"), ""},
		{"session pooler alone", via(session), "", ""},
		{"session pooler, control direct", via(session), srv.URL("postgres"), ""},
		{"control to another server", srv.URL("postgres"), other.URL("postgres"), "reach different servers"},
		{"pooler in front of another server", via(tx), other.URL("postgres"), "reach different servers"},
		{"control without upstream", "", srv.URL("postgres"), "--control-upstream needs --upstream"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			a, err := Start(ctx, Config{Listen: "127.0.0.1:0", Upstream: c.upstream, ControlUpstream: c.control, Node: 1,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if c.want == "" {
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				if c.control != "" && !strings.Contains(a.Upstream(), "control connections to ") {
					t.Errorf("Upstream() = %q, does not name the control upstream", a.Upstream())
				}
				closeApp(t, a)
				return
			}
			if err == nil {
				closeApp(t, a)
				t.Fatalf("Start succeeded, want an error with %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Start: %v; want an error with %q", err, c.want)
			}
		})
	}
}
