package wire

import (
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// capturing is a client's socket whose writes can be held back, to be
// sent changed.
type capturing struct {
	net.Conn
	hold bool
	held []byte
}

func (c *capturing) Write(p []byte) (int, error) {
	if c.hold {
		c.held = append(c.held, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// A TLS client's record that fails to authenticate, relayed by an event
// loop and by the goroutines: the session ends, the client gets the
// bad_record_mac alert, and the statement in that record never reaches
// the server (its INSERT is not there once the session is over).
func TestTLSTamperedClientRecord(t *testing.T) {
	srv := pgtest.Shared(t)
	execSocket(t, srv, "DROP TABLE IF EXISTS tls_tamper; CREATE TABLE tls_tamper (v int)")
	forTLSRelays(t, func(t *testing.T, base Config) {
		base.TLSConfig = selfSigned(t)
		p := startProxy(t, srv, base)
		raw, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		_ = raw.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := raw.Write(sslRequest[:]); err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		if _, err := raw.Read(b[:]); err != nil || b[0] != 'S' {
			t.Fatalf("SSLRequest: %q %v", b, err)
		}
		cc := &capturing{Conn: raw}
		tc := tls.Client(cc, &tls.Config{InsecureSkipVerify: true})
		fe := startSession(t, tc, srv.Superuser())
		if base.EventLoops >= 0 {
			waitUntil(t, "the session in an event loop", func() bool { return p.Stats().LoopEntries > 0 })
		}
		q, _ := (&pgproto3.Query{String: "INSERT INTO tls_tamper VALUES (1)"}).Encode(nil)
		cc.hold = true
		if _, err := tc.Write(q); err != nil {
			t.Fatal(err)
		}
		cc.hold = false
		rec := cc.held
		if n := int(binary.BigEndian.Uint16(rec[3:5])); n+5 != len(rec) {
			t.Fatalf("held %d bytes, not one record of %d", len(rec), n)
		}
		rec[5+len(q)/2] ^= 0x40
		if _, err := raw.Write(rec); err != nil {
			t.Fatal(err)
		}
		if _, err := fe.Receive(); err == nil {
			t.Fatal("the session goes on after a tampered record")
		}
		waitUntil(t, "the session's end", func() bool { return p.Stats().Active == 0 })
		var n int
		c := connect(t, srv.URL("postgres"))
		if err := c.QueryRow(ctxT(t), "SELECT count(*) FROM tls_tamper").Scan(&n); err != nil || n != 0 {
			t.Fatalf("tls_tamper: %d rows, err %v: the tampered statement ran", n, err)
		}
	})
}

// The server ends a TLS session: pg_terminate_backend makes PostgreSQL
// send its FATAL, then close_notify, then close the socket. Relayed by an
// event loop and by the goroutines, to a plaintext client and to a TLS
// client, the client gets the FATAL and then the end of the session, and
// the proxy's session ends.
func TestUpstreamTLSServerEndsSession(t *testing.T) {
	s := upstreamServers(t)
	forTLSRelays(t, func(t *testing.T, base Config) {
		for _, clientTLS := range []bool{false, true} {
			name := "plaintext client"
			if clientTLS {
				name = "TLS client"
			}
			t.Run(name, func(t *testing.T) {
				var serve *tls.Config
				if clientTLS {
					serve = selfSigned(t)
				}
				p, logs := tlsProxy(t, base, s.otherHost, TLSRequire, unverified(), serve)
				raw, err := net.Dial("tcp", p.addr)
				if err != nil {
					t.Fatal(err)
				}
				defer raw.Close()
				_ = raw.SetDeadline(time.Now().Add(30 * time.Second))
				var rw io.ReadWriter = raw
				if clientTLS {
					if _, err := raw.Write(sslRequest[:]); err != nil {
						t.Fatal(err)
					}
					var b [1]byte
					if _, err := raw.Read(b[:]); err != nil || b[0] != 'S' {
						t.Fatalf("SSLRequest: %q %v", b, err)
					}
					rw = tls.Client(raw, &tls.Config{InsecureSkipVerify: true})
				}
				fe := startSession(t, rw, s.otherHost.Superuser())
				checkTLSRelay(t, p, base, logs)
				fe.Send(&pgproto3.Query{String: "SELECT pg_backend_pid()"})
				if err := fe.Flush(); err != nil {
					t.Fatal(err)
				}
				var pid string
				for {
					m, err := fe.Receive()
					if err != nil {
						t.Fatal(err)
					}
					if d, ok := m.(*pgproto3.DataRow); ok {
						pid = string(d.Values[0])
					}
					if _, ok := m.(*pgproto3.ReadyForQuery); ok {
						break
					}
				}
				execSocket(t, s.otherHost, "SELECT pg_terminate_backend("+pid+")")
				m, err := fe.Receive()
				e, ok := m.(*pgproto3.ErrorResponse)
				if err != nil || !ok || e.Severity != "FATAL" || e.Code != "57P01" {
					t.Fatalf("after pg_terminate_backend: %#v, %v; want the server's FATAL 57P01", m, err)
				}
				if m, err := fe.Receive(); err == nil {
					t.Fatalf("the session goes on after the server ended it: %#v", m)
				}
				waitUntil(t, "the session's end", func() bool { return p.Stats().Active == 0 })
				waitUntil(t, "the session's end logged", func() bool { return strings.Contains(logs.String(), `msg="session end"`) })
				if !strings.Contains(logs.String(), "outcome=upstream_terminated sqlstate=57P01") {
					t.Fatalf("the session's end is not logged as the server's termination:\n%s", logs)
				}
			})
		}
	})
}
