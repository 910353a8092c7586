//go:build linux

package netloop

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/testenv"
)

// copySteps relays every message to the other side unchanged, and hands
// the session over, before consuming anything, at a message of type 'X'.
type copySteps struct {
	in  [2]*Input
	out [2]*bufio.Writer
}

func (c *copySteps) Step(side Side, typ byte) error {
	if typ == 'X' {
		return ErrHandover
	}
	h, _ := c.in[side].R.Peek(5)
	n := 1 + int(binary.BigEndian.Uint32(h[1:]))
	msg, _ := c.in[side].R.Peek(n)
	_, _ = c.out[1-side].Write(msg)
	_, _ = c.in[side].R.Discard(n)
	return nil
}

func (c *copySteps) EndTurn(side Side) error { return c.out[1-side].Flush() }

func message(typ byte, body string) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

// loopSession is a relayed session's four ends: the test's client and
// server, and the relay's.
type loopSession struct {
	client, server net.Conn
	steps          *copySteps
	r              *Relay
}

func enterSession(t *testing.T, lp *Loop) *loopSession {
	t.Helper()
	client, cin := SocketPair(t)
	sout, server := SocketPair(t)
	ls := enterRelay(t, lp, cin, sout)
	ls.client, ls.server = client, server
	return ls
}

// enterRelay has lp relay between the relay's ends cin (client side) and
// sout (server side), copying, and fails the test unless the loop took
// the session.
func enterRelay(t *testing.T, lp *Loop, cin, sout net.Conn) *loopSession {
	t.Helper()
	cIn, sIn := NewInput(cin, 1<<20), NewInput(sout, 1<<20)
	st := &copySteps{in: [2]*Input{&cIn, &sIn}, out: [2]*bufio.Writer{bufio.NewWriterSize(cin, BufferSize), bufio.NewWriterSize(sout, BufferSize)}}
	r := NewRelay(st, noParking{}, st.in, st.out)
	taken, err := r.Enter(lp, [2]net.Conn{cin, sout}, func() bool { return false })
	if !taken || err != nil {
		t.Fatalf("the loop did not take the session: %v %v", taken, err)
	}
	return &loopSession{steps: st, r: r}
}

// leave waits, with a deadline, for the loop to hand the session over, and
// restores its connections (closed when the test ends).
func (s *loopSession) leave(t *testing.T) Exit {
	t.Helper()
	got := make(chan Exit, 1)
	go func() { got <- s.r.Wait() }()
	var x Exit
	select {
	case x = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not hand the session over in 10 s")
	}
	conns, err := s.r.Leave()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conns[0].Close(); _ = conns[1].Close() })
	return x
}

func startURingLoop(t *testing.T) *Loop {
	t.Helper()
	if err := URingAvailable(); err != nil {
		testenv.CannotRun(t, "io_uring is not available (the kernel, or a sandbox's seccomp profile, refuses it): %v", err)
	}
	lp, err := NewLoopIO(IOURing, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if lp.IO() != IOURing {
		t.Fatalf("loop runs %v", lp.IO())
	}
	return lp
}

// More sessions receiving at once than the loop has receive buffers: a
// receive that finds none (ENOBUFS) is armed again once buffers are back,
// and every byte arrives, in order. Then a message that needs the pumps
// hands each session over with that message, and what followed it, still
// to read.
func TestURingLoopShortOfBuffers(t *testing.T) {
	defer func(n int) { recvBuffers = n }(recvBuffers)
	recvBuffers = 2
	lp := startURingLoop(t)
	defer lp.Stop()
	const sessions, trips = 12, 200
	ss := make([]*loopSession, sessions)
	for i := range ss {
		ss[i] = enterSession(t, lp)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*sessions)
	for i, s := range ss {
		wg.Add(2)
		go func() { // the server: echoes every message back
			defer wg.Done()
			buf := make([]byte, 64)
			for range trips {
				h := buf[:5]
				if _, err := io.ReadFull(s.server, h); err != nil {
					errs <- err
					return
				}
				body := buf[5 : 1+int(binary.BigEndian.Uint32(h[1:]))]
				if _, err := io.ReadFull(s.server, body); err != nil {
					errs <- err
					return
				}
				if _, err := s.server.Write(buf[:5+len(body)]); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() { // the client
			defer wg.Done()
			for j := range trips {
				want := message('Q', fmt.Sprintf("session %d trip %d", i, j))
				if _, err := s.client.Write(want); err != nil {
					errs <- err
					return
				}
				got := make([]byte, len(want))
				_ = s.client.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadFull(s.client, got); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("session %d trip %d: got %q, want %q", i, j, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, s := range ss {
		rest := append(message('X', "hand over"), message('Q', "after")...)
		if _, err := s.client.Write(rest); err != nil {
			t.Fatal(err)
		}
		if x := s.leave(t); x.Side != Client || x.Err != nil {
			t.Fatalf("exit %+v, want the client's side and no error", x)
		}
		// The pumps read on from the input: the message handed over
		// first, then what came after it.
		got := make([]byte, len(rest))
		if _, err := io.ReadFull(s.steps.in[Client].R, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, rest) {
			t.Fatalf("after the handover the input holds %q, want %q", got, rest)
		}
	}
	if lp.ur.noBuffers.Load() == 0 {
		t.Error("no receive found the loop short of buffers: the test did not test that")
	}
	t.Logf("%d receives armed again for want of a buffer", lp.ur.noBuffers.Load())
	if epoll, sides, _ := lp.Registered(); epoll != 1 || sides != 0 {
		t.Fatalf("after every session left: %d, %d registered, want 1, 0", epoll, sides)
	}
}

// A server that does not read: the loop queues what the client sends
// behind the send in flight until the bound, then hands the session over
// with the bytes the socket did not take as the pumps' pending write, in
// order after what the server already has.
func TestURingLoopSlowPeerHandsOverUnsentBytes(t *testing.T) {
	lp := startURingLoop(t)
	defer lp.Stop()
	s := enterSession(t, lp)
	var sent bytes.Buffer
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			m := message('Q', fmt.Sprintf("%08d", i)+string(bytes.Repeat([]byte{'p'}, 1000)))
			if _, err := s.client.Write(m); err != nil {
				done <- err
				return
			}
			sent.Write(m)
			if !s.r.InLoop() && i > 0 {
				done <- nil
				return
			}
		}
	}()
	x := s.leave(t)
	if x.Side != Client || x.Err != nil {
		t.Fatalf("exit %+v, want the client's side and no error", x)
	}
	pending := s.r.pending[Server]
	if len(pending) == 0 {
		t.Fatal("handed over with nothing pending for the slow server")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_ = s.client.Close()
	rest, err := io.ReadAll(s.steps.in[Client].R)
	if err != nil {
		t.Fatal(err)
	}
	// What reached the server, what is pending for it, and what the
	// client input still holds, in that order, are what the client sent.
	reached := make([]byte, sent.Len()-len(pending)-len(rest))
	_ = s.server.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(s.server, reached); err != nil {
		t.Fatal(err)
	}
	got := append(append(reached, pending...), rest...)
	if !bytes.Equal(got, sent.Bytes()) {
		t.Fatalf("the server's bytes, the pending ones and the input's differ from what the client sent from byte %d of %d",
			commonPrefix(got, sent.Bytes()), sent.Len())
	}
	t.Logf("%d bytes sent: %d reached the server, %d pending, %d in the input", sent.Len(), len(reached), len(pending), len(rest))
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// Regression: a session that wrote to one side and left the loop in the
// same batch of completions, with nothing else in flight, left its write
// on the loop's list of sides to send after its slot was freed, and the
// loop thread dereferenced the empty slot (a nil pointer panic that took
// the process down). Here the server's message and the client's pair of
// messages (one relayed, one that hands the session over) arrive
// together, many times: whatever the loop relayed before the handover
// reached the server or is pending for it, and the loop lives on.
func TestURingLoopWriteThenLeaveInOneBatch(t *testing.T) {
	lp := startURingLoop(t)
	defer lp.Stop()
	relayed := message('Q', "relayed")
	for i := range 200 {
		s := enterSession(t, lp)
		if _, err := s.server.Write(message('N', "notice")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.Write(append(append([]byte(nil), relayed...), message('X', "hand over")...)); err != nil {
			t.Fatal(err)
		}
		s.leave(t)
		got := s.r.pending[Server]
		if len(got) < len(relayed) {
			rest := make([]byte, len(relayed)-len(got))
			_ = s.server.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(s.server, rest); err != nil {
				t.Fatalf("session %d: %v", i, err)
			}
			got = append(rest, got...)
		}
		if !bytes.Equal(got, relayed) {
			t.Fatalf("session %d: the server got and has pending %q, want %q", i, got, relayed)
		}
	}
}

// Regression: a receive of a leaving session that completed with ENOBUFS
// (it found no buffer, and read nothing) was kept as the side's read
// error, and the pump would have ended the session with "no buffer space
// available". A real read error is still kept.
func TestURingLeavingReceiveWithoutBufferIsNoReadError(t *testing.T) {
	r := &Relay{rd: [2]*loopReader{{fd: -1}, {fd: -1}}, ur: &uringRelay{leaving: true}}
	u := &uringLoop{}
	u.received(r, Server, cqe{res: -int32(syscall.ENOBUFS)})
	u.received(r, Server, cqe{res: -int32(syscall.ECANCELED)})
	if err := r.rd[Server].err; err != nil {
		t.Fatalf("read error %v after receives that read nothing", err)
	}
	u.received(r, Server, cqe{res: -int32(syscall.ECONNRESET)})
	if err := r.rd[Server].err; !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read error %v, want ECONNRESET kept for the pump", err)
	}
}
