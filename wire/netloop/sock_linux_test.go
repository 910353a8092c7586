//go:build linux

package netloop

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestPollEOFWithData: the last message and the peer's FIN arrive before
// the pump reads (a server sending FATAL and exiting). The FIN raises no
// readiness event of its own, so the pump must read again after the short
// read to see EOF instead of waiting forever.
func TestPollEOFWithData(t *testing.T) {
	a, b := SocketPair(t)
	stream := msg('E', []byte("SFATAL\x00C57P01\x00Mterminating\x00\x00"))
	_, _ = a.Write(stream)
	_ = a.(*net.TCPConn).CloseWrite()
	waitPeerClosed(t, b) // both have arrived before the first read
	in := NewInput(b, 1<<20)
	in.UsePoll(b)
	done := make(chan error, 1)
	go func() {
		got, err := pollAll(t, &in)
		if err == nil && !bytes.Equal(got, stream) {
			err = errors.New("wrong bytes")
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != io.EOF {
			t.Fatalf("err = %v, want EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the pump waits forever for a FIN that arrived with the data")
	}
}

// waitPeerClosed waits, at most 5 s, until c's peer has shut down writing
// and everything it sent before is in c's receive buffer (EPOLLRDHUP: the
// FIN comes after the data on a TCP stream).
func waitPeerClosed(t *testing.T, c net.Conn) {
	t.Helper()
	rc := syscallConn(c)
	var werr error
	if err := rc.Control(func(fd uintptr) {
		ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			werr = err
			return
		}
		defer syscall.Close(ep)
		ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP, Fd: int32(fd)}
		if werr = syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, int(fd), &ev); werr != nil {
			return
		}
		var evs [1]syscall.EpollEvent
		for {
			n, err := syscall.EpollWait(ep, evs[:], 5000)
			switch {
			case err == syscall.EINTR:
				continue
			case err != nil:
				werr = err
			case n == 0:
				werr = errors.New("no FIN from the peer within 5 s")
			}
			return
		}
	}); err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		t.Fatal(werr)
	}
}
