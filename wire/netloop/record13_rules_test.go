package netloop

import (
	"bytes"
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// sealAsPeer returns records sealed as p's peer would send them next
// (with a copy of the keys the proxy reads with), one per inner
// plaintext given: content, then its type (seal's typ 0 adds one more
// byte of padding).
func sealAsPeer(t *testing.T, p *records13Pair, typ byte, inners ...[]byte) []byte {
	t.Helper()
	w := &records13{}
	w.wr = p.proxy.own.rd
	var out []byte
	for _, in := range inners {
		var err error
		if out, err = w.seal(out, typ, in); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Regression: a TLS 1.3 user_canceled alert (the JDK sends one before
// its close_notify) ended the session; crypto/tls drops it.
func TestRecords13DropsUserCanceled(t *testing.T) {
	p := newRecords13Pair(t, true, false, false, nil)
	recs := sealAsPeer(t, p, 0, []byte{1, alertUserCanceled, recordTypeAlert}, []byte("after user_canceled\x17"))
	if _, err := p.peer.NetConn().Write(recs); err != nil {
		t.Fatal(err)
	}
	readFull(t, "proxy", p.proxy, []byte("after user_canceled"))
}

// Regression: the padded inner plaintext (content, type, zeros) may not
// exceed 2^14 + 1 bytes (RFC 8446, 5.4), as crypto/tls checks; only the
// content was checked.
func TestRecords13RefusesPaddedOverflow(t *testing.T) {
	p := newRecords13Pair(t, true, false, false, nil)
	inner := append(bytes.Repeat([]byte("x"), maxPlaintext), recordTypeAppData)
	inner = append(inner, make([]byte, 99)...) // seal adds the 100th zero
	if _, err := p.peer.NetConn().Write(sealAsPeer(t, p, 0, inner)); err != nil {
		t.Fatal(err)
	}
	if n, err := p.proxy.Read(make([]byte, 64)); n != 0 || err == nil || !strings.Contains(err.Error(), "record overflow") {
		t.Fatalf("read %d bytes, %v; want record overflow", n, err)
	}
}

// turnSource gives one chunk per loop turn: a read after a chunk returns
// errWouldBlock, as a loop's reader does once a turn drained the socket.
type turnSource struct {
	q    [][]byte
	gave bool
}

func (s *turnSource) Read(p []byte) (int, error) {
	if s.gave || len(s.q) == 0 {
		s.gave = false
		return 0, errWouldBlock
	}
	n := copy(p, s.q[0])
	s.q[0] = s.q[0][n:]
	if len(s.q[0]) == 0 {
		s.q, s.gave = s.q[1:], true
	}
	return n, nil
}

// Regression: the limit of 16 records in a row without data counted
// within one read only, and a loop reads anew every turn: a peer could
// send empty records (or KeyUpdates asking for answers) in every batch,
// for ever. It now counts across reads and turns, and a record with
// data starts it again.
func TestRecords13UselessRecordsAcrossTurns(t *testing.T) {
	var out bytes.Buffer
	wt := &Transport{}
	wt.setDst(&out)
	w := fuzzLayer(t, wt, false)
	seal := func(typ byte, p []byte) []byte {
		out.Reset()
		w.wmu.Lock()
		defer w.wmu.Unlock()
		if err := w.sendLocked(typ, p); err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(out.Bytes())
	}
	src := &turnSource{}
	rt := &Transport{}
	rt.setSrc(src, false)
	rt.setDst(&bytes.Buffer{})
	r := fuzzLayer(t, rt, true)
	buf := make([]byte, 64)
	turn := func(rec []byte) (int, error) {
		src.q = append(src.q, rec)
		n, err := r.Read(buf)
		if err == nil {
			_, err = r.Read(buf) // the end of the turn
			if err != errWouldBlock {
				t.Fatalf("end of the turn: %v", err)
			}
			err = nil
		}
		return n, err
	}
	for round := range 2 {
		for i := range maxUselessRecords {
			var rec []byte
			if i%2 == 0 {
				rec = seal(recordTypeAppData, nil)
			} else {
				rec = seal(recordTypeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 1})
				if err := w.wr.update(); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := turn(rec); n != 0 || err != errWouldBlock {
				t.Fatalf("round %d, record %d without data: %d, %v", round, i, n, err)
			}
		}
		if round == 0 {
			if n, err := turn(seal(recordTypeAppData, []byte("data"))); n != 4 || err != nil {
				t.Fatalf("a record with data: %d, %v", n, err)
			}
		}
	}
	if _, err := turn(seal(recordTypeAppData, nil)); err == nil || !strings.Contains(err.Error(), "unexpected message") {
		t.Fatalf("record %d in a row without data: %v, want unexpected message", maxUselessRecords+1, err)
	}
}

// Regression: Close waited for a Write blocked on a peer that does not
// read; crypto/tls's Close closes the socket at once then (no
// close_notify), which ends the Write.
func TestRecords13CloseBreaksBlockedWrite(t *testing.T) {
	p := newRecords13Pair(t, true, false, false, nil)
	done := make(chan error, 1)
	go func() {
		_, err := p.proxy.Write(make([]byte, 64<<20)) // more than the socket buffers take
		done <- err
	}()
	// Wait until the Write holds the writing side, blocked.
	deadline := time.Now().Add(10 * time.Second)
	for p.proxy.own.wmu.TryLock() {
		p.proxy.own.wmu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the write never started")
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	closed := make(chan error, 1)
	go func() { closed <- p.proxy.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the blocked Write")
	}
	if err := <-done; err == nil {
		t.Fatal("the blocked Write succeeded")
	}
}

// Regression: a Read (or Write) before Handshake let crypto/tls run the
// handshake and read on, and a later Handshake switched with a reading
// sequence number of 0; both at once raced on the switch. The first of
// them now runs the handshake and the switch, and the other waits.
func TestRecords13ReadBeforeHandshake(t *testing.T) {
	ca := pgtest.NewCA(t, "records13 test CA")
	srv := &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "localhost").TLS(t)}}
	cl := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
	for _, concurrent := range []bool{false, true} {
		a, b := SocketPair(t)
		_ = a.SetDeadline(time.Now().Add(20 * time.Second))
		_ = b.SetDeadline(time.Now().Add(20 * time.Second))
		proxy, peer := TLSServer(a, srv), tls.Client(b, cl)
		go func() {
			if peer.Handshake() == nil {
				_, _ = peer.Write([]byte("first second"))
			}
		}()
		var wg sync.WaitGroup
		var herr error
		if concurrent {
			wg.Add(1)
			go func() { defer wg.Done(); herr = proxy.Handshake() }()
		}
		readFull(t, "proxy", proxy, []byte("first"))
		wg.Wait()
		if err := errors.Join(herr, proxy.Handshake()); err != nil {
			t.Fatal(err)
		}
		readFull(t, "proxy", proxy, []byte(" second"))
		if proxy.RecordLayer() != "own TLS 1.3" {
			t.Fatalf("record layer %s", proxy.RecordLayer())
		}
		wait := writeAsync(proxy, []byte("answer"))
		readFull(t, "peer", peer, []byte("answer"))
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	}
}
