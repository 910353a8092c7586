package netloop

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// Regression: each connection's copy of the server configuration (for
// its secretLog) made ticket keys of its own, so no session was ever
// resumed. A client with a session cache resumes on a second
// connection, with the configuration given directly and through
// GetConfigForClient (the reloadable one of --tls-cert), and its
// records are the proxy's own both times.
func TestTLSServerResumesSessions(t *testing.T) {
	ca := pgtest.NewCA(t, "records13 test CA")
	direct := &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "localhost").TLS(t)}}
	viaHello := &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return direct, nil }}
	for name, srv := range map[string]*tls.Config{"direct": direct, "GetConfigForClient": viaHello} {
		t.Run(name, func(t *testing.T) {
			cl := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", ClientSessionCache: tls.NewLRUClientSessionCache(4)}
			for i, wantResumed := range []bool{false, true} {
				a, b := SocketPair(t)
				proxy, peer := TLSServer(a, srv), tls.Client(b, cl)
				shakeBoth(t, proxy.Handshake, peer.Handshake)
				_ = b.SetDeadline(time.Now().Add(20 * time.Second))
				// The client takes the ticket in with the first record
				// it reads.
				if _, err := proxy.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				readFull(t, "peer", peer, []byte("x"))
				if got := peer.ConnectionState().DidResume; got != wantResumed {
					t.Fatalf("connection %d: resumed %v, want %v", i, got, wantResumed)
				}
				if proxy.RecordLayer() != "own TLS 1.3" {
					t.Fatalf("connection %d: record layer %s", i, proxy.RecordLayer())
				}
			}
		})
	}
}
