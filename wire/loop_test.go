//go:build linux

package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

// Pass-through traffic in both protocols, pipelined or not, stays in the
// event loop; the first statement with a generated value hands the session
// to its goroutines, which carry on with it, and later traffic still works.
func TestLoopRelaysPassThroughThenHandsOver(t *testing.T) {
	srv, db, p, sf := snowflakeSetup(t)
	c := connect(t, p.url(srv, db))
	ctx := ctxT(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		for i := 0; i < 50; i++ {
			var n int
			if err := c.QueryRow(ctx, "SELECT $1::int + 1", mode, i).Scan(&n); err != nil || n != i+1 {
				t.Fatalf("mode %v: %d, %v", mode, n, err)
			}
		}
	}
	br := c.SendBatch(ctx, &pgx.Batch{QueuedQueries: []*pgx.QueuedQuery{{SQL: "SELECT 1"}, {SQL: "SELECT 2"}, {SQL: "SELECT 3"}}})
	for i := 1; i <= 3; i++ {
		var n int
		if err := br.QueryRow().Scan(&n); err != nil || n != i {
			t.Fatalf("batch %d: %d, %v", i, n, err)
		}
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.LoopEntries != 1 || st.Handovers != 0 {
		t.Fatalf("after pass-through: %d sessions in the loop, %d handovers; want 1, 0", st.LoopEntries, st.Handovers)
	}

	var id int64
	if err := c.QueryRow(ctx, "SELECT snowflake.nextval()", pgx.QueryExecModeSimpleProtocol).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if id&1023 != 5 || sf.calls.Load() != 1 {
		t.Fatalf("id %d (node %d), %d generator calls: want node 5 and 1 call", id, id&1023, sf.calls.Load())
	}
	if st := p.Stats(); st.Handovers != 1 {
		t.Fatalf("%d handovers after a generated value, want 1", st.Handovers)
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT 41 + 1").Scan(&n); err != nil || n != 42 {
		t.Fatalf("after the handover: %d, %v", n, err)
	}
}

// After a handover the session returns to the loop as soon as both pumps
// wait for input, and generated values are then served on the loop's
// thread: no further handover while the generator has a lease.
func TestLoopReturnsAndServesGeneratedValues(t *testing.T) {
	srv, db, p, sf := snowflakeSetup(t)
	c := connect(t, p.url(srv, db))
	ctx := ctxT(t)
	var id int64
	// The first call needs the session state (a hidden query): handover.
	if err := c.QueryRow(ctx, "SELECT snowflake.nextval()", pgx.QueryExecModeSimpleProtocol).Scan(&id); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the return to the loop", func() bool { return p.Stats().LoopEntries == 2 })
	for i := 0; i < 100; i++ {
		args := []any{pgx.QueryExecModeSimpleProtocol}
		sql := "SELECT snowflake.nextval()"
		if i%2 == 1 { // Parse/Bind with an injected parameter
			args = []any{pgx.QueryExecModeCacheStatement, int64(0)}
			sql = "SELECT snowflake.nextval() + $1::int8 * 0 AS x"
		}
		var next int64
		if err := c.QueryRow(ctx, sql, args...).Scan(&next); err != nil {
			t.Fatal(err)
		}
		if next <= id || next&1023 != 5 {
			t.Fatalf("call %d: %d after %d", i, next, id)
		}
		id = next
	}
	if st := p.Stats(); st.LoopEntries != 2 || st.Handovers != 1 || sf.calls.Load() != 101 {
		t.Fatalf("%d entries, %d handovers, %d generator calls; want 2, 1, 101", st.LoopEntries, st.Handovers, sf.calls.Load())
	}
}

// Regression guard for the loop's would-wait path: when the generator
// cannot issue without waiting, the statement is handed over untouched
// (simple Query, and Bind with its portal record restored) and the pumps
// answer it with a generated value.
func TestLoopHandsOverWhenGeneratorWouldWait(t *testing.T) {
	srv, db, p, sf := snowflakeSetup(t)
	c := connect(t, p.url(srv, db))
	ctx := ctxT(t)
	var id int64
	if err := c.QueryRow(ctx, "SELECT snowflake.nextval() + $1::int8 * 0 AS x", int64(0)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the return to the loop", func() bool { return p.Stats().LoopEntries == 2 })
	sf.wait.Store(true)
	for i, q := range []struct {
		sql  string
		mode pgx.QueryExecMode
		args []any
	}{
		{"SELECT snowflake.nextval()", pgx.QueryExecModeSimpleProtocol, nil},
		{"SELECT snowflake.nextval() + $1::int8 * 0 AS x", pgx.QueryExecModeCacheStatement, []any{int64(0)}},
		{"SELECT snowflake.nextval() AS a, $1::text AS b, $2::int8 AS c", pgx.QueryExecModeExec, []any{"b", int64(3)}},
	} {
		entries := p.Stats().LoopEntries
		var next int64
		var dest []any = []any{&next}
		if len(q.args) == 2 {
			var b string
			var c3 int64
			dest = append(dest, &b, &c3)
		}
		if err := c.QueryRow(ctx, q.sql, append([]any{q.mode}, q.args...)...).Scan(dest...); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if next <= id || next&1023 != 5 {
			t.Fatalf("%d: %d after %d", i, next, id)
		}
		id = next
		if st := p.Stats(); st.Handovers != uint64(i)+2 {
			t.Fatalf("%d: %d handovers, want %d", i, st.Handovers, i+2)
		}
		waitUntil(t, "the return to the loop", func() bool { return p.Stats().LoopEntries == entries+1 })
	}
}

// A session whose every statement needs the pumps (a result row larger
// than the read buffer) is not moved back and forth each time: the back-off
// doubles the messages it spends on its goroutines before each return.
func TestLoopBackOff(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}})
	c := connect(t, p.url(srv, "postgres"))
	for i := 0; i < 300; i++ {
		var got string
		if err := c.QueryRow(ctxT(t), "SELECT repeat('ab', 10000 + $1::int)", i).Scan(&got); err != nil || len(got) != 20000+2*i {
			t.Fatalf("%d: %d bytes, %v", i, len(got), err)
		}
	}
	// Four free returns, then after 2, 4, ... 512 messages on the
	// goroutines (3 per statement): at most 14 entries for 300 statements,
	// where returning every time would make 300.
	if st := p.Stats(); st.LoopEntries < 5 || st.LoopEntries > 14 {
		t.Fatalf("%d entries to the loop for 300 large rows, want 5..14", st.LoopEntries)
	}
}

// Without event loops every session runs on goroutines.
func TestLoopDisabled(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}, EventLoops: -1})
	c := connect(t, p.url(srv, "postgres"))
	var n int
	if err := c.QueryRow(ctxT(t), "SELECT 1").Scan(&n); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if st := p.Stats(); st.LoopEntries != 0 {
		t.Fatalf("%d sessions in the loop with EventLoops -1", st.LoopEntries)
	}
}

// A client that does not read a large result: the socket stops taking the
// loop's writes, the session is handed over with what was not written,
// and the client gets every row, in order, once it reads.
func TestLoopSlowReaderGetsEverything(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}})
	s := startRaw(t, p.addr, srv.Superuser(), "postgres")
	const rows = 300000 // about 9.2 MB of DataRows: more than the sockets buffer
	b, _ := (&pgproto3.Query{String: fmt.Sprintf("SELECT i, repeat('x', 10) FROM generate_series(1, %d) i", rows)}).Encode(nil)
	if _, err := s.c.Write(b); err != nil {
		t.Fatal(err)
	}
	// Nothing is read until the loop has given the session back.
	waitUntil(t, "the handover", func() bool { return p.Stats().Handovers == 1 })
	fe := pgproto3.NewFrontend(s.c, io.Discard)
	next := 1
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			if got := string(m.Values[0]); got != fmt.Sprint(next) {
				t.Fatalf("row %d: got %q", next, got)
			}
			next++
		case *pgproto3.ErrorResponse:
			t.Fatalf("error: %s", m.Message)
		}
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			break
		}
	}
	if next != rows+1 {
		t.Fatalf("got %d rows, want %d", next-1, rows)
	}
}

// Messages larger than the read buffer, from either side, are streamed by
// the pumps after a handover, intact.
func TestLoopLargeMessages(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}})
	c := connect(t, p.url(srv, "postgres"))
	var got string
	if err := c.QueryRow(ctxT(t), "SELECT repeat('ab', 50000)").Scan(&got); err != nil || got != strings.Repeat("ab", 50000) {
		t.Fatalf("large DataRow: %d bytes, %v", len(got), err)
	}
	if st := p.Stats(); st.Handovers != 1 {
		t.Fatalf("%d handovers after a large DataRow, want 1", st.Handovers)
	}
	c2 := connect(t, p.url(srv, "postgres"))
	big := strings.Repeat("z", 40000)
	if err := c2.QueryRow(ctxT(t), "SELECT '"+big+"'::text", pgx.QueryExecModeSimpleProtocol).Scan(&got); err != nil || got != big {
		t.Fatalf("large Query: %d bytes, %v", len(got), err)
	}
	if st := p.Stats(); st.Handovers != 2 {
		t.Fatalf("%d handovers after a large Query, want 2", st.Handovers)
	}
}

// A client that vanishes while its session is in the loop ends the session
// and its backend; Terminate does too.
func TestLoopClientGoneEndsBackend(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}})
	direct := connect(t, srv.URL("postgres"))
	backends := func(app string) int {
		var n int
		if err := direct.QueryRow(ctxT(t), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, how := range []string{"close", "terminate"} {
		app := "loop_gone_" + how
		c, err := pgconn.Connect(ctxT(t), p.url(srv, "postgres")+"&application_name="+app)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Exec(ctxT(t), "SELECT 1").Close(); err != nil {
			t.Fatal(err)
		}
		if backends(app) != 1 {
			t.Fatalf("%s: no backend", how)
		}
		if how == "close" {
			_ = c.Conn().Close() // no Terminate
		} else {
			_ = c.Close(ctxT(t))
		}
		waitUntil(t, how+": the backend's exit", func() bool { return backends(app) == 0 })
	}
	waitUntil(t, "sessions' end", func() bool { return p.Stats().Active == 0 })
	if st := p.Stats(); st.LoopEntries != 2 || st.Handovers != 2 {
		t.Fatalf("%d sessions in the loop, %d handovers; want 2, 2", st.LoopEntries, st.Handovers)
	}
}

// A backend terminated while its session is in the loop: the client gets
// the server's FATAL error, then the end of the connection.
func TestLoopBackendTerminated(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}})
	s := startRaw(t, p.addr, srv.Superuser(), "postgres")
	s.query("SET application_name = 'loop_terminated'")
	direct := connect(t, srv.URL("postgres"))
	var ok bool
	if err := direct.QueryRow(ctxT(t), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'loop_terminated'").Scan(&ok); err != nil || !ok {
		t.Fatal(ok, err)
	}
	fe := pgproto3.NewFrontend(s.c, io.Discard)
	msg, err := fe.Receive()
	if e, isErr := msg.(*pgproto3.ErrorResponse); err != nil || !isErr || e.Code != "57P01" || e.Severity != "FATAL" {
		t.Fatalf("got %#v, %v; want FATAL 57P01", msg, err)
	}
	if msg, err := fe.Receive(); !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		t.Fatalf("after the FATAL: %#v, %v; want the end of the connection", msg, err)
	}
	if st := p.Stats(); st.LoopEntries != 1 || st.Handovers != 1 {
		t.Fatalf("%d sessions in the loop, %d handovers; want 1, 1", st.LoopEntries, st.Handovers)
	}
}

// Close ends sessions resting in the loop (an idle one and one waiting for
// a long query) and stops the loops: no goroutine of this package remains.
func TestLoopCloseLeavesNoGoroutines(t *testing.T) {
	srv := pgtest.Shared(t)
	p := serveProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}, EventLoops: 2})
	s, served := p.Server, p.done
	app := fmt.Sprintf("loop_close_%d", time.Now().UnixNano())
	idle := connectPg(t, p.url(srv, "postgres"))
	_ = idle
	busy := connectPg(t, p.url(srv, "postgres")+"&application_name="+app)
	direct := connect(t, srv.URL("postgres"))
	t.Cleanup(func() { // the backend sleeps on after its client is gone
		_, _ = direct.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app)
	})
	running := make(chan error, 1)
	go func() { running <- busy.Exec(context.Background(), "SELECT pg_sleep(600)").Close() }()
	waitUntil(t, "the long query", func() bool {
		var n int
		_ = direct.QueryRow(ctxT(t),
			"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query = 'SELECT pg_sleep(600)'", app).Scan(&n)
		return n == 1
	})
	if st := s.Stats(); st.LoopEntries != 2 || st.Handovers != 0 {
		t.Fatalf("%d sessions in the loop, %d handovers; want 2, 0", st.LoopEntries, st.Handovers)
	}
	closeNowLeavesNothing(t, s, served, running)
}

// Regression: a session handed over while its second descriptor was being
// added to the loop (its client had sent a message that needed the pumps)
// left that descriptor registered after its close, and the loop then spun
// on its events. Here the client sends such a message (larger than the
// read buffer) exactly then, and the test waits until the loop has seen
// its event before the second addition: the session must not be handed
// over before it is wholly registered, and once it has ended only the
// loop's own pipe may remain registered.
func TestLoopHandoverDuringRegistration(t *testing.T) {
	srv := pgtest.Shared(t)
	// The epoll loop's registration; an io_uring loop registers a session
	// on its own thread, in one step.
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}, EventLoops: 1, EventLoopIO: "epoll"})
	var c net.Conn
	handedEarly := make(chan bool, 1)
	hook := func(r *netloop.Relay) {
		netloop.TestHookBetweenAdds.Store(nil)
		seen := make(chan struct{}, 1)
		unknown := func(int32) {
			select {
			case seen <- struct{}{}:
			default:
			}
		}
		netloop.TestHookUnknownEvent.Store(&unknown)
		defer netloop.TestHookUnknownEvent.Store(nil)
		b, _ := (&pgproto3.Query{String: "SELECT '" + strings.Repeat("q", 20000) + "'"}).Encode(nil)
		if _, err := c.Write(b); err != nil {
			t.Error(err)
		}
		// The client's descriptor is in the epoll set: its event comes,
		// and the loop, which knows no side of it yet, must ignore it.
		select {
		case <-seen:
			handedEarly <- !r.InLoop()
		case <-time.After(10 * time.Second):
			t.Error("the loop did not report the client's message as an event of an unregistered side")
			handedEarly <- !r.InLoop()
		}
	}
	netloop.TestHookBetweenAdds.Store(&hook)
	t.Cleanup(func() { netloop.TestHookBetweenAdds.Store(nil) })
	s := startRawHooked(t, p.addr, srv.Superuser(), "postgres", &c)
	if <-handedEarly {
		t.Error("the loop handed the session over before its second descriptor was registered")
	}
	if got := s.untilReady(); !strings.Contains(string(got), strings.Repeat("q", 20000)) {
		t.Fatal("no answer to the large query")
	}
	s.c.Close()
	waitUntil(t, "the session's end", func() bool { return p.Stats().Active == 0 })
	assertLoopsEmpty(t, p)
}

// startRawHooked is startRaw with the connection stored in *c before the
// startup, for hooks that run while the session starts.
func startRawHooked(t *testing.T, addr, user, db string, c *net.Conn) *rawSession {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	*c = conn
	t.Cleanup(func() { conn.Close() })
	b, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": user, "database": db}}).Encode(nil)
	_, _ = conn.Write(b)
	s := &rawSession{t: t, c: conn}
	s.untilReady()
	return s
}

// assertLoopsEmpty checks that only each loop's own pipe is registered.
func assertLoopsEmpty(t *testing.T, p *proxy) {
	t.Helper()
	p.Server.mu.Lock()
	loops := p.Server.loops
	p.Server.mu.Unlock()
	for _, lp := range loops {
		epoll, sides, err := lp.Registered()
		if err != nil {
			t.Fatal(err)
		}
		if epoll != 1 || sides != 0 {
			t.Fatalf("%d descriptors registered with the loop and %d sides left after every session ended, want 1 (its pipe) and 0", epoll, sides)
		}
	}
}

// Many sessions moving in and out of the loop at once, then ending, leave
// only the loop's own pipe registered.
func TestLoopHandoversLeaveNothingRegistered(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}, EventLoops: 1})
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		go func() {
			c, err := pgx.Connect(context.Background(), p.url(srv, "postgres"))
			if err != nil {
				errs <- err
				return
			}
			defer c.Close(context.Background())
			for j := 0; j < 40; j++ {
				var got string
				// Alternately a row larger than the read buffer (handover)
				// and a small one (the session goes back to the loop).
				if err := c.QueryRow(context.Background(), "SELECT repeat('x', $1::int)", 20000*(j%2)+1).Scan(&got); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for i := 0; i < 16; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "sessions' end", func() bool { return p.Stats().Active == 0 })
	if st := p.Stats(); st.Handovers < 16 {
		t.Fatalf("only %d handovers: the test did not move sessions", st.Handovers)
	}
	assertLoopsEmpty(t, p)
}

// Regression (node-postgres, under load): after the client's Terminate the
// server closed its end before the client pump had recorded that the
// client was leaving, and the server pump sent the client a FATAL 08006
// "server closed the connection unexpectedly". A client that terminates
// gets nothing more, only the end of the connection.
func TestTerminateGetsNoError(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}})
	terminate, _ := (&pgproto3.Terminate{}).Encode(nil)
	for i := 0; i < 100; i++ {
		s := startRaw(t, p.addr, srv.Superuser(), "postgres")
		if _, err := s.c.Write(terminate); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(s.c)
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		if len(rest) > 0 {
			t.Fatalf("session %d: %d bytes after Terminate, want none: %q", i, len(rest), rest)
		}
		s.c.Close()
	}
}

func TestDefaultEventLoops(t *testing.T) {
	for _, c := range []struct{ procs, loops int }{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 2}, {8, 4}, {64, 32}} {
		if got := DefaultEventLoops(c.procs); got != c.loops {
			t.Errorf("DefaultEventLoops(%d) = %d, want %d", c.procs, got, c.loops)
		}
	}
}
