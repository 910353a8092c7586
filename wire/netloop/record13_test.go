package netloop

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// holdConn passes the first pass writes to its socket and holds the
// later ones until release, which sends them as one write: a client's
// last handshake flight and its first records arrive together.
type holdConn struct {
	net.Conn
	mu   sync.Mutex
	pass int
	held []byte
}

func (c *holdConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pass > 0 {
		c.pass--
		return c.Conn.Write(p)
	}
	c.held = append(c.held, p...)
	return len(p), nil
}

func (c *holdConn) release(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.Conn.Write(c.held); err != nil {
		t.Fatal(err)
	}
	c.held, c.pass = nil, 1<<30
}

// records13Pair is a netloop.TLSConn (the proxy's end) and crypto/tls's
// end of one connection, shaken hands.
type records13Pair struct {
	proxy *TLSConn
	peer  *tls.Conn
}

// newRecords13Pair shakes hands between a TLSConn in the given role and
// a crypto/tls peer. tickets: the client keeps sessions, so that a Go
// server sends a ticket after its Finished; clientCert: the server asks
// for the client's certificate. The client's first record (first, when
// not empty) arrives with its Finished, in one write.
func newRecords13Pair(t *testing.T, proxyIsServer, tickets, clientCert bool, first []byte) *records13Pair {
	t.Helper()
	ca := pgtest.NewCA(t, "records13 test CA")
	srv := &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "localhost").TLS(t)}, MinVersion: tls.VersionTLS13}
	cl := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
	if tickets {
		cl.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	}
	if clientCert {
		srv.ClientAuth, srv.ClientCAs = tls.RequireAndVerifyClientCert, ca.Pool()
		cl.Certificates = []tls.Certificate{ca.Client(t, "someone").TLS(t)}
	}
	a, b := SocketPair(t)
	hold := &holdConn{Conn: b, pass: 1 << 30}
	if len(first) > 0 {
		hold.pass = 1 // the ClientHello
	}
	var p records13Pair
	var peerShake func() error
	if proxyIsServer {
		p.proxy, p.peer = TLSServer(a, srv), tls.Client(hold, cl)
		peerShake = func() error {
			if err := p.peer.Handshake(); err != nil {
				return err
			}
			if len(first) > 0 {
				if _, err := p.peer.Write(first); err != nil {
					return err
				}
				hold.release(t)
			}
			return nil
		}
	} else {
		p.proxy, p.peer = TLSClient(a, cl), tls.Server(b, srv)
		peerShake = p.peer.Handshake
		if len(first) > 0 {
			t.Fatal("first: only a peer that is the client sends with its Finished")
		}
	}
	shakeBoth(t, p.proxy.Handshake, peerShake)
	if p.proxy.RecordLayer() != "own TLS 1.3" {
		t.Fatalf("record layer %q, want own TLS 1.3", p.proxy.RecordLayer())
	}
	_ = a.SetDeadline(time.Now().Add(20 * time.Second))
	_ = b.SetDeadline(time.Now().Add(20 * time.Second))
	return &p
}

// shakeBoth runs the peer's handshake on another goroutine and the
// proxy's on this one, and fails the test if either fails.
func shakeBoth(t *testing.T, proxy, peer func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- peer() }()
	if err := proxy(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// readFull reads len(want) bytes from r and compares.
func readFull(t *testing.T, who string, r io.Reader, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatalf("%s: read %d bytes: %v", who, len(want), err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %q..., want %q...", who, got[:min(len(got), 40)], want[:min(len(want), 40)])
	}
}

// writeAsync writes p to w on another goroutine (a socket buffer may not
// take a large write before the other end reads) and returns the wait.
func writeAsync(w io.Writer, p []byte) func() error {
	done := make(chan error, 1)
	go func() { _, err := w.Write(p); done <- err }()
	return func() error { return <-done }
}

// exchange sends small and large plaintext both ways and checks it.
func (p *records13Pair) exchange(t *testing.T, tag string) {
	t.Helper()
	small := []byte("small " + tag)
	large := bytes.Repeat([]byte(tag+"0123456789"), 7000) // several records
	for _, m := range [][]byte{small, large} {
		wait := writeAsync(p.proxy, m)
		readFull(t, "peer", p.peer, m)
		if err := wait(); err != nil {
			t.Fatal(err)
		}
		wait = writeAsync(p.peer, m)
		readFull(t, "proxy", p.proxy, m)
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	}
}

// sendKeyUpdate makes the TLSConn send a KeyUpdate (asking for the
// peer's, or not) and move to its next writing key, as a peer would.
func (c *TLSConn) sendKeyUpdate(t *testing.T, requested byte) {
	t.Helper()
	r := c.own
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if err := r.sendLocked(recordTypeHandshake, []byte{msgKeyUpdate, 0, 0, 1, requested}); err != nil {
		t.Fatal(err)
	}
	if err := r.wr.update(); err != nil {
		t.Fatal(err)
	}
}

// The proxy's records against crypto/tls, in both roles, right after the
// handshake: with and without a session ticket sent after the server's
// Finished (the writing sequence number the switch finds), with a client
// certificate, and with the client's first record in the same write as
// its Finished (the Transport stops at the end of the handshake). Then
// KeyUpdates from each side, asked for and not, and close_notify each
// way.
func TestRecords13WithCryptoTLS(t *testing.T) {
	for _, c := range []struct {
		name                           string
		proxyIsServer, tickets, clCert bool
		first                          string
	}{
		{"server", true, false, false, ""},
		{"server/ticket", true, true, false, ""},
		{"server/ticket/client-cert", true, true, true, ""},
		{"server/first-record-with-finished", true, true, false, "hello with the Finished"},
		{"server/client-cert/first-record-with-finished", true, false, true, "hello after a certificate"},
		{"client", false, false, false, ""},
		{"client/ticket", false, true, false, ""},
		{"client/client-cert", false, true, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newRecords13Pair(t, c.proxyIsServer, c.tickets, c.clCert, []byte(c.first))
			if c.first != "" {
				readFull(t, "proxy", p.proxy, []byte(c.first))
			}
			p.exchange(t, "a")

			// The proxy updates its keys and asks for the peer's:
			// crypto/tls answers with its own KeyUpdate, which the
			// proxy's reader meets before the next data.
			p.proxy.sendKeyUpdate(t, 1)
			p.exchange(t, "b")
			p.proxy.sendKeyUpdate(t, 0)
			p.exchange(t, "c")
			p.proxy.sendKeyUpdate(t, 1)
			p.proxy.sendKeyUpdate(t, 1)
			p.exchange(t, "d")

			if err := p.peer.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if _, err := p.proxy.Read(make([]byte, 8)); err != io.EOF {
				t.Fatalf("proxy after the peer's close_notify: %v, want EOF", err)
			}
			wait := writeAsync(p.proxy, []byte("after the peer's close_notify"))
			readFull(t, "peer", p.peer, []byte("after the peer's close_notify"))
			if err := wait(); err != nil {
				t.Fatal(err)
			}
			if err := p.proxy.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if _, err := p.peer.Read(make([]byte, 8)); err != io.EOF {
				t.Fatalf("peer after the proxy's close_notify: %v, want EOF", err)
			}
			if _, err := p.proxy.Write([]byte("x")); err == nil {
				t.Fatal("a write after close_notify succeeded")
			}
			if err := p.proxy.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A KeyUpdate that asks for the proxy's, sent by crypto/tls: the proxy
// cannot make crypto/tls send one, so the test's peer is another
// TLSConn, whose records crypto/tls's were just checked against; the
// proxy answers at once, from its reader, and both go on under new
// keys.
func TestRecords13AnswersKeyUpdate(t *testing.T) {
	ca := pgtest.NewCA(t, "records13 test CA")
	srv := &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "localhost").TLS(t)}}
	cl := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
	a, b := SocketPair(t)
	proxy, peer := TLSServer(a, srv), TLSClient(b, cl)
	shakeBoth(t, proxy.Handshake, peer.Handshake)
	_ = a.SetDeadline(time.Now().Add(20 * time.Second))
	_ = b.SetDeadline(time.Now().Add(20 * time.Second))
	for i := range 3 {
		peer.sendKeyUpdate(t, 1)
		msg := []byte(strings.Repeat("after an update ", i+1))
		wait := writeAsync(peer, msg)
		readFull(t, "proxy", proxy, msg)
		if err := wait(); err != nil {
			t.Fatal(err)
		}
		// The proxy's answer went out before this record: the peer's
		// reader meets it first and moves to the proxy's new key.
		wait = writeAsync(proxy, msg)
		readFull(t, "peer", peer, msg)
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	}
	if proxy.own.rd.seq != 1 || proxy.own.wr.seq != 1 {
		t.Fatalf("sequence numbers %d/%d after the last update, want 1/1", proxy.own.rd.seq, proxy.own.wr.seq)
	}
}

// What ends a session, as crypto/tls ends it: a tampered record
// (bad_record_mac), a record that is no application data after the
// handshake (unexpected_message), a record too long (record_overflow).
// The proxy's reads fail for good, nothing of the bad record is read,
// and the peer gets the alert.
func TestRecords13RefusesBadRecords(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(rec []byte) []byte
		want  string
	}{
		{"tampered", func(rec []byte) []byte { rec[len(rec)-3] ^= 0x40; return rec }, "bad record MAC"},
		{"change-cipher-spec", func([]byte) []byte { return []byte{20, 3, 3, 0, 1, 1} }, "unexpected message"},
		{"alert-in-plaintext", func([]byte) []byte { return []byte{21, 3, 3, 0, 2, 2, 40} }, "unexpected message"},
		{"too-long", func([]byte) []byte { return []byte{23, 3, 3, 0x41, 0x01} }, "record overflow"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newRecords13Pair(t, true, true, false, nil)
			good := []byte("a good record first")
			wait := writeAsync(p.peer, good)
			readFull(t, "proxy", p.proxy, good)
			if err := wait(); err != nil {
				t.Fatal(err)
			}
			// The record the peer would send next, spoiled on the way.
			rec := sealAsPeer(t, p, recordTypeAppData, []byte("a record that must not be read"))
			if _, err := p.peer.NetConn().Write(c.spoil(rec)); err != nil {
				t.Fatal(err)
			}
			n, err := p.proxy.Read(make([]byte, 64))
			if n != 0 || err == nil || !strings.Contains(err.Error(), "local error: tls: "+c.want) {
				t.Fatalf("proxy read %d bytes, %v; want the local %s error", n, err, c.want)
			}
			if _, err2 := p.proxy.Read(make([]byte, 64)); err2 != err {
				t.Fatalf("second read: %v, want the same error", err2)
			}
			if _, err := p.peer.Read(make([]byte, 8)); err == nil || !strings.Contains(err.Error(), "remote error: tls: "+c.want) {
				t.Fatalf("peer: %v, want the %s alert", err, c.want)
			}
			if _, err := p.proxy.Write([]byte("x")); err == nil {
				t.Fatal("a write after a fatal alert succeeded")
			}
		})
	}
}
