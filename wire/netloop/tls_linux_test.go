//go:build linux

package netloop

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// testTLS returns the configurations of a TLS 1.3 server with a
// certificate from a test CA and of a client that trusts the CA.
func testTLS(t *testing.T) (srv, cl *tls.Config) {
	t.Helper()
	ca := pgtest.NewCA(t, "netloop test CA")
	srv = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "localhost").TLS(t)}, MinVersion: tls.VersionTLS13}
	// One record per Write, however large the first ones: the tests cut
	// records where they choose.
	cl = &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", DynamicRecordSizingDisabled: true}
	return srv, cl
}

// captureConn is the test client's socket: while capture is set, what the
// client's tls.Conn writes is kept, for the test to send as it chooses.
type captureConn struct {
	net.Conn
	capture bool
	got     []byte
}

func (c *captureConn) Write(p []byte) (int, error) {
	if c.capture {
		c.got = append(c.got, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// tlsSession is a relayed session whose client side is TLS: the test's
// TLS client (over raw), the test's plaintext server, and the relay.
type tlsSession struct {
	raw    net.Conn
	cap    *captureConn
	client *tls.Conn
	server net.Conn
	relay  *loopSession
	tc     *TLSConn
}

func enterTLSSession(t *testing.T, lp *Loop, own bool) *tlsSession {
	t.Helper()
	srvCfg, clCfg := testTLS(t)
	raw, tc, capc, client := shakeHands(t, srvCfg, clCfg, own)
	sout, server := SocketPair(t)
	return &tlsSession{raw: raw, cap: capc, client: client, server: server, relay: enterRelay(t, lp, tc, sout), tc: tc}
}

// shakeHands makes a socket pair, a TLSConn server on one end and the
// test's tls.Client (through a captureConn) on the other, and completes
// their handshake. own false keeps the TLSConn on its tls.Conn's records.
func shakeHands(t *testing.T, srvCfg, clCfg *tls.Config, own bool) (raw net.Conn, tc *TLSConn, capc *captureConn, client *tls.Conn) {
	t.Helper()
	raw, cin := SocketPair(t)
	tc = TLSServer(cin, srvCfg)
	tc.noOwnRecords = !own
	capc = &captureConn{Conn: raw}
	client = tls.Client(capc, clCfg)
	shakeBoth(t, tc.Handshake, client.Handshake)
	if want := map[bool]string{true: "own TLS 1.3", false: "crypto/tls"}[own]; tc.RecordLayer() != want {
		t.Fatalf("record layer %q, want %q", tc.RecordLayer(), want)
	}
	return raw, tc, capc, client
}

// record returns what the client's tls.Conn writes for plaintext p:
// whole records, not sent.
func (s *tlsSession) record(t *testing.T, p []byte) []byte {
	t.Helper()
	s.cap.capture, s.cap.got = true, nil
	defer func() { s.cap.capture = false }()
	if _, err := s.client.Write(p); err != nil {
		t.Fatal(err)
	}
	return s.cap.got
}

// sendRead writes b to the proxy's side of the client socket and waits
// until the loop has taken it from the socket: the next bytes arrive in
// another turn.
func (s *tlsSession) sendRead(t *testing.T, b []byte) {
	t.Helper()
	if _, err := s.raw.Write(b); err != nil {
		t.Fatal(err)
	}
	s.relay.r.mu.Lock()
	fd := s.relay.r.fd[Client]
	s.relay.r.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int32
		_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
		if e != 0 {
			t.Fatalf("SIOCINQ: %v", e)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the loop did not read the socket in 10 s")
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
}

// leave waits for the handover, and writes what the loop could not
// write (an io_uring loop's sends of the last turn), as the pumps would.
func (s *tlsSession) leave(t *testing.T) Exit {
	t.Helper()
	x := s.relay.leave(t)
	for side, w := range s.relay.steps.out {
		if _, err := s.relay.r.WritePending(Side(side), w); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

// expect reads len(want) bytes at the test's server and compares.
func expect(t *testing.T, c net.Conn, want []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read %d bytes: %v", len(want), err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %q..., want %q...", got[:min(len(got), 40)], want[:min(len(want), 40)])
	}
}

// loopIOs runs f with an epoll loop and an io_uring loop (where the
// kernel allows it).
func loopIOs(t *testing.T, f func(t *testing.T, lp *Loop)) {
	t.Run("epoll", func(t *testing.T) {
		lp, err := NewLoop(slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		f(t, lp)
		lp.Stop()
	})
	t.Run("io_uring", func(t *testing.T) {
		lp := startURingLoop(t)
		f(t, lp)
		lp.Stop()
	})
}

// tlsLoops runs f with each loop of loopIOs, and each record layer: the
// TLSConn's own and its tls.Conn's.
func tlsLoops(t *testing.T, f func(t *testing.T, lp *Loop, own bool)) {
	for _, own := range []bool{true, false} {
		t.Run(map[bool]string{true: "own", false: "crypto-tls"}[own], func(t *testing.T) {
			loopIOs(t, func(t *testing.T, lp *Loop) { f(t, lp, own) })
		})
	}
}

// Records cut anywhere, in the header, in the body, and a record
// (16 KiB, many messages) larger than the read buffer and than a
// receive: the loop relays every message whole, in order, each turn
// taking what it can decrypt and keeping the partial record.
func TestLoopTLSRecordsSplitAcrossTurns(t *testing.T) {
	tlsLoops(t, func(t *testing.T, lp *Loop, own bool) {
		s := enterTLSSession(t, lp, own)
		var big []byte
		for i := 0; len(big) < 15000; i++ {
			big = append(big, message('Q', strings.Repeat(string(rune('a'+i%26)), 700))...)
		}
		for _, c := range []struct {
			name  string
			plain []byte
			cuts  []int
		}{
			{"header", message('Q', "SELECT 1"), []int{3}},
			{"body", message('Q', "SELECT 2"), []int{9}},
			{"bytewise", message('Q', "SELECT 3"), []int{1, 2, 3, 4, 5, 6, 7, 8, 20}},
			{"large", big, []int{100, 5000, 9000, 14000}},
		} {
			rec := s.record(t, c.plain)
			prev := 0
			for _, cut := range append(c.cuts, len(rec)) {
				s.sendRead(t, rec[prev:cut])
				prev = cut
			}
			expect(t, s.server, c.plain)
		}
		// The server's answer goes back encrypted, in the same loop.
		answer := message('Z', "I")
		if _, err := s.server.Write(answer); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(answer))
		_ = s.raw.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(s.client, got); err != nil || !bytes.Equal(got, answer) {
			t.Fatalf("client got %q, %v", got, err)
		}
		if _, err := s.raw.Write(s.record(t, message('X', ""))); err != nil {
			t.Fatal(err)
		}
		if x := s.leave(t); x.Err != nil {
			t.Fatalf("exit %+v", x)
		}
	})
}

// A handover (the step of 'X') in the middle of what one record brought,
// with the next record still partial: the pumps' reading of the same
// tls.Conn gives the handed-over message, the rest of its record, and the
// next record once its last bytes come, each byte once.
func TestLoopTLSHandoverMidRecord(t *testing.T) {
	tlsLoops(t, func(t *testing.T, lp *Loop, own bool) {
		s := enterTLSSession(t, lp, own)
		m1, x, m2, m3 := message('Q', "one"), message('X', "hand over"), message('Q', "two"), message('Q', "three")
		first := s.record(t, append(append(append([]byte(nil), m1...), x...), m2...))
		second := s.record(t, m3)
		s.sendRead(t, append(append([]byte(nil), first...), second[:7]...))
		if ex := s.leave(t); ex.Side != Client || ex.Err != nil {
			t.Fatalf("exit %+v", ex)
		}
		expect(t, s.server, m1)
		if _, err := s.raw.Write(second[7:]); err != nil {
			t.Fatal(err)
		}
		in := s.relay.steps.in[Client]
		want := append(append(append([]byte(nil), x...), m2...), m3...)
		got := make([]byte, len(want))
		_ = s.tc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(in.R, got); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("after the handover: %q, %v; want %q", got, err, want)
		}
	})
}

// A close_notify from the client is end of input: the loop hands the
// session over, and reading on gives io.EOF, with the message before it
// relayed.
func TestLoopTLSCloseNotify(t *testing.T) {
	tlsLoops(t, func(t *testing.T, lp *Loop, own bool) {
		s := enterTLSSession(t, lp, own)
		m := message('Q', "before the end")
		s.sendRead(t, s.record(t, m))
		expect(t, s.server, m)
		if err := s.client.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if x := s.leave(t); x.Err != nil {
			t.Fatalf("exit %+v", x)
		}
		_ = s.tc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := s.relay.steps.in[Client].R.ReadByte(); err != io.EOF {
			t.Fatalf("after close_notify: %v, want EOF", err)
		}
	})
}

// A record that fails to authenticate: nothing of it reaches the server,
// the loop hands the session over, reading on fails for good, and the
// client gets the bad_record_mac alert.
func TestLoopTLSTamperedRecord(t *testing.T) {
	tlsLoops(t, func(t *testing.T, lp *Loop, own bool) {
		s := enterTLSSession(t, lp, own)
		good, bad := message('Q', "relayed"), message('Q', "tampered")
		recs := s.record(t, good)
		n := len(recs)
		recs = append(recs, s.record(t, bad)...)
		recs[n+5+len(bad)/2] ^= 1 // in the ciphertext of the second record
		s.sendRead(t, recs)
		if x := s.leave(t); x.Err != nil {
			t.Fatalf("exit %+v", x)
		}
		expect(t, s.server, good)
		_ = s.tc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := s.relay.steps.in[Client].R.ReadByte()
		if err == nil || !strings.Contains(err.Error(), "bad record MAC") {
			t.Fatalf("after the tampered record: %v, want bad record MAC", err)
		}
		_ = s.server.SetReadDeadline(time.Now())
		if n, _ := s.server.Read(make([]byte, 1)); n != 0 {
			t.Fatal("the server got bytes of the tampered record")
		}
		_ = s.raw.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := s.client.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "remote error: tls: bad record MAC") {
			t.Fatalf("client: %v, want the bad_record_mac alert", err)
		}
	})
}

// Several records in one receive, the last one cut: the loop relays
// every whole message in the same turn (the tls.Conn holds records that
// no readiness event announces), and the cut one when its rest comes.
// Regression guard for TLSConn.Read, which stops reading a turn once it
// counts every whole record decrypted.
func TestLoopTLSManyRecordsOneReceive(t *testing.T) {
	tlsLoops(t, func(t *testing.T, lp *Loop, own bool) {
		s := enterTLSSession(t, lp, own)
		var recs, plain []byte
		for i := range 5 {
			m := message('Q', strings.Repeat(string(rune('a'+i)), 10+i*100))
			recs, plain = append(recs, s.record(t, m)...), append(plain, m...)
		}
		last := message('Q', "last")
		tail := s.record(t, last)
		s.sendRead(t, append(recs, tail[:8]...))
		expect(t, s.server, plain)
		s.sendRead(t, tail[8:])
		expect(t, s.server, last)
		if _, err := s.raw.Write(s.record(t, message('X', ""))); err != nil {
			t.Fatal(err)
		}
		if x := s.leave(t); x.Err != nil {
			t.Fatalf("exit %+v", x)
		}
	})
}
