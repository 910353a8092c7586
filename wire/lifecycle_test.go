package wire

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// relayModes are the ways a session is relayed: by an event loop or by its
// pumps only, without a Rewriter (statements counted by Sync and
// ReadyForQuery) or with one (the owed queue).
func relayModes() []struct {
	name string
	cfg  Config
} {
	tracked := func() Rewriter { return &fakeRewriter{plans: snowflakePlans()} }
	return []struct {
		name string
		cfg  Config
	}{
		{"loop", Config{}},
		{"goroutines", Config{EventLoops: -1}},
		{"loop_tracked", Config{Rewriter: tracked()}},
		{"goroutines_tracked", Config{EventLoops: -1, Rewriter: tracked()}},
		{"loop_epoll", Config{EventLoopIO: "epoll"}},
		{"loop_epoll_tracked", Config{EventLoopIO: "epoll", Rewriter: tracked()}},
	}
}

// checkLoopUsed fails the test when cfg has event loops on this platform
// and no session of p entered one: the loop's path was not tested.
func checkLoopUsed(t *testing.T, p *proxy, cfg Config) {
	t.Helper()
	if EventLoopsAvailable && cfg.EventLoops >= 0 && p.Stats().LoopEntries == 0 {
		t.Fatal("no session entered an event loop")
	}
}

// wantFatal fails the test unless err carries a *pgconn.PgError
// with severity FATAL, SQLSTATE code and message msg.
func wantFatal(t *testing.T, err error, code, msg string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("want FATAL %s, got %v", code, err)
	}
	if pe.Severity != "FATAL" || pe.Code != code || pe.Message != msg {
		t.Fatalf("got %s %s %q, want FATAL %s %q", pe.Severity, pe.Code, pe.Message, code, msg)
	}
}

// receiveFatal waits, at most 10 s, for what an idle client gets next.
func receiveFatal(t *testing.T, c *pgconn.PgConn) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg, err := c.ReceiveMessage(ctx)
	if err == nil {
		t.Fatalf("got %T, want an error", msg)
	}
	return err
}

// backendRunning reports whether pid is a backend of srv whose state is
// active and whose query starts with prefix.
func backendRunning(t *testing.T, dc *pgx.Conn, pid uint32, prefix string) bool {
	t.Helper()
	var n int
	err := dc.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND starts_with(query, $2)`,
		int32(pid), prefix).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// backendGone reports whether pid is no longer a backend of srv.
func backendGone(t *testing.T, dc *pgx.Conn, pid uint32) bool {
	t.Helper()
	var n int
	if err := dc.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, int32(pid)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 0
}

func execSQL(t *testing.T, c *pgconn.PgConn, sql string) {
	t.Helper()
	if _, err := c.Exec(ctxT(t), sql).ReadAll(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestMaxClients(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{MaxClients: 2})
	url := p.url(srv, "postgres")
	a := connectPg(t, url)
	b := connectPg(t, url)
	_, err := pgconn.Connect(ctxT(t), url)
	wantFatal(t, err, "53300", "sorry, too many clients already")
	for _, c := range []*pgconn.PgConn{a, b} {
		execSQL(t, c, "SELECT 1")
	}

	// A cancel request is not a client: it is served while all slots are
	// taken.
	dc := connect(t, srv.URL("postgres"))
	running := make(chan error, 1)
	go func() {
		running <- b.ExecParams(context.Background(), "SELECT pg_sleep(600)", nil, nil, nil, nil).Read().Err
	}()
	waitUntil(t, "the statement to run", func() bool { return backendRunning(t, dc, b.PID(), "SELECT pg_sleep") })
	if err := b.CancelRequest(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var pe *pgconn.PgError
	if err := <-running; !errors.As(err, &pe) || pe.Code != "57014" {
		t.Fatalf("cancelled statement: %v, want 57014", err)
	}

	// A slot is free again once a session ends.
	_ = a.Close(ctxT(t))
	waitUntil(t, "the sessions to end", func() bool { return p.Stats().Active == 1 })
	execSQL(t, connectPg(t, url), "SELECT 1")
	if n := p.Stats().Errors["too_many_clients"]; n != 1 {
		t.Fatalf("too_many_clients = %d, want 1", n)
	}
}

// A session idle for IdleClientTimeout is ended as PostgreSQL's
// idle_session_timeout and idle_in_transaction_session_timeout end it; a
// statement running longer than the timeout is not idle.
func TestIdleClientTimeout(t *testing.T) {
	srv := pgtest.Shared(t)
	for _, m := range relayModes() {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			cfg := m.cfg
			cfg.IdleClientTimeout = 300 * time.Millisecond
			p := startProxy(t, srv, cfg)
			url := p.url(srv, "postgres")

			c := connectPg(t, url)
			execSQL(t, c, "SELECT pg_sleep(1.5)")
			execSQL(t, c, "SELECT 1")
			wantFatal(t, receiveFatal(t, c), "57P05", "terminating connection due to idle-session timeout")

			c = connectPg(t, url)
			execSQL(t, c, "BEGIN")
			wantFatal(t, receiveFatal(t, c), "25P03", "terminating connection due to idle-in-transaction timeout")

			waitUntil(t, "the sessions to end", func() bool { return p.Stats().Active == 0 })
			if n := p.Stats().Errors["idle_timeout"]; n != 2 {
				t.Fatalf("idle_timeout = %d, want 2", n)
			}
			checkLoopUsed(t, p, cfg)
		})
	}
}

// Close whose context ends before the sessions do: a client idle in a
// transaction and one waiting for its statement get FATAL 57P01, the
// statement is cancelled on the server, and the ends are logged as cuts.
func TestCloseCutsSessions(t *testing.T) {
	srv := pgtest.Shared(t)
	for _, m := range relayModes() {
		t.Run(m.name, func(t *testing.T) {
			var logs pgtest.SyncBuffer
			cfg := m.cfg
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			p := serveProxy(t, srv, cfg)
			url := p.url(srv, "postgres")
			dc := connect(t, srv.URL("postgres"))

			idle := connectPg(t, url)
			execSQL(t, idle, "BEGIN")
			execSQL(t, idle, "SELECT 1")
			busy := connectPg(t, url)
			execSQL(t, busy, "BEGIN")
			running := make(chan error, 1)
			go func() {
				running <- busy.ExecParams(context.Background(), "SELECT pg_sleep(600)", nil, nil, nil, nil).Read().Err
			}()
			waitUntil(t, "the statement to run", func() bool { return backendRunning(t, dc, busy.PID(), "SELECT pg_sleep") })

			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Close: %v", err)
			}
			if err := <-p.done; !errors.Is(err, ErrServerClosed) {
				t.Fatalf("Serve: %v", err)
			}
			const shutdownMsg = "terminating connection due to administrator command"
			wantFatal(t, <-running, "57P01", shutdownMsg)
			wantFatal(t, receiveFatal(t, idle), "57P01", shutdownMsg)
			waitUntil(t, "the cancelled backend to end", func() bool { return backendGone(t, dc, busy.PID()) })

			checkLoopUsed(t, p, cfg)
			st := p.Stats()
			if st.Errors["shutdown"] != 2 || st.EndCancels != 1 || st.Ended["shutdown_cut"] != 2 {
				t.Fatalf("shutdown = %d, end cancels = %d, ended by a cut = %d; want 2, 1, 2", st.Errors["shutdown"], st.EndCancels, st.Ended["shutdown_cut"])
			}
			out := logs.String()
			if !strings.Contains(out, `level=WARN msg="shutdown grace ended: terminating sessions" component=wire sessions=2`) {
				t.Fatalf("no WARN line with the number of sessions cut:\n%s", out)
			}
			ends := 0
			for _, l := range strings.Split(out, "\n") {
				if !strings.Contains(l, `msg="session end"`) {
					continue
				}
				ends++
				if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "outcome=shutdown_cut sqlstate=57P01 kind=shutdown client_told=true") {
					t.Fatalf("session end of a cut session: %s", l)
				}
			}
			if ends != 2 {
				t.Fatalf("%d session end lines, want 2:\n%s", ends, out)
			}
			if gs := wireGoroutines(); len(gs) > 0 {
				t.Fatalf("%d goroutines left after Close:\n%s", len(gs), strings.Join(gs, "\n\n"))
			}
		})
	}
}

// Regression: when a client went away while its statement ran, the proxy
// only closed the server connection (after ShutdownGrace), and the backend
// ran the statement to its end holding its locks. Now the proxy cancels
// it: the backend ends at once. The client is a raw one (pgconn sends a
// cancel of its own when its connection breaks): it sends the statement
// as a Query, or as Parse, Bind, Execute and Sync followed by Terminate,
// and closes its socket.
func TestClientGoneCancelsStatement(t *testing.T) {
	srv := pgtest.Shared(t)
	db := pgtest.NewDatabase(t, srv)
	pgtest.Exec(t, srv, db, "CREATE TABLE locked (x int)")
	type statement struct {
		sql, prefix string
		hold        bool // a direct transaction holds a lock the statement waits for
	}
	statements := []statement{
		{sql: "SELECT pg_sleep(600)", prefix: "SELECT pg_sleep"},
		{sql: "SELECT count(*) FROM locked", prefix: "SELECT count", hold: true},
	}
	for _, m := range relayModes() {
		for _, st := range statements {
			for _, terminate := range []bool{false, true} {
				name := m.name + "/" + st.prefix[7:] + "/query"
				if terminate {
					name = m.name + "/" + st.prefix[7:] + "/extended_terminate"
				}
				t.Run(name, func(t *testing.T) {
					clientGone(t, srv, db, m.cfg, st.sql, st.prefix, st.hold, terminate)
				})
			}
		}
	}
}

func clientGone(t *testing.T, srv *pgserver.Server, db string, cfg Config, sql, prefix string, hold, extended bool) {
	p := startProxy(t, srv, cfg)
	url := p.url(srv, db)
	dc := connect(t, srv.URL(db))
	if hold {
		tx, err := dc.Begin(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(ctxT(t), "LOCK TABLE locked IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
	}
	watch := connect(t, srv.URL(db))

	// A client leaving while idle leaves nothing to cancel.
	idle := connectPg(t, url)
	execSQL(t, idle, "SELECT 1")
	idlePID := idle.PID()
	_ = idle.Conn().Close()
	waitUntil(t, "the idle backend to end", func() bool { return backendGone(t, watch, idlePID) })

	hc, err := connectPg(t, url).Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Conn.Close()
	if extended {
		hc.Frontend.SendParse(&pgproto3.Parse{Query: sql})
		hc.Frontend.SendBind(&pgproto3.Bind{})
		hc.Frontend.SendExecute(&pgproto3.Execute{})
		hc.Frontend.SendSync(&pgproto3.Sync{})
	} else {
		hc.Frontend.SendQuery(&pgproto3.Query{String: sql})
	}
	if err := hc.Frontend.Flush(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the statement to run", func() bool { return backendRunning(t, watch, hc.PID, prefix) })
	if extended {
		hc.Frontend.Send(&pgproto3.Terminate{})
		if err := hc.Frontend.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	_ = hc.Conn.Close()
	waitUntil(t, "the backend to end", func() bool { return backendGone(t, watch, hc.PID) })
	waitUntil(t, "the session to end", func() bool { return p.Stats().Active == 0 })
	if n := p.Stats().EndCancels; n != 1 {
		t.Fatalf("EndCancels = %d, want 1", n)
	}
	checkLoopUsed(t, p, cfg)
}

// SetLimits changes MaxClients and IdleClientTimeout of a running server
// (a configuration reload): the new limit refuses or admits the next
// client, and a timeout set on a server started without one ends an idle
// session.
func TestSetLimitsWhileRunning(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{MaxClients: 1})
	url := p.url(srv, "postgres")
	a := connectPg(t, url)
	_, err := pgconn.Connect(ctxT(t), url)
	wantFatal(t, err, "53300", "sorry, too many clients already")
	p.SetLimits(2, -1)
	b := connectPg(t, url)
	execSQL(t, b, "SELECT 1")
	p.SetLimits(-1, 300*time.Millisecond)
	wantFatal(t, receiveFatal(t, a), "57P05", "terminating connection due to idle-session timeout")
	wantFatal(t, receiveFatal(t, b), "57P05", "terminating connection due to idle-session timeout")
	waitUntil(t, "the sessions to end", func() bool { return p.Stats().Active == 0 })
	p.SetLimits(-1, 0)
	c := connectPg(t, url)
	// Let c stay idle past the old timeout, timed by another connection.
	dc := connect(t, srv.URL("postgres"))
	if _, err := dc.Exec(ctxT(t), "SELECT pg_sleep(1)"); err != nil {
		t.Fatal(err)
	}
	execSQL(t, c, "SELECT 1") // not cut: the timeout is off again
}
