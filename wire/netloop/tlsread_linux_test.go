package netloop

import (
	"bytes"
	"crypto/tls"
	"testing"
)

// chunkSource stands for a loop's reader under a Transport: each read
// gives what one receive brought (one chunk), then errWouldBlock.
type chunkSource struct{ q [][]byte }

func (c *chunkSource) Read(p []byte) (int, error) {
	if len(c.q) == 0 {
		return 0, errWouldBlock
	}
	n := copy(p, c.q[0])
	if c.q[0] = c.q[0][n:]; len(c.q[0]) == 0 {
		c.q = c.q[1:]
	}
	return n, nil
}

// readTest is the proxy's side of a TLS connection, shaken hands, whose
// Transport reads chunks as a loop's would, and the test's client, whose
// records the test hands over.
type readTest struct {
	tc  *TLSConn
	cap *captureConn
	cl  *tls.Conn
	src *chunkSource
}

func newReadTest(t *testing.T, maxVersion uint16) *readTest {
	t.Helper()
	srvCfg, clCfg := testTLS(t)
	srvCfg = srvCfg.Clone()
	srvCfg.MinVersion, srvCfg.MaxVersion = tls.VersionTLS12, maxVersion
	_, tc, capc, cl := shakeHands(t, srvCfg, clCfg, false)
	src := &chunkSource{}
	tc.t.setSrc(src, true)
	return &readTest{tc: tc, cap: capc, cl: cl, src: src}
}

// record returns the client's records of plaintext p, not sent.
func (r *readTest) record(t *testing.T, p []byte) []byte {
	t.Helper()
	r.cap.capture, r.cap.got = true, nil
	defer func() { r.cap.capture = false }()
	if _, err := r.cl.Write(p); err != nil {
		t.Fatal(err)
	}
	return r.cap.got
}

// turn starts a loop turn whose receive brings b.
func (r *readTest) turn(b []byte) {
	r.src.q = append(r.src.q, b)
	r.tc.t.turn()
}

// read reads once with a buffer of size and checks what comes.
func (r *readTest) read(t *testing.T, size int, want []byte) {
	t.Helper()
	buf := make([]byte, size)
	n, err := r.tc.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], want) {
		t.Fatalf("read %q, %v; want %q", buf[:n], err, want)
	}
}

// blocked checks that a read would block and reaches neither the
// tls.Conn nor the Transport: no allocation (crypto/tls's readFromUntil
// allocates the reader it gives the Transport).
func (r *readTest) blocked(t *testing.T) {
	t.Helper()
	buf := make([]byte, 512)
	var err error
	allocs := testing.AllocsPerRun(5, func() { _, err = r.tc.Read(buf) })
	if err != errWouldBlock {
		t.Fatalf("read: %v, want errWouldBlock", err)
	}
	if allocs != 0 {
		t.Fatalf("a read that would block allocated %v times: it went into the tls.Conn", allocs)
	}
}

// In a loop, once a turn's records are decrypted, a read returns
// errWouldBlock without going into the tls.Conn, but only then: one
// record or several in a receive, a record cut between receives (in its
// header or body), TLS 1.2 and 1.3. A read into a buffer too small for a
// record's plaintext leaves the count, and the reads go into the
// tls.Conn until it asks its Transport for more.
func TestTLSConnReadSkipsOnlyWhenNothingWhole(t *testing.T) {
	for _, v := range []struct {
		name string
		max  uint16
	}{{"TLS1.2", tls.VersionTLS12}, {"TLS1.3", tls.VersionTLS13}} {
		t.Run(v.name, func(t *testing.T) {
			r := newReadTest(t, v.max)
			m := [][]byte{message('Q', "one"), message('Q', "two"), message('Q', "three"), message('Q', "four")}

			// The first read of the connection finds the state unknown.
			r.turn(r.record(t, m[0]))
			r.read(t, 512, m[0])
			r.blocked(t)

			// Three records in one receive: three reads, then nothing.
			var three []byte
			for _, p := range m[1:] {
				three = append(three, r.record(t, p)...)
			}
			r.turn(three)
			for _, p := range m[1:] {
				r.read(t, 512, p)
			}
			r.blocked(t)

			// A record, and the next one cut in its header, then in its
			// body: the partial record waits in the tls.Conn.
			for _, cut := range []int{3, 9} {
				a, b := r.record(t, m[0]), r.record(t, m[1])
				r.turn(append(append([]byte(nil), a...), b[:cut]...))
				r.read(t, 512, m[0])
				r.blocked(t)
				r.turn(b[cut:])
				r.read(t, 512, m[1])
				r.blocked(t)
			}

			// A buffer smaller than the plaintext: the rest is read from
			// the tls.Conn, and the read after it goes into the tls.Conn.
			r.turn(append(r.record(t, m[2]), r.record(t, m[3])...))
			r.read(t, 4, m[2][:4])
			r.read(t, 512, m[2][4:])
			r.read(t, 512, m[3])
			buf := make([]byte, 512)
			if n, err := r.tc.Read(buf); n != 0 || err != errWouldBlock {
				t.Fatalf("read after the turn: %d, %v; want errWouldBlock", n, err)
			}
			r.blocked(t)
		})
	}
}

// The count follows records cut anywhere and stops for good at what is
// no record header.
func TestRecordCounter(t *testing.T) {
	rec := func(typ byte, body int) []byte {
		return append([]byte{typ, 3, 3, byte(body >> 8), byte(body)}, make([]byte, body)...)
	}
	var stream []byte
	for _, r := range [][]byte{rec(22, 40), rec(23, 0), rec(23, 300), rec(21, 2), rec(23, maxRecord)} {
		stream = append(stream, r...)
	}
	for _, step := range []int{1, 2, 5, 7, 64, len(stream)} {
		var rc recordCounter
		for i := 0; i < len(stream); i += step {
			rc.feed(stream[i:min(i+step, len(stream))])
		}
		if rc.whole != 5 || rc.broken || rc.hn != 0 {
			t.Errorf("fed %d bytes at a time: %+v, want 5 whole records", step, rc)
		}
	}
	var rc recordCounter
	rc.feed(stream[:45+5+5+2])
	if rc.whole != 2 || rc.hn != 5 || rc.left != 300-2 {
		t.Errorf("two records and the start of a third: %+v", rc)
	}
	for _, bad := range [][]byte{
		{0x80, 0x2e, 0x01, 0x03, 0x01}, // SSLv2 ClientHello
		{25, 3, 3, 0, 1},               // no such record type
		{23, 2, 0, 0, 1},               // no TLS version
		{23, 3, 3, 0x48, 0x01},         // longer than any record
		[]byte("Q\x00\x00\x00\x0dSELECT 1\x00"),
	} {
		var rc recordCounter
		rc.feed(append(rec(23, 10), bad...))
		if !rc.broken {
			t.Errorf("%q after a record: %+v, want broken", bad, rc)
		}
		rc.feed(rec(23, 1))
		if rc.whole != 1 {
			t.Errorf("%q: counting went on after the break: %+v", bad, rc)
		}
	}
}
