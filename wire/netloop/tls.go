package netloop

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// TLSConn is a TLS connection that an event loop can relay: a
// crypto/tls.Conn over a Transport. The handshake, the pumps and a loop
// only change what the Transport reads from and writes to
// (docs/tls-loop.md). After a TLS 1.3 handshake with an AES-GCM suite the
// records are the connection's own (own, record13.go); otherwise the
// tls.Conn stays the record layer for the connection's whole life.
type TLSConn struct {
	*tls.Conn
	t  *Transport
	rw *recordWriter // the writer of plaintext under a session's bufio.Writer
	rs readState     // what the tls.Conn holds, as far as its reads tell (Read)

	server       bool
	keys         *secretLog
	noOwnRecords bool // tests: keep the tls.Conn's records

	// hsMu holds off a second handshake until the first one's switch is
	// done; shaken (under hsMu) says it is. ready is set after it: own
	// and layer, written by switchRecords before, are read only once
	// ready is seen.
	hsMu   sync.Mutex
	shaken bool
	ready  atomic.Bool
	// own is the record layer after the switch, nil when the tls.Conn's
	// stays.
	own   *records13
	layer string
}

// TLSClient returns the client side of a TLS connection over raw, not
// yet shaken hands.
func TLSClient(raw net.Conn, cfg *tls.Config) *TLSConn {
	t := newTransport(raw)
	l := &secretLog{}
	return newTLSConn(tls.Client(t, withSecretLog(cfg, l)), t, l, false)
}

// TLSServer returns the server side of a TLS connection over raw, not
// yet shaken hands.
func TLSServer(raw net.Conn, cfg *tls.Config) *TLSConn {
	t := newTransport(raw)
	l := &secretLog{}
	return newTLSConn(tls.Server(t, withSecretLog(cfg, l)), t, l, true)
}

func newTLSConn(tc *tls.Conn, t *Transport, keys *secretLog, server bool) *TLSConn {
	c := &TLSConn{Conn: tc, t: t, keys: keys, server: server}
	c.rw = &recordWriter{c: c}
	t.exact, t.hs = true, &handshakeWrites{}
	return c
}

// HandshakeContext runs the handshake (crypto/tls's), then moves the
// connection to its own records when it can (switchRecords). A Read or
// Write before it runs it the same way, as crypto/tls would.
func (c *TLSConn) HandshakeContext(ctx context.Context) error {
	c.hsMu.Lock()
	defer c.hsMu.Unlock()
	if err := c.Conn.HandshakeContext(ctx); err != nil {
		return err
	}
	if !c.shaken {
		c.shaken = true
		c.switchRecords()
		c.ready.Store(true)
	}
	return nil
}

// records returns the connection's own record layer, nil when the
// tls.Conn's stays, once the handshake ran (it runs it if not).
func (c *TLSConn) records() (*records13, error) {
	if !c.ready.Load() {
		if err := c.HandshakeContext(context.Background()); err != nil {
			return nil, err
		}
	}
	return c.own, nil
}

// Handshake is HandshakeContext without a context.
func (c *TLSConn) Handshake() error { return c.HandshakeContext(context.Background()) }

// RecordLayer says what seals and opens the connection's records after
// its handshake: "own TLS 1.3" or "crypto/tls".
func (c *TLSConn) RecordLayer() string {
	if !c.ready.Load() || c.layer == "" {
		return "crypto/tls"
	}
	return c.layer
}

// Write writes plaintext p: sealed by the connection's own records after
// the switch, by the tls.Conn otherwise.
func (c *TLSConn) Write(p []byte) (int, error) {
	r, err := c.records()
	if err != nil {
		return 0, err
	}
	if r != nil {
		return r.Write(p)
	}
	return c.Conn.Write(p)
}

// CloseWrite sends close_notify.
func (c *TLSConn) CloseWrite() error {
	if c.ready.Load() && c.own != nil {
		return c.own.closeNotify()
	}
	return c.Conn.CloseWrite()
}

// Close sends close_notify and closes the socket. As with crypto/tls, a
// Close during a Write (to break it off) or before the handshake ended
// closes the socket alone.
func (c *TLSConn) Close() error {
	if !c.ready.Load() || c.own == nil {
		return c.Conn.Close()
	}
	nerr := c.own.closeNotifyIfIdle()
	if err := c.t.Close(); err != nil {
		return err
	}
	if nerr != nil {
		return fmt.Errorf("tls: failed to send closeNotify alert (but connection was closed anyway): %w", nerr)
	}
	return nil
}

// Read reads plaintext: from the connection's own records after the
// switch (records13.Read), otherwise from the tls.Conn. From the
// tls.Conn: in a loop, once the Transport has read the socket for this
// turn and the tls.Conn is known to hold neither plaintext nor a whole
// record, it returns errWouldBlock at once: the tls.Conn would only have
// reached the Transport for the same answer, allocating the reader it
// passes it (crypto/tls's readFromUntil) on the way. That saves one
// allocation per turn and side (docs/tls-loop.md, "Allocations").
func (c *TLSConn) Read(p []byte) (int, error) {
	r, err := c.records()
	if err != nil {
		return 0, err
	}
	if r != nil {
		return r.Read(p)
	}
	if len(p) > 0 && c.rs.empty && c.t.inLoop && c.t.drained {
		return 0, errWouldBlock
	}
	n, err := c.Conn.Read(p)
	c.rs.update(n, len(p), err, &c.t.rc)
	return n, err
}

// readState is what a TLSConn's reader knows of what its tls.Conn holds.
// Reader only: the goroutine or loop thread that reads the connection.
//
// The tls.Conn holds nothing whole (empty) after a read that its
// Transport answered with errWouldBlock: it reads the Transport only
// when it has no plaintext left and no whole record. From there, each
// read that returns data shorter than asked took that data from one
// record, a different one each time, and left no plaintext behind; so
// once as many such reads were made as whole records came through the
// Transport since, the tls.Conn holds none of them. Anything else (an
// error, a read that filled its buffer, a stream whose framing the
// counter does not follow) leaves the state unknown until the next
// errWouldBlock, and reads go to the tls.Conn as before.
type readState struct {
	empty   bool // the tls.Conn holds no plaintext and no whole record
	counted bool // since base: every read returned data shorter than asked
	base    int  // recordCounter.whole when the tls.Conn last held nothing whole
	reads   int  // reads with data since base
}

func (s *readState) update(n, asked int, err error, rc *recordCounter) {
	switch {
	case rc.broken:
		*s = readState{}
	case err == errWouldBlock:
		*s = readState{empty: true, counted: true, base: rc.whole}
	case err != nil || n == 0 || n == asked:
		*s = readState{}
	case s.counted:
		s.reads++
		s.empty = rc.whole-s.base <= s.reads
	}
}

// recordCounter follows the TLS record framing of the ciphertext a
// Transport gives its tls.Conn, from the first byte, and counts the
// records that came whole. Anything that is no record header (as
// crypto/tls would refuse it) stops the count for good: broken.
type recordCounter struct {
	hdr    [recordHeaderLen]byte
	hn     int // header bytes of the record in progress
	left   int // body bytes of the record in progress still to come
	whole  int // records that came whole
	broken bool
}

const (
	recordHeaderLen = 5
	// maxRecord is the largest record body crypto/tls takes (TLS 1.2:
	// 2^14 of plaintext and 2048 of expansion).
	maxRecord = 16384 + 2048
)

// clip cuts p at the end of the record in progress: its header, then
// its body (Transport.exact).
func (rc *recordCounter) clip(p []byte) []byte {
	if rc.broken {
		return p
	}
	n := rc.left
	if rc.hn < recordHeaderLen {
		n = recordHeaderLen - rc.hn
	}
	return p[:min(len(p), n)]
}

// stop ends the count for good, as a broken stream does: once the
// connection's own records read the Transport nothing asks for it, and
// feed returns at once.
func (rc *recordCounter) stop() { rc.broken = true }

func (rc *recordCounter) feed(b []byte) {
	for len(b) > 0 && !rc.broken {
		if rc.hn < recordHeaderLen {
			k := copy(rc.hdr[rc.hn:], b)
			rc.hn += k
			b = b[k:]
			if rc.hn < recordHeaderLen {
				return
			}
			typ, major := rc.hdr[0], rc.hdr[1]
			rc.left = int(rc.hdr[3])<<8 | int(rc.hdr[4])
			// Record types change_cipher_spec (20) to heartbeat (24);
			// every TLS version is 3.x on the wire.
			if typ < 20 || typ > 24 || major != 3 || rc.left > maxRecord {
				rc.broken = true
				return
			}
		}
		k := min(rc.left, len(b))
		rc.left -= k
		b = b[k:]
		if rc.left == 0 {
			rc.hn = 0
			rc.whole++
		}
	}
}

// loopTLS gives netloop the TLSConn under a connection that embeds one.
func (c *TLSConn) loopTLS() *TLSConn { return c }

// asTLS returns the TLSConn of c, or nil when c is no TLSConn nor embeds
// one.
func asTLS(c net.Conn) *TLSConn {
	if l, ok := c.(interface{ loopTLS() *TLSConn }); ok {
		return l.loopTLS()
	}
	return nil
}

// LoopsTLS reports whether a loop can relay the records of conns that
// are TLS connections: only a TLSConn's (a TLS connection made
// otherwise stays with the pumps).
func LoopsTLS(conns ...net.Conn) bool {
	for _, c := range conns {
		if _, ok := c.(interface{ ConnectionState() tls.ConnectionState }); ok && asTLS(c) == nil {
			return false
		}
	}
	return true
}

// Transport is the net.Conn under a TLSConn's tls.Conn: the socket during
// the handshake and for blocking reads, a raw reader while the pumps poll,
// the loop's reader and writer while a loop relays the session.
//
// Reads come from src, by the one goroutine (or loop thread) that reads
// the tls.Conn. In a loop, a turn reaches the socket at most once (turn,
// drained), and a read with nothing to give returns errWouldBlock, a
// temporary error with which tls.Conn keeps a partial record for later.
//
// Writes, which tls.Conn makes record by record under its own lock, go to
// dst under wmu. While collect is set (recordWriter), records are queued
// and go out as one write; queue also holds what a loop could not write,
// so that it leaves before any later record.
type Transport struct {
	mu  sync.Mutex // guards raw: deadlines come from other goroutines
	raw net.Conn   // the socket; closed while a loop holds its descriptor

	src     io.Reader
	inLoop  bool          // src is a loop's reader
	drained bool          // in a loop: this turn has read what the socket had
	rc      recordCounter // of what Read gave the tls.Conn (TLSConn.Read)
	// exact: until the handshake ends, a read takes no byte past the end
	// of the record in progress (records13 starts where it ends).
	exact bool

	wmu     sync.Mutex
	dst     io.Writer
	collect bool
	queue   []byte
	werr    error            // a write error of the queue: every later write fails
	hs      *handshakeWrites // until the handshake ends: what the tls.Conn wrote
}

func newTransport(raw net.Conn) *Transport {
	return &Transport{raw: raw, src: raw, dst: raw}
}

// rawConn returns the socket's current net.Conn.
func (t *Transport) rawConn() net.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.raw
}

func (t *Transport) Read(p []byte) (int, error) {
	if t.exact {
		p = t.rc.clip(p)
	}
	if !t.inLoop {
		n, err := t.src.Read(p)
		t.rc.feed(p[:n])
		return n, err
	}
	if t.drained {
		return 0, errWouldBlock
	}
	n, err := t.src.Read(p)
	t.rc.feed(p[:n])
	if n < len(p) {
		// A short read emptied the socket (or what a receive brought):
		// another would only find EAGAIN. Level-triggered readiness, or
		// the next receive, reports what comes later.
		t.drained = true
	}
	return n, err
}

// turn starts a loop turn: the socket may be read once more.
func (t *Transport) turn() { t.drained = false }

func (t *Transport) Write(p []byte) (int, error) {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.werr != nil {
		return 0, t.werr
	}
	if t.hs != nil {
		t.hs.note(p)
	}
	if t.collect {
		t.queue = append(t.queue, p...)
		return len(p), nil
	}
	if len(t.queue) == 0 {
		return t.dst.Write(p)
	}
	t.queue = append(t.queue, p...)
	if err := t.flushLocked(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flushLocked writes the queue to dst in one write. wmu held.
func (t *Transport) flushLocked() error {
	if t.werr != nil {
		return t.werr
	}
	if len(t.queue) == 0 {
		return nil
	}
	_, err := t.dst.Write(t.queue)
	t.queue = t.queue[:0]
	if err != nil {
		t.werr = err
	}
	return err
}

// flush writes what is queued (what a loop could not write), for a pump
// that starts.
func (t *Transport) flush() error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	return t.flushLocked()
}

// setSrc and setDst change where the Transport reads and writes; the
// caller owns the connection (no pump nor loop uses it).
func (t *Transport) setSrc(r io.Reader, inLoop bool) { t.src, t.inLoop, t.drained = r, inLoop, false }

func (t *Transport) setDst(w io.Writer) {
	t.wmu.Lock()
	t.dst = w
	t.wmu.Unlock()
}

// enterLoop makes the loop's reader and writer the Transport's.
func (t *Transport) enterLoop(rd io.Reader, wr io.Writer) {
	t.setSrc(rd, true)
	t.setDst(wr)
}

// leaveLoop makes raw, a new net.Conn on the socket the loop held, the
// Transport's; pending, what the loop could not write, goes before any
// later record.
func (t *Transport) leaveLoop(raw net.Conn, pending []byte) {
	t.mu.Lock()
	t.raw = raw
	t.mu.Unlock()
	t.setSrc(raw, false)
	t.wmu.Lock()
	t.dst = raw
	t.queue = append(pending, t.queue...)
	t.wmu.Unlock()
}

func (t *Transport) Close() error                       { return t.rawConn().Close() }
func (t *Transport) LocalAddr() net.Addr                { return t.rawConn().LocalAddr() }
func (t *Transport) RemoteAddr() net.Addr               { return t.rawConn().RemoteAddr() }
func (t *Transport) SetDeadline(d time.Time) error      { return t.rawConn().SetDeadline(d) }
func (t *Transport) SetReadDeadline(d time.Time) error  { return t.rawConn().SetReadDeadline(d) }
func (t *Transport) SetWriteDeadline(d time.Time) error { return t.rawConn().SetWriteDeadline(d) }

// recordWriter writes plaintext to its TLSConn with one write to the
// Transport's dst for all the records of each call: a flush of the
// session's bufio.Writer is one send, however many records it makes.
type recordWriter struct{ c *TLSConn }

func (w *recordWriter) Write(p []byte) (int, error) {
	r, err := w.c.records()
	if err != nil {
		return 0, err
	}
	if r != nil {
		return r.Write(p) // one write already
	}
	t := w.c.t
	t.wmu.Lock()
	t.collect = true
	t.wmu.Unlock()
	n, err := w.c.Conn.Write(p)
	t.wmu.Lock()
	t.collect = false
	ferr := t.flushLocked()
	t.wmu.Unlock()
	if err == nil {
		err = ferr
	}
	return n, err
}
