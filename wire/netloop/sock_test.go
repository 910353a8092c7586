//go:build unix

package netloop

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// msg encodes one protocol message: a type byte, a length word, a body.
func msg(typ byte, body []byte) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

// forwarder is the pumps' read loop on in, reduced to copying every
// message to w: Poll with a step that copies the message at the front,
// then one message the blocking way.
type forwarder struct {
	in *Input
	w  *bufio.Writer
}

func (f *forwarder) Step(_ Side, _ byte) error {
	h, _ := f.in.R.Peek(5)
	n := 1 + int(binary.BigEndian.Uint32(h[1:]))
	b, _ := f.in.R.Peek(n)
	if _, err := f.w.Write(b); err != nil {
		return err
	}
	_, err := f.in.R.Discard(n)
	return err
}

func (f *forwarder) EndTurn(Side) error { return nil }

// blocking copies the next message the blocking way, however large.
func (f *forwarder) blocking() error {
	h, err := f.in.R.Peek(5)
	if err != nil {
		return err
	}
	_, err = io.CopyN(f.w, f.in.R, 1+int64(binary.BigEndian.Uint32(h[1:])))
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// pollAll runs the pumps' read loop on in and returns the raw messages
// seen until the reader fails.
func pollAll(t *testing.T, in *Input) ([]byte, error) {
	t.Helper()
	var got bytes.Buffer
	f := &forwarder{in: in, w: bufio.NewWriter(&got)}
	for {
		if err := in.Poll(f, Client); err != nil {
			t.Errorf("step failed: %v", err)
			return nil, err
		}
		if err := f.blocking(); err != nil {
			_ = f.w.Flush()
			return got.Bytes(), err
		}
	}
}

// TestPollSplitAndLarge sends messages cut at every awkward place (inside
// the header, inside the body), one larger than the read buffer, and bytes
// buffered before the switch to the socket reader; everything must come
// out once and in order, then EOF.
func TestPollSplitAndLarge(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 3*BufferSize)
	var stream []byte
	for _, m := range [][]byte{msg('Q', []byte("SELECT 1\x00")), msg('S', nil), msg('d', big), msg('Q', []byte("SELECT 2\x00")), msg('X', nil)} {
		stream = append(stream, m...)
	}
	a, b := SocketPair(t)
	in := NewInput(b, 1<<20)
	// The first 7 bytes arrive before the switch and sit in the old buffer.
	if _, err := a.Write(stream[:7]); err != nil {
		t.Fatal(err)
	}
	if _, err := in.R.Peek(7); err != nil {
		t.Fatal(err)
	}
	in.UsePoll(b)
	if !in.CanPoll() {
		t.Fatal("no sockReader for a TCP connection")
	}
	go func() {
		rest := stream[7:]
		for _, n := range []int{1, 2, 3, 9, 4000, 9000, 1, 30000} {
			n = min(n, len(rest))
			_, _ = a.Write(rest[:n])
			rest = rest[n:]
			// Spacing, not synchronisation: the pieces should arrive in
			// separate reads, and the result must be the same when not.
			time.Sleep(2 * time.Millisecond)
		}
		_, _ = a.Write(rest)
		_ = a.(*net.TCPConn).CloseWrite()
	}()
	got, err := pollAll(t, &in)
	if err != io.EOF {
		t.Fatalf("end: %v, want EOF", err)
	}
	if !bytes.Equal(got, stream) {
		t.Fatalf("relayed %d bytes, want %d identical", len(got), len(stream))
	}
}

// TestPollReadError checks that a read error met while polling reaches
// the blocking read that follows as a net.Error, not as EOF.
func TestPollReadError(t *testing.T) {
	a, b := SocketPair(t)
	in := NewInput(b, 1<<20)
	in.UsePoll(b)
	_, _ = a.Write(msg('S', nil))
	// An unread byte at close makes the peer send RST: ECONNRESET.
	_ = a.(*net.TCPConn).SetLinger(0)
	_ = a.Close()
	_, err := pollAll(t, &in)
	var ne *net.OpError
	if err == io.EOF || !errors.As(err, &ne) {
		t.Fatalf("err = %v, want a *net.OpError (connection reset)", err)
	}
}

// TestPollDeadline checks that a deadline set while a pump waits in Poll
// (a session being aborted) ends the wait with a timeout.
func TestPollDeadline(t *testing.T) {
	_, b := SocketPair(t)
	in := NewInput(b, 1<<20)
	in.UsePoll(b)
	time.AfterFunc(20*time.Millisecond, func() { _ = b.SetReadDeadline(time.Now()) })
	_, err := pollAll(t, &in)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err = %v, want a timeout", err)
	}
}

// TestSockWriterLarge writes more than the socket buffers hold at once:
// the writer must wait in the poller (EAGAIN) and deliver every byte.
func TestSockWriterLarge(t *testing.T) {
	a, b := SocketPair(t)
	w := newSockWriter(a)
	if w == nil {
		t.Fatal("no sockWriter for a TCP connection")
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	done := make(chan []byte)
	go func() {
		got, _ := io.ReadAll(b)
		done <- got
	}()
	n, err := w.Write(data)
	if err != nil || n != len(data) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	_ = a.(*net.TCPConn).CloseWrite()
	if got := <-done; !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, want %d identical", len(got), len(data))
	}
}
