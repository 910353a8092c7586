//go:build !linux

package netloop

import (
	"errors"
	"log/slog"
	"net"
)

// Event loops use epoll; elsewhere every session runs on goroutines.

// Available reports whether this platform has event loops.
const Available = false

// Loop is not available here: NewLoop fails.
type Loop struct{}

type loopReader struct{ err error }

type loopWriter struct{ pending []byte }

type uringRelay struct{}

// NewLoop fails: no event loop on this system.
func NewLoop(*slog.Logger) (*Loop, error) {
	return nil, errors.New("no event loop on this system")
}

// NewLoopIO fails: no event loop on this system.
func NewLoopIO(IO, *slog.Logger) (*Loop, error) { return NewLoop(nil) }

// URingAvailable says no: no event loop on this system.
func URingAvailable() error { return errors.New("no event loop on this system") }

// IO is epoll here, for the record: there are no loops.
func (lp *Loop) IO() IO { return IOEpoll }

// Stop does nothing here.
func (lp *Loop) Stop() {}

// Enter never takes a session here.
func (r *Relay) Enter(*Loop, [2]net.Conn, func() bool) (bool, error) { return false, nil }

// Wait is never called here.
func (r *Relay) Wait() Exit { return Exit{} }

// Leave is never called here.
func (r *Relay) Leave() ([2]net.Conn, error) {
	return [2]net.Conn{}, errors.New("no event loop on this system")
}

func shutdownFD(int, bool) {}

// threadID is 0 here: there is no loop thread to tell apart.
func threadID() int { return 0 }
