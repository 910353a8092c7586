package wire

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// loggedProxy starts a proxy in front of srv whose log (debug and up)
// goes to logs.
func loggedProxy(t *testing.T, srv *pgserver.Server, cfg Config, logs *pgtest.SyncBuffer) *proxy {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return startProxy(t, srv, cfg)
}

// sessionEnd waits for the one "session end" line of the log and checks
// its level and that it has every want; never an err=<nil>.
func sessionEnd(t *testing.T, logs *pgtest.SyncBuffer, level string, want ...string) string {
	t.Helper()
	var line string
	waitUntil(t, "the session end line", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `msg="session end"`) {
				line = l
				return true
			}
		}
		return false
	})
	if !strings.Contains(line, "level="+level+" ") {
		t.Errorf("session end at the wrong level, want %s: %s", level, line)
	}
	for _, w := range want {
		if !strings.Contains(line, w) {
			t.Errorf("session end without %q: %s", w, line)
		}
	}
	if strings.Contains(line, "err=<nil>") {
		t.Errorf("session end with err=<nil>: %s", line)
	}
	return line
}

// Regression: a login the server refused was logged at INFO with
// err=<nil>. It is a WARN line naming the outcome, the server's SQLSTATE
// and message, and never the password.
func TestSessionEndLoginRefused(t *testing.T) {
	srv := pgtest.Start(t, pgserver.Options{Password: "secret",
		HBA: []string{"local all all trust", "host all all 127.0.0.1/32 scram-sha-256"}})
	var logs pgtest.SyncBuffer
	p := loggedProxy(t, srv, Config{}, &logs)
	url := strings.Replace(p.url(srv, "postgres"), srv.Superuser()+"@", srv.Superuser()+":wrong-password@", 1)
	_, err := pgconn.Connect(ctxT(t), url)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "28P01" {
		t.Fatalf("wrong password: %v, want 28P01", err)
	}
	line := sessionEnd(t, &logs, "WARN", "outcome=login_refused", "sqlstate=28P01", `message="password authentication failed for user`)
	if strings.Contains(logs.String(), "wrong-password") {
		t.Fatalf("the password is in the log: %s", line)
	}
	if n := p.Stats().Ended["login_refused"]; n != 1 {
		t.Fatalf("Stats.Ended[login_refused] = %d, want 1", n)
	}
}

// A client that closes with Terminate, one that just goes away, and one
// that closes while the proxy drains end at INFO with what they did.
func TestSessionEndByTheClient(t *testing.T) {
	srv := pgtest.Shared(t)
	for _, c := range []struct {
		name, outcome string
		end           func(t *testing.T, p *proxy, c *pgconn.PgConn)
	}{
		{"terminate", "client_closed", func(t *testing.T, _ *proxy, c *pgconn.PgConn) { _ = c.Close(ctxT(t)) }},
		{"disconnect", "client_disconnected", func(t *testing.T, _ *proxy, c *pgconn.PgConn) { _ = c.Conn().Close() }},
		{"during the drain", "drained", func(t *testing.T, p *proxy, c *pgconn.PgConn) {
			closed := make(chan error, 1)
			go func() { closed <- p.Close(ctxT(t)) }()
			waitUntil(t, "Close to begin", func() bool {
				select {
				case <-p.closed:
					return true
				default:
					return false
				}
			})
			_ = c.Close(ctxT(t))
			if err := <-closed; err != nil {
				t.Fatalf("Close: %v", err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs pgtest.SyncBuffer
			p := loggedProxy(t, srv, Config{}, &logs)
			conn := connectPg(t, p.url(srv, "postgres"))
			execSQL(t, conn, "SELECT 1")
			c.end(t, p, conn)
			line := sessionEnd(t, &logs, "INFO", "outcome="+c.outcome)
			if strings.Contains(line, "sqlstate=") || strings.Contains(line, "err=") {
				t.Fatalf("a client's own end with an error or SQLSTATE: %s", line)
			}
			waitUntil(t, "the session to be counted", func() bool { return p.Stats().Ended[c.outcome] == 1 })
		})
	}
}

// The server ends the session (pg_terminate_backend): WARN with the
// server's FATAL, which the client got as is.
func TestSessionEndUpstreamTerminated(t *testing.T) {
	srv := pgtest.Shared(t)
	for _, m := range relayModes() {
		t.Run(m.name, func(t *testing.T) {
			var logs pgtest.SyncBuffer
			p := loggedProxy(t, srv, m.cfg, &logs)
			c := connectPg(t, p.url(srv, "postgres"))
			execSQL(t, c, "SELECT 1")
			dc := connect(t, srv.URL("postgres"))
			if _, err := dc.Exec(ctxT(t), "SELECT pg_terminate_backend($1)", c.PID()); err != nil {
				t.Fatal(err)
			}
			wantFatal(t, receiveFatal(t, c), "57P01", "terminating connection due to administrator command")
			sessionEnd(t, &logs, "WARN", "outcome=upstream_terminated", "sqlstate=57P01",
				`message="terminating connection due to administrator command"`)
			checkLoopUsed(t, p, m.cfg)
		})
	}
}

// cutter relays TCP connections to the server until cut, which closes
// them all: for the proxy the server's end of its connection breaks
// without a word, as when a network path or a server host dies.
type cutter struct {
	ln    net.Listener
	conns chan net.Conn
}

func newCutter(t *testing.T, upstream string) *cutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln, conns: make(chan net.Conn, 16)}
	t.Cleanup(func() { _ = ln.Close(); c.cut() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = in.Close()
				continue
			}
			c.conns <- in
			c.conns <- out
			go func() { _, _ = io.Copy(out, in) }()
			go func() { _, _ = io.Copy(in, out) }()
		}
	}()
	return c
}

// cut closes every relayed connection.
func (c *cutter) cut() {
	for {
		select {
		case conn := <-c.conns:
			_ = conn.Close()
		default:
			return
		}
	}
}

// Regression: a session whose server connection broke was logged at INFO
// with err=<nil>. The client gets 08006, and the end is WARN upstream_lost
// with that SQLSTATE and the cause.
func TestSessionEndUpstreamLost(t *testing.T) {
	srv := pgtest.Shared(t)
	for _, m := range relayModes() {
		t.Run(m.name, func(t *testing.T) {
			relay := newCutter(t, srv.Addr())
			cfg := m.cfg
			cfg.Upstream = Upstream{Network: "tcp", Address: relay.ln.Addr().String()}
			var logs pgtest.SyncBuffer
			p := loggedProxy(t, srv, cfg, &logs)
			c := connectPg(t, p.url(srv, "postgres"))
			execSQL(t, c, "SELECT 1")
			relay.cut()
			wantFatal(t, receiveFatal(t, c), "08006", "snowflake-proxy: server closed the connection unexpectedly")
			sessionEnd(t, &logs, "WARN", "outcome=upstream_lost", "sqlstate=08006", "kind=upstream_io", "err=")
			checkLoopUsed(t, p, m.cfg)
		})
	}
}
