package wire

import (
	"bufio"
	"encoding/binary"
	"io"

	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

const (
	// ioBufferSize is the size of each of the four buffers of a session.
	ioBufferSize = netloop.BufferSize
	// maxStartupPacket is PostgreSQL's MAX_STARTUP_PACKET_LENGTH.
	maxStartupPacket = 10000
	// maxAuthMessage bounds client messages before authentication ends;
	// PostgreSQL's PG_MAX_AUTH_TOKEN_LENGTH is 65535.
	maxAuthMessage = 65535 + 1024
	// maxServerMessage bounds server messages the proxy buffers to inspect
	// (the server never sends more than 1 GiB in one message); other
	// server messages are streamed.
	maxServerMessage = 1 << 30
	// keepBuffer is the largest inspection buffer kept between messages;
	// a larger one (for a huge Bind) is released after use.
	keepBuffer = 64 << 10
)

// frameReader reads length-prefixed protocol messages from a buffered
// input (netloop.Input: the buffer and its source, which changes with who
// relays the session). next peeks at the header; then exactly one of
// forward, read or skip consumes the message. The slice read returns is
// valid until the next call to read.
type frameReader struct {
	netloop.Input
	buf []byte

	typ    byte
	n      int    // body length of the current message
	cur    []byte // the current message with header when peeked whole
	peeked bool
	hdr    [5]byte
}

// newFrameReader reads rd with a buffer of ioBufferSize; max bounds
// messages, length word included.
func newFrameReader(rd io.Reader, max int) frameReader {
	return frameReader{Input: netloop.NewInput(rd, max)}
}

// next peeks at the next message header.
func (f *frameReader) next() (byte, int, error) {
	h, err := f.R.Peek(5)
	if err != nil {
		if len(h) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, err
	}
	l := binary.BigEndian.Uint32(h[1:])
	if l < 4 {
		return 0, 0, protocolError("invalid message length %d", l)
	}
	if int64(l) > int64(f.Max) {
		f.typ, f.n = h[0], int(l)-4
		return h[0], int(l) - 4, &tooLarge{size: int64(l)}
	}
	f.typ, f.n = h[0], int(l)-4
	return f.typ, f.n, nil
}

type tooLarge struct{ size int64 }

func (e *tooLarge) Error() string { return "message too large" }

// forward copies the current message (header and body) to w unchanged,
// without buffering it whole.
func (f *frameReader) forward(w *bufio.Writer) error {
	n := 5 + f.n
	for n > 0 {
		if f.R.Buffered() == 0 {
			if _, err := f.R.Peek(1); err != nil {
				return unexpected(err)
			}
		}
		k := min(n, f.R.Buffered())
		p, _ := f.R.Peek(k)
		if _, err := w.Write(p); err != nil {
			return err
		}
		_, _ = f.R.Discard(k)
		n -= k
	}
	return nil
}

// body returns the current message's body without consuming it when it
// fits the read buffer (no copy), otherwise it reads it into buf. The slice
// is valid until consume, pass or the next call to next.
func (f *frameReader) body() ([]byte, error) {
	if 5+f.n <= f.R.Size() {
		p, err := f.R.Peek(5 + f.n)
		if err != nil {
			return nil, unexpected(err)
		}
		f.cur, f.peeked = p, true
		return p[5:], nil
	}
	f.peeked = false
	return f.read()
}

// consume ends the current message after body.
func (f *frameReader) consume() {
	if f.peeked {
		_, _ = f.R.Discard(len(f.cur))
		f.cur, f.peeked = nil, false
	}
}

// pass writes the current message unchanged after body, and consumes it.
func (f *frameReader) pass(w *bufio.Writer) error {
	var err error
	if f.peeked {
		_, err = w.Write(f.cur)
	} else {
		f.hdr[0] = f.typ
		pgmsg.FinishLen(f.hdr[:], 0, f.n)
		if _, err = w.Write(f.hdr[:]); err == nil {
			_, err = w.Write(f.buf[:f.n])
		}
	}
	f.consume()
	return err
}

// read consumes the current message and returns its body (a copy).
func (f *frameReader) read() ([]byte, error) {
	_, _ = f.R.Discard(5)
	if cap(f.buf) < f.n {
		f.buf = make([]byte, f.n, max(f.n, 256))
	}
	b := f.buf[:f.n]
	if _, err := io.ReadFull(f.R, b); err != nil {
		return nil, unexpected(err)
	}
	return b, nil
}

// release drops an inspection buffer grown for an exceptional message.
func (f *frameReader) release() {
	if cap(f.buf) > keepBuffer {
		f.buf = nil
	}
}

// skip discards the current message, however large.
func (f *frameReader) skip() error {
	n := int64(5) + int64(f.n)
	for n > 0 {
		k := int(min(n, 1<<30))
		d, err := f.R.Discard(k)
		n -= int64(d)
		if err != nil {
			return unexpected(err)
		}
	}
	return nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// terminate is the Terminate message the proxy sends a server whose client
// left.
var terminate = pgmsg.AppendEmpty(nil, pgmsg.TypeTerminate)
