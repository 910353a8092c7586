//go:build linux

package wire

import (
	"bufio"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snowflake-proxy/snowflake-proxy/internal/testenv"
	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

// BenchmarkRelayLoop relays round trips through a session in an event
// loop, in steady state, with and without a Rewriter, in plaintext and
// with TLS on both sides: a client writes a Bind/Execute/Sync pipeline, a
// stand-in server answers BindComplete, DataRow, CommandComplete,
// ReadyForQuery, and the client reads the answer before the next.
// Allocations are per round trip (the loop thread included): 0 in
// plaintext. With TLS (1.3, the proxy's own records on both sides) the
// proxy allocates nothing either; the test's client and server are
// crypto/tls's, which allocates its reader of the socket
// (readFromUntil's atLeastReader) at each read: 2 per round trip, theirs
// (TestTLSRelayAllocatesNothing gives them the proxy's records: 0).
func BenchmarkRelayLoop(b *testing.B) {
	for _, io := range []string{"epoll", "io_uring"} {
		b.Run(io, func(b *testing.B) {
			if io == "io_uring" && netloop.URingAvailable() != nil {
				testenv.CannotRun(b, "io_uring is not available: %v", netloop.URingAvailable())
			}
			runTracked(b, func(b *testing.B, track bool) { benchRelayLoop(b, io, track, plainPeers) })
			b.Run("tls", func(b *testing.B) {
				runTracked(b, func(b *testing.B, track bool) { benchRelayLoop(b, io, track, cryptoTLSPeers) })
			})
		})
	}
}

// relayPeers is what the benchmark's client and stand-in server speak.
type relayPeers int

const (
	plainPeers     relayPeers = iota
	cryptoTLSPeers            // TLS through crypto/tls
	ownTLSPeers               // TLS through netloop.TLSConn (the proxy's records)
)

// tlsPairs puts TLS on both sides of a benchmark session: the client's
// connection to the proxy (in), the proxy's to the server (out). It
// returns the test's ends, shaken hands; own makes them netloop.TLSConns.
func tlsPairs(b testing.TB, client, in, out, server net.Conn, own bool) (c, i, o, s net.Conn) {
	cfg := selfSigned(b)
	cl := &tls.Config{InsecureSkipVerify: true}
	ti, to := netloop.TLSServer(in, cfg), netloop.TLSClient(out, cl)
	var tc, ts interface {
		net.Conn
		Handshake() error
	}
	tc, ts = tls.Client(client, cl), tls.Server(server, cfg)
	if own {
		tc, ts = netloop.TLSClient(client, cl), netloop.TLSServer(server, cfg)
	}
	errs := make(chan error, 2)
	go func() { errs <- tc.Handshake() }()
	go func() { errs <- ts.Handshake() }()
	for _, err := range []error{ti.Handshake(), to.Handshake(), <-errs, <-errs} {
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []*netloop.TLSConn{ti, to} {
		if c.RecordLayer() != "own TLS 1.3" {
			b.Fatalf("record layer %s, want the proxy's own", c.RecordLayer())
		}
	}
	return tc, ti, to, ts
}

func benchRelayLoop(b *testing.B, loopIO string, track bool, peers relayPeers) {
	request := encodeAll(&pgproto3.Bind{Parameters: [][]byte{[]byte("1")}}, &pgproto3.Execute{}, &pgproto3.Sync{})
	answer := encodeAll(&pgproto3.BindComplete{}, &pgproto3.DataRow{Values: [][]byte{[]byte("42")}},
		&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	client, in := netloop.SocketPair(b)
	out, server := netloop.SocketPair(b)
	if peers != plainPeers {
		client, in, out, server = tlsPairs(b, client, in, out, server, peers == ownTLSPeers)
	}
	cfg := Config{Upstream: Upstream{Address: "unused"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), EventLoops: 1, EventLoopIO: loopIO}
	if track {
		cfg.Rewriter = &fakeRewriter{plans: snowflakePlans()}
	}
	srv, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.stopLoops()
	ss := newSession(srv, in, 1)
	ss.server = out
	ss.cp.cr = newFrameReader(in, defaultMaxMessage)
	ss.sp.sr = newFrameReader(out, maxServerMessage)
	ss.sh.cw = bufio.NewWriterSize(in, ioBufferSize)
	ss.cp.sw = bufio.NewWriterSize(out, ioBufferSize)
	ss.attachRelay()
	left := make(chan bool, 1)
	go func() {
		entered, _ := ss.serveInLoop(srv.pickLoop())
		left <- entered
	}()
	go func() { // the stand-in server
		buf := make([]byte, len(request))
		for {
			if _, err := io.ReadFull(server, buf); err != nil {
				return
			}
			if _, err := server.Write(answer); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, len(answer))
	roundTrip := func() {
		if _, err := client.Write(request); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ { // warm up: buffers, queue, maps
		roundTrip()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		roundTrip()
	}
	b.StopTimer()
	_ = client.Close() // the loop hands the session over at EOF
	if !<-left {
		b.Fatal("the session never entered the loop")
	}
	if st := srv.Stats(); st.Handovers != 1 {
		b.Fatalf("%d handovers during the benchmark, want 1 (at the end)", st.Handovers)
	}
}

// A session with TLS 1.3 on both sides, relayed by each loop, allocates
// nothing per round trip: the proxy's records (both sides) and its
// loop, with a client and a server that use the same records, so that
// no allocation of crypto/tls's own reading is counted.
func TestTLSRelayAllocatesNothing(t *testing.T) {
	for _, io := range []string{"epoll", "io_uring"} {
		t.Run(io, func(t *testing.T) {
			if io == "io_uring" && netloop.URingAvailable() != nil {
				testenv.CannotRun(t, "io_uring is not available: %v", netloop.URingAvailable())
			}
			res := testing.Benchmark(func(b *testing.B) { benchRelayLoop(b, io, false, ownTLSPeers) })
			if res.N == 0 {
				t.Fatal("the relay failed (the benchmark ran no round trip)")
			}
			if a := res.AllocsPerOp(); a != 0 {
				t.Fatalf("%d allocations per round trip, want 0 (%d round trips)", a, res.N)
			}
		})
	}
}
