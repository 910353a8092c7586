package wire

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// The back-off doubles from 5 ms to 1 s and starts again after a success;
// a run of failures logs its first and then one line per acceptLogEvery,
// with the count of those not logged, also across runs (at the descriptor
// limit accepts fail and succeed in turn).
func TestAcceptRetryBackoffAndLogLimit(t *testing.T) {
	var r acceptRetry
	t0 := time.Unix(1000, 0)
	type step struct {
		at         time.Duration // since t0; -1: a successful accept
		delay      time.Duration
		log        bool
		suppressed uint64
		recovered  uint64 // for a success: what ok returns
	}
	steps := []step{
		{at: 0, delay: 5 * time.Millisecond, log: true},
		{at: time.Millisecond, delay: 10 * time.Millisecond},
		{at: 2 * time.Millisecond, delay: 20 * time.Millisecond},
		{at: -1, recovered: 3},
		{at: 3 * time.Millisecond, delay: 5 * time.Millisecond}, // a new run, within the limit: not logged
		{at: 4 * time.Millisecond, delay: 10 * time.Millisecond},
		{at: -1, recovered: 0}, // no failure of that run was logged
		{at: 5 * time.Millisecond, delay: 5 * time.Millisecond},
		{at: 6 * time.Millisecond, delay: 10 * time.Millisecond},
		{at: 7 * time.Millisecond, delay: 20 * time.Millisecond},
		{at: 8 * time.Millisecond, delay: 40 * time.Millisecond},
		{at: 9 * time.Millisecond, delay: 80 * time.Millisecond},
		{at: 10 * time.Millisecond, delay: 160 * time.Millisecond},
		{at: 11 * time.Millisecond, delay: 320 * time.Millisecond},
		{at: 12 * time.Millisecond, delay: 640 * time.Millisecond},
		{at: 13 * time.Millisecond, delay: time.Second},
		{at: 14 * time.Millisecond, delay: time.Second},
		{at: acceptLogEvery, delay: time.Second, log: true, suppressed: 14},
		{at: acceptLogEvery + time.Second, delay: time.Second},
		{at: -1, recovered: 12},
	}
	for i, s := range steps {
		if s.at < 0 {
			if n := r.ok(); n != s.recovered {
				t.Fatalf("step %d: ok() = %d, want %d", i, n, s.recovered)
			}
			continue
		}
		d, log, sup := r.fail(t0.Add(s.at))
		if d != s.delay || log != s.log || sup != s.suppressed {
			t.Fatalf("step %d: fail() = %v, %v, %d; want %v, %v, %d", i, d, log, sup, s.delay, s.log, s.suppressed)
		}
	}
}

func TestTemporaryAccept(t *testing.T) {
	for _, c := range []struct {
		err  error
		temp bool
	}{
		{acceptErr(syscall.EMFILE), true},
		{acceptErr(syscall.ENFILE), true},
		{acceptErr(syscall.ENOBUFS), true},
		{acceptErr(syscall.ENOMEM), true},
		{acceptErr(syscall.ECONNABORTED), true},
		{acceptErr(syscall.EINTR), true},
		{acceptErr(syscall.EPROTO), true},
		{&net.OpError{Op: "accept", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{acceptErr(syscall.EBADF), false},
		{acceptErr(syscall.EINVAL), false},
		{net.ErrClosed, false},
		{errors.New("listener broke"), false},
	} {
		if got := temporaryAccept(c.err); got != c.temp {
			t.Errorf("%v: temporary %v, want %v", c.err, got, c.temp)
		}
	}
}

// acceptErr is the error net.TCPListener.Accept returns for errno.
func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

// failingListener fails its first n accepts with err, then accepts from
// the real listener; failed counts the failures returned, and third, when
// not nil, is closed at the third.
type failingListener struct {
	net.Listener
	err    error
	n      int32
	failed atomic.Int32
	third  chan struct{}
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.failed.Load() < l.n {
		if l.failed.Add(1) == 3 && l.third != nil {
			close(l.third)
		}
		return nil, l.err
	}
	return l.Listener.Accept()
}

// Regression: Serve returned on the first accept error that was not a
// timeout (EMFILE under a low descriptor limit), without a log line, and
// nothing accepted on the port any more. A temporary error is now retried,
// logged once, and clients are served after it.
func TestServeRetriesTemporaryAcceptError(t *testing.T) {
	srv := pgtest.Shared(t)
	var logs pgtest.SyncBuffer
	s, err := New(Config{Upstream: Upstream{Address: srv.Addr()}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &failingListener{Listener: real, err: acceptErr(syscall.EMFILE), n: 5}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	p := &proxy{Server: s, addr: real.Addr().String(), done: served}
	c := connectPg(t, p.url(srv, "postgres"))
	if r := c.ExecParams(ctxT(t), "SELECT 1", nil, nil, nil, nil).Read(); r.Err != nil {
		t.Fatal(r.Err)
	}
	if st := s.Stats(); st.AcceptErrors != 5 {
		t.Fatalf("AcceptErrors = %d, want 5", st.AcceptErrors)
	}
	out := logs.String()
	if n := strings.Count(out, `msg="accept failed: retrying"`); n != 1 {
		t.Fatalf("%d WARN lines for 5 failed accepts in a row, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "too many open files") {
		t.Fatalf("the WARN line does not name the error:\n%s", out)
	}
	if !strings.Contains(out, `msg="accepting again"`) || !strings.Contains(out, `failed_accepts=5`) {
		t.Fatalf("no line for the recovery:\n%s", out)
	}
	_ = c.Close(ctxT(t))
	if err := s.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
}

// Any other accept error ends Serve with that error and an ERROR line.
func TestServeReturnsPermanentAcceptError(t *testing.T) {
	var logs pgtest.SyncBuffer
	s, err := New(Config{Upstream: Upstream{Address: "127.0.0.1:1"}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	cause := acceptErr(syscall.EINVAL)
	err = s.Serve(&failingListener{Listener: real, err: cause, n: 1})
	if !errors.Is(err, syscall.EINVAL) || errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve: %v, want the accept error", err)
	}
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "invalid argument") {
		t.Fatalf("no ERROR line naming the error:\n%s", out)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Close during a run of failed accepts ends Serve with ErrServerClosed,
// not with the accept error.
func TestCloseEndsAcceptRetry(t *testing.T) {
	s, err := New(Config{Upstream: Upstream{Address: "127.0.0.1:1"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	ln := &failingListener{Listener: real, err: acceptErr(syscall.ENFILE), n: 1 << 30, third: make(chan struct{})}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	select {
	case <-ln.third:
	case <-ctxT(t).Done():
		t.Fatal("Serve did not retry")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
}
