//go:build linux

package netloop

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestPollEOFWithData: the last message and the peer's FIN arrive before
// the pump reads (a server sending FATAL and exiting). The FIN raises no
// readiness event of its own, so the pump must read again after the short
// read to see EOF instead of waiting forever.
func TestPollEOFWithData(t *testing.T) {
	a, b := socketPair(t)
	stream := msg('E', []byte("SFATAL\x00C57P01\x00Mterminating\x00\x00"))
	_, _ = a.Write(stream)
	_ = a.(*net.TCPConn).CloseWrite()
	time.Sleep(20 * time.Millisecond) // both arrive before the first read
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
