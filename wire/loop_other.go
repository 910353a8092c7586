//go:build !linux

package wire

import (
	"errors"
	"log/slog"
)

// Event loops use epoll; elsewhere every session runs on goroutines.

const loopAvailable = false

type eventLoop struct{}

type loopReader struct{ err error }

type loopWriter struct{ pending []byte }

type loopExit struct {
	client bool
	err    error
}

func newEventLoop(*slog.Logger) (*eventLoop, error) {
	return nil, errors.New("no event loop on this system")
}

func (lp *eventLoop) stop() {}

func (ss *session) serveInLoop(*eventLoop) (bool, error) { return false, nil }

func shutdownFD(int) {}

func shutdownReadFD(int) {}
