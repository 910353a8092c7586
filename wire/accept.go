package wire

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// Serve accepts connections on ln until Close; it always returns a non-nil
// error (ErrServerClosed after Close). It may be called for several
// listeners.
//
// An accept error that a later accept may not meet (out of descriptors or
// memory, a connection aborted before it was accepted, a timeout) is
// retried with a delay that doubles from 5 ms to 1 s, and logged at WARN at
// most once per acceptLogEvery; the connections waiting in the listen
// backlog are accepted once descriptors are free again. Any other error
// ends Serve: it is logged at ERROR and returned, since nothing accepts on
// ln any more while the port may still be bound.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.wg.Add(1)
	s.startReaper()
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	var retry acceptRetry
	for {
		c, err := ln.Accept()
		if err == nil {
			if n := retry.ok(); n > 0 {
				s.log.Info("accepting again", "failed_accepts", n)
			}
			s.startSession(c)
			continue
		}
		if s.isClosing() {
			return ErrServerClosed
		}
		if !temporaryAccept(err) {
			s.log.Error("accept failed: no longer accepting connections", "listen", ln.Addr().String(), logError, err)
			return fmt.Errorf("wire: accept on %s: %w", ln.Addr(), err)
		}
		s.stats.acceptErrors.Add(1)
		delay, logIt, suppressed := retry.fail(time.Now())
		if logIt {
			s.log.Warn("accept failed: retrying", "listen", ln.Addr().String(), logError, err,
				"retry_in", delay.String(), "failures_not_logged", suppressed)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.closed:
			t.Stop()
			return ErrServerClosed
		}
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// temporaryAccept reports whether a later accept may succeed where this one
// failed: timeouts, exhausted descriptors, buffers or memory, an
// interrupted call, and the network errors of a pending connection that
// Linux's accept(2) passes on (to be treated like EAGAIN).
func temporaryAccept(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN,
		syscall.EPROTO, syscall.EPERM, syscall.ENETDOWN, syscall.ENETUNREACH,
		syscall.ENOPROTOOPT, syscall.EHOSTDOWN, syscall.EHOSTUNREACH, syscall.EOPNOTSUPP:
		return true
	}
	return false
}

const (
	acceptMinDelay = 5 * time.Millisecond
	acceptMaxDelay = time.Second
	// acceptLogEvery bounds the WARN lines of a run of failed accepts:
	// with EMFILE every retry fails until a session ends.
	acceptLogEvery = 10 * time.Second
)

// acceptRetry is the back-off and the log limit of one accept loop. The
// limit holds across runs of failures: at the descriptor limit, accepts
// can fail and succeed in turn as sessions end and start.
type acceptRetry struct {
	delay     time.Duration
	failures  uint64    // since the last successful accept
	runLogged bool      // a failure of this run was logged
	logged    time.Time // when a failure was last logged
	unlogged  uint64    // failures since then
}

// fail records a failed accept at now: the delay before the next attempt,
// whether to log this failure, and how many were not logged before it.
func (r *acceptRetry) fail(now time.Time) (delay time.Duration, log bool, suppressed uint64) {
	r.delay = min(max(2*r.delay, acceptMinDelay), acceptMaxDelay)
	r.failures++
	if r.logged.IsZero() || now.Sub(r.logged) >= acceptLogEvery {
		suppressed, r.unlogged, r.logged, r.runLogged = r.unlogged, 0, now, true
		return r.delay, true, suppressed
	}
	r.unlogged++
	return r.delay, false, 0
}

// ok records a successful accept. It returns the failures before it when
// one of them was logged (the recovery deserves a line then), else 0.
func (r *acceptRetry) ok() uint64 {
	if r.failures == 0 {
		return 0
	}
	n := r.failures
	if !r.runLogged {
		n = 0
	}
	r.delay, r.failures, r.runLogged = 0, 0, false
	return n
}
