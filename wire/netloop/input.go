package netloop

import (
	"bufio"
	"encoding/binary"
	"io"
)

// BufferSize is the size of each of the four buffers of a session (read
// and write, both directions): large enough to batch a pipeline of small
// messages in one system call, small enough that an idle session stays
// well under 64 KiB of heap.
const BufferSize = 8 << 10

// Input is one side's buffered input: a bufio.Reader whose source changes
// with whoever relays the session. Outside a poll or a loop it reads the
// connection the blocking way; inside Poll it reads the socket with raw
// non-blocking calls (sock.go); while an event loop relays the session, a
// loop reader (loop_linux.go). The protocol's own reader (wire's
// frameReader) embeds it and decodes the messages.
type Input struct {
	R   *bufio.Reader
	Max int // the largest message accepted, length word included

	src  *sockReader // under R when the connection is a socket (see Poll); nil otherwise
	park *parker     // the pump's side of the return to the event loop (park.go); nil: none
	// tls is the Transport under the tls.Conn that R reads while a loop
	// relays a TLS side (tls.go); nil otherwise. src is then under the
	// Transport, not under R.
	tls *Transport
}

// NewInput returns an Input reading rd with a buffer of BufferSize.
func NewInput(rd io.Reader, max int) Input {
	return Input{R: bufio.NewReaderSize(rd, BufferSize), Max: max}
}

// frameState is what the front of an Input's buffer holds (front).
type frameState uint8

const (
	frameNone    frameState = iota // not yet a whole header
	framePartial                   // part of a message that fits the buffer
	frameWhole                     // a whole message: a step may take it
	// frameSlow: a header for the blocking path (an invalid or oversized
	// length; a message larger than the buffer is streamed).
	frameSlow
)

// front tells what the buffer holds, without reading. A message is a
// type byte and a length word that counts itself and the body.
func (in *Input) front() frameState {
	b := in.R.Buffered()
	if b < 5 {
		return frameNone
	}
	h, _ := in.R.Peek(5)
	l := int64(binary.BigEndian.Uint32(h[1:]))
	switch {
	case l < 4 || l > int64(in.Max) || l+1 > int64(in.R.Size()):
		return frameSlow
	case l+1 > int64(b):
		return framePartial
	}
	return frameWhole
}

// typ is the type byte of the whole message at the front.
func (in *Input) typ() byte {
	h, _ := in.R.Peek(1)
	return h[0]
}

// CanPoll reports whether the input reads a socket (Poll applies).
func (in *Input) CanPoll() bool { return in.src != nil }

// loopReady reports whether a loop can take over in: no read error kept
// for the next read, and no whole message (nor a header for the blocking
// path) buffered: the loop steps only after a readiness event.
func (in *Input) loopReady() bool {
	if in.src != nil && in.src.err != nil {
		return false
	}
	st := in.front()
	return st == frameNone || st == framePartial
}

// takeBuffered returns a copy of what in has read and not consumed,
// including what its sockReader still holds from an earlier reader.
func (in *Input) takeBuffered() []byte {
	var out []byte
	if n := in.R.Buffered(); n > 0 {
		b, _ := in.R.Peek(n)
		out = append(out, b...)
	}
	if in.src != nil && len(in.src.pre) > 0 {
		out = append(out, in.src.pre...)
	}
	return out
}

// errWouldBlock and errPollExit are what the raw readers return to bufio:
// the read would block (EAGAIN), or failed while polling (the error is
// kept in sockReader.err for the blocking read that follows). Both are
// temporary net.Errors: a crypto/tls.Conn reading through them keeps a
// partial record for the next read instead of failing for good
// (tls.go).
var (
	errWouldBlock error = transient("read would block")
	errPollExit   error = transient("read error while polling")
)

// transient is a temporary net.Error that is no timeout.
type transient string

func (e transient) Error() string   { return string(e) }
func (e transient) Timeout() bool   { return false }
func (e transient) Temporary() bool { return true }

// takeCiphertext returns what the pumps' reader of a TLS side holds
// from an earlier reader: ciphertext the tls.Conn has not read yet.
func (in *Input) takeCiphertext() []byte {
	if in.src == nil || len(in.src.pre) == 0 {
		return nil
	}
	b := in.src.pre
	in.src.pre = nil
	return b
}

// drainTLS reads into R what the tls.Conn that R reads gives without
// reading the socket: whole records it holds, and the ciphertext the
// pumps' reader holds. It returns the tls.Conn's error, if any.
func (in *Input) drainTLS(t *Transport) error {
	pr := &preReader{}
	if in.src != nil {
		pr.pre = &in.src.pre
	}
	src, inLoop := t.src, t.inLoop
	t.setSrc(pr, false)
	_, err := in.R.Peek(in.R.Buffered() + 1)
	t.setSrc(src, inLoop)
	if err == errWouldBlock {
		return nil
	}
	return err
}

// preReader gives what *pre holds, then errWouldBlock.
type preReader struct{ pre *[]byte }

func (r *preReader) Read(p []byte) (int, error) {
	if r.pre == nil || len(*r.pre) == 0 {
		return 0, errWouldBlock
	}
	return takePre(r.pre, p), nil
}

// takePre copies what *pre still holds into p, first.
func takePre(pre *[]byte, p []byte) int {
	n := copy(p, *pre)
	if *pre = (*pre)[n:]; len(*pre) == 0 {
		*pre = nil
	}
	return n
}
