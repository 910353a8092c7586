package netloop

import (
	"net"
	"testing"
	"time"
)

// ForceInLoop marks r as relayed by a loop thread (on) or not, without a
// loop, for tests of steps that must not wait there. It panics outside
// test binaries.
func ForceInLoop(r *Relay, on bool) {
	mustTest("ForceInLoop")
	r.inLoop.Store(on)
}

func mustTest(what string) {
	if !testing.Testing() {
		panic("netloop: " + what + " outside a test")
	}
}

// loopbackPair returns both ends of a loopback TCP connection.
func loopbackPair() (net.Conn, net.Conn, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	a, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	b := <-ch
	if b.err != nil {
		_ = a.Close()
		return nil, nil, b.err
	}
	return a, b.c, nil
}

// SocketPair returns both ends of a loopback TCP connection, closed when
// the test ends. For tests of the socket calls, here and in package wire.
func SocketPair(tb testing.TB) (net.Conn, net.Conn) {
	tb.Helper()
	a, b, err := loopbackPair()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, b
}
