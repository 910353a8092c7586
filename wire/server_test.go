package wire

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// wireGoroutines lists the goroutines running code of this package (other
// than the test itself).
func wireGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		// The frames only: a goroutine that has returned but not yet
		// exited still names its creator (regression: such a session
		// goroutine, between wg.Done and its exit, was counted).
		frames := g
		if i := strings.Index(g, "\ncreated by "); i >= 0 {
			frames = g[:i]
		}
		if strings.Contains(frames, "snowflake-proxy/wire.(*") && !strings.Contains(g, "wire.Test") {
			out = append(out, g)
		}
	}
	return out
}

// After Close, no session goroutine remains: idle sessions, a session
// inside a long query and one stuck in startup are all ended.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	srv := pgtest.Shared(t)
	p := serveProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}})
	s, served := p.Server, p.done
	idle := connectPg(t, p.url(srv, "postgres"))
	busy := connectPg(t, p.url(srv, "postgres"))
	_ = idle
	running := make(chan error, 1)
	go func() {
		running <- busy.ExecParams(context.Background(), "SELECT pg_sleep(600)", nil, nil, nil, nil).Read().Err
	}()
	stuck, _ := net.Dial("tcp", p.addr) // never sends a startup packet
	defer stuck.Close()
	closeNowLeavesNothing(t, s, served, running)
	if st := s.Stats(); st.Active != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// Close with time to spare waits for sessions that end by themselves.
func TestCloseWaitsForSessions(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{})
	c := connectPg(t, p.url(srv, "postgres"))
	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	// The session still works while Close waits; new connections fail.
	if r := c.ExecParams(ctxT(t), "SELECT 1", nil, nil, nil, nil).Read(); r.Err != nil {
		t.Fatal(r.Err)
	}
	_ = c.Close(ctxT(t))
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []Config{{}, {Upstream: Upstream{Network: "udp", Address: "x"}}, {Upstream: Upstream{Address: "x"}, Node: 1024}} {
		if _, err := New(cfg); err == nil {
			t.Fatalf("accepted %+v", cfg)
		}
	}
}

// closeNowLeavesNothing closes s with an already expired context (sessions
// are closed at once) and checks that Serve returned, the running query
// failed, and no goroutine of this package is left.
func closeNowLeavesNothing(t *testing.T, s *Server, served, running <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close: %v", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
	if err := <-running; err == nil {
		t.Fatal("query survived Close")
	}
	if gs := wireGoroutines(); len(gs) > 0 {
		t.Fatalf("%d goroutines left after Close:\n%s", len(gs), strings.Join(gs, "\n\n"))
	}
}
