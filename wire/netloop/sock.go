//go:build unix

package netloop

import (
	"bufio"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// sockReader is the reader under an Input's bufio.Reader when the
// connection exposes its descriptor (TCP and Unix sockets, not TLS).
// Outside a poll it reads like the connection. Inside one (Input.Poll) it
// reads the descriptor directly with a raw, non-blocking system call.
//
// It does not skip the read that fails with EAGAIN after a short read, as
// an event loop with level-triggered readiness can: the runtime's poller is
// edge-triggered, and a FIN or RST that arrived together with the last data
// raises no new event, so a pump that waited without reading again would
// never see the peer's close (TestPollReadError, TestPollEOFWithData).
type sockReader struct {
	conn    net.Conn
	rc      syscall.RawConn
	fd      int    // valid while polling
	polling bool   // inside Input.Poll
	err     error  // a read error met while polling, returned by the next Read
	pre     []byte // bytes buffered before the switch to this reader, returned first
}

// syscallConn returns c's syscall.RawConn, or nil when c has no descriptor
// (a TLS connection, a test pipe).
func syscallConn(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// newSockReader returns a reader for c, or nil when c has no descriptor.
// buffered is what the previous reader of c had buffered (copied).
func newSockReader(c net.Conn, buffered []byte) *sockReader {
	rc := syscallConn(c)
	if rc == nil {
		return nil
	}
	s := &sockReader{conn: c, rc: rc}
	if len(buffered) > 0 {
		s.pre = append([]byte(nil), buffered...)
	}
	return s
}

// readRaw reads fd once with a raw system call, retrying EINTR: the
// socket does not block, so the goroutine keeps its P (see
// sockWriter.write). len(p) must be positive.
func readRaw(fd int, p []byte) (int, syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e != syscall.EINTR {
			return int(r), e
		}
	}
}

func (s *sockReader) Read(p []byte) (int, error) {
	if len(s.pre) > 0 {
		return takePre(&s.pre, p), nil
	}
	if s.err != nil {
		err := s.err
		s.err = nil
		return 0, err
	}
	if !s.polling {
		MayWait("a blocking socket read")
		return s.conn.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, e := readRaw(s.fd, p)
	switch {
	case e == syscall.EAGAIN:
		return 0, errWouldBlock
	case e != 0:
		s.err = opError("read", s.conn, e)
		return 0, errPollExit
	case n == 0:
		s.err = io.EOF
		return 0, errPollExit
	}
	return n, nil
}

func opError(op string, c net.Conn, e syscall.Errno) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(),
		Err: os.NewSyscallError(op, e)}
}

// sockWriter is the writer under a session's bufio.Writers when the
// connection is a socket. It writes with raw system calls inside
// RawConn.Write: a write to a non-blocking socket never blocks, but on a
// loopback connection it runs the receiver's network stack and wakes the
// receiver, which can take long enough for the runtime's sysmon to hand the
// goroutine's P to another thread, waking one, for nothing; a raw system
// call keeps the P. A full socket buffer (EAGAIN) waits in the network
// poller as net.Conn.Write does.
type sockWriter struct {
	conn  net.Conn
	rc    syscall.RawConn
	f     func(fd uintptr) bool // w.write, bound once: no allocation per Write
	p     []byte
	n     int
	errno syscall.Errno
}

// newSockWriter returns a writer for c, or nil when c has no descriptor.
func newSockWriter(c net.Conn) *sockWriter {
	rc := syscallConn(c)
	if rc == nil {
		return nil
	}
	w := &sockWriter{conn: c, rc: rc}
	w.f = w.write
	return w
}

func (w *sockWriter) write(fd uintptr) bool {
	for len(w.p) > 0 {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&w.p[0])), uintptr(len(w.p)))
		switch e {
		case 0:
			w.n += int(r)
			w.p = w.p[int(r):]
		case syscall.EINTR:
		case syscall.EAGAIN:
			MayWait("a socket write the peer is slow to read")
			return false
		default:
			w.errno = e
			return true
		}
	}
	return true
}

func (w *sockWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	w.p, w.n, w.errno = p, 0, 0
	err := w.rc.Write(w.f)
	n := w.n
	w.p = nil
	if w.errno != 0 {
		return n, opError("write", w.conn, w.errno)
	}
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return n, err
}

// UseSockWriter makes bw write to c through raw system calls (sockWriter)
// when c is a socket. bw must have been flushed.
func UseSockWriter(bw *bufio.Writer, c net.Conn) {
	if tc := asTLS(c); tc != nil {
		// The records, not the plaintext, go through the raw writes.
		if w := newSockWriter(tc.t.rawConn()); w != nil {
			tc.t.setDst(w)
			bw.Reset(tc.rw)
		}
		return
	}
	if w := newSockWriter(c); w != nil {
		bw.Reset(w)
	}
}

// UsePoll switches in to read c through a sockReader (see Poll) when c is
// a socket, keeping what in had buffered.
func (in *Input) UsePoll(c net.Conn) {
	if tc := asTLS(c); tc != nil {
		// R goes on reading the tls.Conn; the raw reads are the
		// Transport's, under it.
		raw := tc.t.rawConn()
		if in.src != nil && in.src.conn == raw {
			return
		}
		if s := newSockReader(raw, nil); s != nil {
			in.src = s
			tc.t.setSrc(s, false)
		}
		return
	}
	if in.src != nil && in.src.conn == c {
		return // already (Relay.Leave)
	}
	var buffered []byte
	if n := in.R.Buffered(); n > 0 {
		buffered, _ = in.R.Peek(n)
	}
	s := newSockReader(c, buffered)
	if s == nil {
		return
	}
	in.src = s
	in.R.Reset(s)
}

// Poll calls steps.Step for every message of side that arrives whole in
// the read buffer, reading the socket with raw non-blocking system calls
// and waiting for readiness in the runtime's network poller between
// arrivals, all inside one RawConn.Read: no net.Conn.Read per arrival, and
// the goroutine keeps its P during the reads (see sockWriter). It returns
// a step's first error; ErrWantLoop when the pumps stop for the event loop
// (park.go); or nil when the caller must take the next message the
// blocking way: one larger than the read buffer, a malformed or oversized
// header, a read error (kept for that blocking read), or a deadline or
// close of the connection. A step must consume exactly the message it is
// given.
func (in *Input) Poll(steps Stepper, side Side) error {
	s := in.src
	var stepErr error
	stop := false
	_ = s.rc.Read(func(fd uintptr) bool {
		if in.park != nil && in.park.unpark() {
			stop = true
			return true
		}
		s.fd, s.polling = int(fd), true
		defer func() { s.polling = false }()
		for {
			switch in.front() {
			case frameSlow:
				return true
			case frameWhole:
				if stepErr = steps.Step(side, in.typ()); stepErr != nil {
					return true
				}
				continue
			}
			if _, err := in.R.Peek(in.R.Buffered() + 1); err != nil {
				if err == errWouldBlock && in.park != nil && in.park.park() {
					stop = true
					return true
				}
				return err != errWouldBlock
			}
		}
	})
	if stepErr == nil && in.park != nil && (stop || in.park.unpark()) {
		return ErrWantLoop
	}
	return stepErr
}
