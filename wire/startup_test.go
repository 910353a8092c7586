package wire

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

func TestAuthMethods(t *testing.T) {
	for _, method := range []string{"md5", "scram-sha-256", "password"} {
		t.Run(method, func(t *testing.T) {
			settings := map[string]string{}
			if method == "md5" {
				settings["password_encryption"] = "'md5'"
			}
			srv := pgtest.Start(t, pgserver.Options{Password: "secret", Settings: settings,
				HBA: []string{"local all all trust", "host all all 127.0.0.1/32 " + method}})
			p := startProxy(t, srv, Config{})
			host, port, _ := net.SplitHostPort(p.addr)
			base := "postgres://" + srv.Superuser() + ":%s@" + host + ":" + port + "/postgres?sslmode=disable"
			c, err := pgconn.Connect(ctxT(t), strings.Replace(base, "%s", "secret", 1))
			if err != nil {
				t.Fatalf("right password refused: %v", err)
			}
			if r := c.ExecParams(ctxT(t), "SELECT 1", nil, nil, nil, nil).Read(); r.Err != nil {
				t.Fatal(r.Err)
			}
			_ = c.Close(ctxT(t))
			_, err = pgconn.Connect(ctxT(t), strings.Replace(base, "%s", "wrong", 1))
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "28P01" {
				t.Fatalf("wrong password: want the server's 28P01, got %v", err)
			}
		})
	}
}

func selfSigned(t testing.TB) *tls.Config {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// TestTLS: clients on TLS and in plaintext, with the event loops and
// without.
func TestTLS(t *testing.T) {
	srv := pgtest.Shared(t)
	forTLSRelays(t, func(t *testing.T, base Config) { clientTLS(t, srv, base) })
}

func clientTLS(t *testing.T, srv *pgserver.Server, base Config) {
	logs := &pgtest.SyncBuffer{}
	base.TLSConfig = selfSigned(t)
	base.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := startProxy(t, srv, base)
	for _, mode := range []string{"require", "disable", "prefer"} {
		url := strings.Replace(p.url(srv, "postgres"), "sslmode=disable", "sslmode="+mode, 1)
		c, err := pgconn.Connect(ctxT(t), url)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		r := c.ExecParams(ctxT(t), "SELECT 1", nil, nil, nil, nil).Read()
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		_, isTLS := c.Conn().(*tls.Conn)
		if isTLS != (mode != "disable") {
			t.Fatalf("%s: tls %v", mode, isTLS)
		}
		_ = c.Close(ctxT(t))
	}
	checkTLSRelay(t, p, base, logs)
	// Without a certificate SSLRequest is answered N: require fails, prefer works.
	plain := startProxy(t, srv, Config{EventLoops: base.EventLoops, EventLoopIO: base.EventLoopIO})
	url := strings.Replace(plain.url(srv, "postgres"), "sslmode=disable", "sslmode=require", 1)
	if _, err := pgconn.Connect(ctxT(t), url); err == nil {
		t.Fatal("sslmode=require accepted without TLS")
	}
	url = strings.Replace(plain.url(srv, "postgres"), "sslmode=disable", "sslmode=prefer", 1)
	c, err := pgconn.Connect(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close(ctxT(t))
}

// rawConn dials the proxy for hand-written protocol exchanges.
func rawConn(t *testing.T, p *proxy) net.Conn {
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func requestCode(code uint32) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b, 8)
	binary.BigEndian.PutUint32(b[4:], code)
	return b
}

func TestGSSENCAnsweredN(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{})
	c := rawConn(t, p)
	_, _ = c.Write(requestCode(gssRequestCode))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'N' {
		t.Fatalf("got %q %v", b, err)
	}
	// Then a normal startup works on the same connection.
	startSession(t, c, srv.Superuser())
}

// startSession sends a StartupMessage on rw, as user to database postgres,
// and reads up to the first ReadyForQuery; it returns the frontend.
func startSession(t testing.TB, rw io.ReadWriter, user string) *pgproto3.Frontend {
	t.Helper()
	fe := pgproto3.NewFrontend(rw, rw)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": user, "database": "postgres"}})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			return fe
		}
	}
}

func TestUnsupportedProtocol(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{})
	c := rawConn(t, p)
	_, _ = c.Write(requestCode(2 << 16))
	e := readError(t, c)
	if e.Code != "0A000" || !strings.Contains(e.Message, "unsupported frontend protocol 2.0") {
		t.Fatalf("got %+v", e)
	}
}

func readError(t *testing.T, c net.Conn) *pgproto3.ErrorResponse {
	t.Helper()
	fe := pgproto3.NewFrontend(c, c)
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("no ErrorResponse: %v", err)
		}
		if e, ok := m.(*pgproto3.ErrorResponse); ok {
			// And then the connection is closed.
			if _, err := fe.Receive(); err == nil {
				t.Fatal("connection not closed after the error")
			}
			return e
		}
	}
}

func TestUpstreamUnreachable(t *testing.T) {
	srv := pgtest.Shared(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	p := startProxy(t, srv, Config{Upstream: Upstream{Network: "tcp", Address: dead}})
	_, err := pgconn.Connect(ctxT(t), p.url(srv, "postgres"))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !strings.HasPrefix(pe.Code, "08") {
		t.Fatalf("want a connection-class error, got %v", err)
	}
	_ = p.Close(ctxT(t))
	if p.Stats().Errors["upstream_dial"] != 1 {
		t.Fatalf("stats: %+v", p.Stats())
	}
}

func TestUpstreamLost(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{})
	c := connectPg(t, p.url(srv, "postgres"))
	other := connectPg(t, srv.URL("postgres"))
	ctx := ctxT(t)
	// Terminating the backend: the server sends its own FATAL 57P01.
	r := other.ExecParams(ctx, "SELECT pg_terminate_backend($1)", [][]byte{[]byte(strconv.Itoa(int(c.PID())))}, nil, nil, nil).Read()
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	err := c.ExecParams(ctx, "SELECT 1", nil, nil, nil, nil).Read().Err
	if err == nil {
		t.Fatal("query succeeded on a terminated backend")
	}
}

func TestOversizedMessage(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{MaxMessageSize: 1 << 16})
	c := connectPg(t, p.url(srv, "postgres"))
	big := strings.Repeat("x", 1<<17)
	err := c.ExecParams(ctxT(t), "SELECT $1::text", [][]byte{[]byte(big)}, nil, nil, nil).Read().Err
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "08P01" {
		t.Fatalf("want 08P01, got %v", err)
	}
	_ = p.Close(ctxT(t)) // waits for the session to end
	if p.Stats().Errors["client_protocol"] != 1 {
		t.Fatalf("stats: %+v", p.Stats())
	}
}

func TestGarbageInput(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}})
	inputs := [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		{0, 0, 0, 3},
		{0xff, 0xff, 0xff, 0xff, 1, 2},
		{0, 0, 0, 8, 0, 3, 0, 0},
		{0, 0, 0, 12, 0, 3, 0, 0, 'u', 's', 'e', 'r'},
		{0, 0, 0, 8},
	}
	for _, in := range inputs {
		c := rawConn(t, p)
		_, _ = c.Write(in)
		closeWrite(c)
		_, _ = io.ReadAll(c)
	}
	// After startup: garbage frames of every type.
	for _, typ := range []byte{0, 1, 'B', 'C', 'D', 'E', 'F', 'H', 'P', 'Q', 'S', 'X', 'd', 'c', 'f', 'p', 0xff} {
		c := rawConn(t, p)
		startSession(t, c, srv.Superuser())
		_, _ = c.Write([]byte{byte(typ), 0, 0, 0, 7, 1, 0, 2})
		_, _ = c.Write([]byte{'X', 0, 0, 0, 4})
		_, _ = io.ReadAll(c)
	}
	// The proxy still serves.
	pc := connectPg(t, p.url(srv, "postgres"))
	if r := pc.ExecParams(ctxT(t), "SELECT 1", nil, nil, nil, nil).Read(); r.Err != nil {
		t.Fatal(r.Err)
	}
}
