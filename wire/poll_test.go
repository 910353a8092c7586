//go:build unix

package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// pollAll runs the pumps' read loop on fr (poll, then one blocking message)
// and returns the raw messages seen until the reader fails.
func pollAll(t *testing.T, fr *frameReader) ([]byte, error) {
	t.Helper()
	var got bytes.Buffer
	w := bufio.NewWriter(&got)
	step := func(typ byte) error { return fr.forward(w) }
	for {
		if err := fr.poll(step); err != nil {
			t.Fatalf("step failed: %v", err)
		}
		if _, _, err := fr.next(); err != nil {
			_ = w.Flush()
			return got.Bytes(), err
		}
		if err := fr.forward(w); err != nil {
			_ = w.Flush()
			return got.Bytes(), err
		}
	}
}

// TestPollSplitAndLarge sends messages cut at every awkward place (inside
// the header, inside the body), one larger than the read buffer, and bytes
// buffered before the switch to the socket reader; everything must come
// out once and in order, then EOF.
func TestPollSplitAndLarge(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 3*ioBufferSize)
	stream := encodeAll(&pgproto3.Query{String: "SELECT 1"}, &pgproto3.Sync{},
		&pgproto3.CopyData{Data: big}, &pgproto3.Query{String: "SELECT 2"}, &pgproto3.Terminate{})
	a, b := socketPair(t)
	fr := frameReader{r: bufio.NewReaderSize(b, ioBufferSize), max: defaultMaxMessage}
	// The first 7 bytes arrive before the switch and sit in the old buffer.
	if _, err := a.Write(stream[:7]); err != nil {
		t.Fatal(err)
	}
	if _, err := fr.r.Peek(7); err != nil {
		t.Fatal(err)
	}
	fr.usePoll(b)
	if fr.src == nil {
		t.Fatal("no sockReader for a TCP connection")
	}
	go func() {
		rest := stream[7:]
		for _, n := range []int{1, 2, 3, 9, 4000, 9000, 1, 30000} {
			n = min(n, len(rest))
			_, _ = a.Write(rest[:n])
			rest = rest[n:]
			time.Sleep(2 * time.Millisecond)
		}
		_, _ = a.Write(rest)
		_ = a.(*net.TCPConn).CloseWrite()
	}()
	got, err := pollAll(t, &fr)
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
	a, b := socketPair(t)
	fr := frameReader{r: bufio.NewReaderSize(b, ioBufferSize), max: defaultMaxMessage}
	fr.usePoll(b)
	_, _ = a.Write(encodeAll(&pgproto3.Sync{}))
	// An unread byte at close makes the peer send RST: ECONNRESET.
	_ = a.(*net.TCPConn).SetLinger(0)
	_ = a.Close()
	_, err := pollAll(t, &fr)
	var ne *net.OpError
	if err == io.EOF || !errors.As(err, &ne) {
		t.Fatalf("err = %v, want a *net.OpError (connection reset)", err)
	}
}

// TestPollDeadline checks that a deadline set while a pump waits in poll
// (Server.Close aborting sessions) ends the wait with a timeout.
func TestPollDeadline(t *testing.T) {
	_, b := socketPair(t)
	fr := frameReader{r: bufio.NewReaderSize(b, ioBufferSize), max: defaultMaxMessage}
	fr.usePoll(b)
	time.AfterFunc(20*time.Millisecond, func() { _ = b.SetReadDeadline(time.Now()) })
	_, err := pollAll(t, &fr)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err = %v, want a timeout", err)
	}
}

// TestSockWriterLarge writes more than the socket buffers hold at once:
// the writer must wait in the poller (EAGAIN) and deliver every byte.
func TestSockWriterLarge(t *testing.T) {
	a, b := socketPair(t)
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

// TestPollEOFWithData: the last message and the peer's FIN arrive before
// the pump reads (a server sending FATAL and exiting). The FIN raises no
// readiness event of its own, so the pump must read again after the short
// read to see EOF instead of waiting forever.
func TestPollEOFWithData(t *testing.T) {
	a, b := socketPair(t)
	stream := encodeAll(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "57P01", Message: "terminating"})
	_, _ = a.Write(stream)
	_ = a.(*net.TCPConn).CloseWrite()
	time.Sleep(20 * time.Millisecond) // both arrive before the first read
	fr := frameReader{r: bufio.NewReaderSize(b, ioBufferSize), max: defaultMaxMessage}
	fr.usePoll(b)
	done := make(chan error, 1)
	go func() {
		got, err := pollAll(t, &fr)
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

// socketPair returns both ends of a loopback TCP connection.
func socketPair(tb testing.TB) (net.Conn, net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		tb.Fatal("accept failed")
	}
	tb.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

var errBenchDone = errors.New("benchmark done")

// BenchmarkRelaySocket relays messages between real sockets the way the
// pumps do in steady state: frameReader.poll (read without the EAGAIN
// double read, wait in the network poller) and sockWriter (raw writes),
// one flush per batch. A feeder writes one Bind/Execute/Sync pipeline at a
// time and waits for it on the far side, as a client waits for its answer.
// Reported allocations are per relayed message: 0.
func BenchmarkRelaySocket(b *testing.B) {
	stream := encodeAll(&pgproto3.Bind{PreparedStatement: "s1", Parameters: [][]byte{[]byte("1")}},
		&pgproto3.Execute{}, &pgproto3.Sync{})
	const perBatch = 3
	feed, in := socketPair(b)
	out, sink := socketPair(b)
	fr := frameReader{r: bufio.NewReaderSize(in, ioBufferSize), max: defaultMaxMessage}
	fr.usePoll(in)
	bw := bufio.NewWriterSize(out, ioBufferSize)
	useSockWriter(bw, out)
	if fr.src == nil {
		b.Fatal("no sockReader for a TCP connection")
	}
	batches := (b.N + perBatch - 1) / perBatch
	go func() {
		buf := make([]byte, len(stream))
		for i := 0; i < batches; i++ {
			if _, err := feed.Write(stream); err != nil {
				return
			}
			if _, err := io.ReadFull(sink, buf); err != nil {
				return
			}
		}
	}()
	b.ReportAllocs()
	b.SetBytes(int64(len(stream) / perBatch))
	b.ResetTimer()
	n := 0
	step := func(typ byte) error {
		if err := fr.forward(bw); err != nil {
			return err
		}
		if fr.r.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
		if n++; n == batches*perBatch {
			return errBenchDone
		}
		return nil
	}
	for {
		err := fr.poll(step)
		if err == errBenchDone {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Fatal("poll left the fast path for a small message")
	}
}
