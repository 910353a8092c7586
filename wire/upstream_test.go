package wire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// tlsServers are the servers of the upstream TLS tests: one that accepts
// only TLS and SCRAM (hostssl), one whose certificate names another
// host, both from the same test CA.
type tlsServers struct {
	ca         *pgtest.CA
	hostssl    *pgserver.Server
	otherHost  *pgserver.Server
	clientCert pgtest.Pair // CN certuser, issued by ca
}

const tlsPassword = "s3cret-pw"

// upstreamServers starts the TLS servers for one test; they stop at its
// end.
func upstreamServers(t *testing.T) *tlsServers {
	t.Helper()
	ca := pgtest.NewCA(t, "snowflake-proxy test CA")
	s := &tlsServers{ca: ca, clientCert: ca.Client(t, "certuser")}
	s.hostssl = pgtest.StartTLS(t, pgserver.Options{Password: tlsPassword,
		Settings: map[string]string{"password_encryption": "'scram-sha-256'"},
		HBA: []string{
			"local all all trust",
			"hostssl all certuser 127.0.0.1/32 cert",
			"hostssl all certpw 127.0.0.1/32 scram-sha-256 clientcert=verify-ca",
			"hostssl all all 127.0.0.1/32 scram-sha-256",
		}}, ca, ca.Server(t, "localhost", "127.0.0.1"))
	// The superuser's password again, as a SCRAM secret: initdb of
	// PostgreSQL 13 stores it as MD5, which hostssl's scram-sha-256
	// lines refuse.
	execSocket(t, s.hostssl, "SET password_encryption = 'scram-sha-256'; ALTER ROLE "+s.hostssl.Superuser()+" PASSWORD '"+tlsPassword+"'; "+
		"CREATE ROLE certuser LOGIN; CREATE ROLE certpw LOGIN PASSWORD '"+tlsPassword+"'")
	s.otherHost = pgtest.StartTLS(t, pgserver.Options{
		HBA: []string{"local all all trust", "hostssl all all 127.0.0.1/32 trust"}}, ca, ca.Server(t, "db.other.example"))
	return s
}

// execSocket runs sql on srv over its Unix socket (trust), the way in
// when TCP takes only TLS.
func execSocket(t *testing.T, srv *pgserver.Server, sql string) {
	t.Helper()
	c, err := pgconn.Connect(ctxT(t), fmt.Sprintf("host=%s port=%d user=%s dbname=postgres", srv.SocketDir(), srv.Port(), srv.Superuser()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctxT(t), sql).ReadAll(); err != nil {
		t.Fatal(err)
	}
}

// verifying is a client TLS configuration that checks the server's chain
// against ca and its name against name (libpq's verify-full).
func verifying(ca *pgtest.CA, name string) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), ServerName: name, MinVersion: tls.VersionTLS12}
}

func unverified() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }

// tlsRelays are the ways a TLS session can be relayed; the TLS tests run
// each: the event loops (io_uring where the kernel allows it, and epoll),
// and the goroutines alone.
var tlsRelays = []struct {
	name string
	cfg  Config
}{
	{"loop", Config{}},
	{"loop_epoll", Config{EventLoopIO: "epoll"}},
	{"goroutines", Config{EventLoops: -1}},
}

// forTLSRelays runs f once per way of relaying, as subtests; base is the
// proxy configuration to start from.
func forTLSRelays(t *testing.T, f func(t *testing.T, base Config)) {
	for _, r := range tlsRelays {
		t.Run(r.name, func(t *testing.T) { f(t, r.cfg) })
	}
}

// checkTLSRelay fails the test when base has event loops and no session
// of p entered one (the TLS records were not relayed by a loop), or when
// the log says a TLS session was relayed by another path than base's.
func checkTLSRelay(t *testing.T, p *proxy, base Config, logs *pgtest.SyncBuffer) {
	t.Helper()
	want, other := "TLS records relayed by event loop", "TLS records relayed by goroutines"
	if base.EventLoops < 0 || !EventLoopsAvailable {
		want, other = other, want
	} else {
		waitUntil(t, "a session in an event loop", func() bool { return p.Stats().LoopEntries > 0 })
	}
	if logs == nil {
		return
	}
	// The session logs its path when its relay starts, after the client
	// got its ReadyForQuery: wait for the line (a race, regression).
	waitUntil(t, "the log's TLS path", func() bool { return strings.Contains(logs.String(), want) })
	if strings.Contains(logs.String(), other) {
		t.Fatalf("the log does not say %q alone:\n%s", want, logs)
	}
}

// tlsProxy starts a proxy from base in front of srv with the given
// upstream TLS settings; its log goes to the returned buffer.
func tlsProxy(t *testing.T, base Config, srv *pgserver.Server, mode TLSMode, cfg *tls.Config, clientTLS *tls.Config) (*proxy, *pgtest.SyncBuffer) {
	t.Helper()
	logs := &pgtest.SyncBuffer{}
	base.Upstream = Upstream{Network: "tcp", Address: srv.Addr(), TLSMode: mode, TLS: cfg}
	base.TLSConfig = clientTLS
	base.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return startProxy(t, srv, base), logs
}

// userURL is a URL through p as user with password, plaintext to the
// proxy.
func (p *proxy) userURL(user, password, db string) string {
	host, port, _ := net.SplitHostPort(p.addr)
	auth := user
	if password != "" {
		auth += ":" + password
	}
	return "postgres://" + auth + "@" + host + ":" + port + "/" + db + "?sslmode=disable"
}

// sessionSSL connects with url and reports pg_stat_ssl.ssl of the
// session's backend, or the connection error.
func sessionSSL(t *testing.T, url string) (bool, error) {
	t.Helper()
	c, err := pgconn.Connect(ctxT(t), url)
	if err != nil {
		return false, err
	}
	defer c.Close(context.Background())
	r := c.ExecParams(ctxT(t), "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", nil, nil, nil, nil).Read()
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if len(r.Rows) != 1 {
		t.Fatalf("pg_stat_ssl: %d rows", len(r.Rows))
	}
	return string(r.Rows[0][0]) == "t", nil
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestUpstreamTLSModes checks every sslmode of the proxy's sessions
// against a hostssl-only SCRAM server, a server without TLS and a server
// whose certificate names another host: a session is encrypted whenever
// the mode asks for it, and never falls back to plaintext when it
// requires TLS (the client gets FATAL 08001 and the log says why).
// Regression: sessions were always dialled in plaintext, whatever
// sslmode the --upstream URL gave.
func TestUpstreamTLSModes(t *testing.T) {
	s := upstreamServers(t)
	plain := pgtest.Shared(t)
	otherCA := pgtest.NewCA(t, "another CA")
	cases := []struct {
		name    string
		srv     *pgserver.Server
		mode    TLSMode
		tls     *tls.Config
		user    string
		wantSSL bool
		code    string // expected SQLSTATE; "" means the session works
		msg     string // expected in the error message (alternatives separated by |)
	}{
		{"hostssl/disable", s.hostssl, TLSDisable, nil, "postgres", false, "28000", "no encryption|SSL off"},
		{"hostssl/allow", s.hostssl, TLSAllow, unverified(), "postgres", true, "", ""},
		{"hostssl/prefer", s.hostssl, TLSPrefer, unverified(), "postgres", true, "", ""},
		{"hostssl/require", s.hostssl, TLSRequire, unverified(), "postgres", true, "", ""},
		{"hostssl/verify-full", s.hostssl, TLSRequire, verifying(s.ca, "localhost"), "postgres", true, "", ""},
		{"hostssl/verify-full-wrong-ca", s.hostssl, TLSRequire, verifying(otherCA, "localhost"), "postgres", false, "08001", "certificate"},
		{"plain/disable", plain, TLSDisable, nil, "postgres", false, "", ""},
		{"plain/allow", plain, TLSAllow, unverified(), "postgres", false, "", ""},
		{"plain/prefer", plain, TLSPrefer, unverified(), "postgres", false, "", ""},
		{"plain/require", plain, TLSRequire, unverified(), "postgres", false, "08001", "server does not support SSL, but SSL was required"},
		{"plain/verify-full", plain, TLSRequire, verifying(s.ca, "localhost"), "postgres", false, "08001", "server does not support SSL, but SSL was required"},
		{"other-host/require", s.otherHost, TLSRequire, unverified(), "postgres", true, "", ""},
		{"other-host/verify-full", s.otherHost, TLSRequire, verifying(s.ca, "127.0.0.1"), "postgres", false, "08001", "certificate"},
		{"other-host/prefer", s.otherHost, TLSPrefer, unverified(), "postgres", true, "", ""},
	}
	forTLSRelays(t, func(t *testing.T, base Config) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				upstreamTLSMode(t, s, base, tc.srv, tc.mode, tc.tls, tc.user, tc.wantSSL, tc.code, tc.msg)
			})
		}
	})
}

func upstreamTLSMode(t *testing.T, s *tlsServers, base Config, srv *pgserver.Server, mode TLSMode, cfg *tls.Config, user string, wantSSL bool, code, msg string) {
	p, logs := tlsProxy(t, base, srv, mode, cfg, nil)
	pw := ""
	if srv == s.hostssl {
		pw = tlsPassword
	}
	ssl, err := sessionSSL(t, p.userURL(user, pw, "postgres"))
	if code == "" {
		if err != nil {
			t.Fatalf("session refused: %v\nproxy log:\n%s", err, logs)
		}
		if ssl != wantSSL {
			t.Fatalf("pg_stat_ssl.ssl = %v, want %v", ssl, wantSSL)
		}
		if wantSSL {
			checkTLSRelay(t, p, base, logs)
		}
		return
	}
	if pgCode(err) != code || !slices.ContainsFunc(strings.Split(msg, "|"), func(m string) bool { return strings.Contains(err.Error(), m) }) {
		t.Fatalf("want SQLSTATE %s with %q, got %v", code, msg, err)
	}
	if code == "08001" {
		// The session logs why after the client got its FATAL
		// (regression: read at once, the line was sometimes not
		// written yet on a loaded machine).
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(logs.String(), msg) {
			if time.Now().After(deadline) {
				t.Fatalf("the proxy's log does not say why:\n%s", logs)
			}
			time.Sleep(time.Millisecond) // polling a condition with a deadline
		}
	}
}

// TestUpstreamTLSCancel: a cancel request travels like the session, over
// TLS, and reaches a server that takes only TLS.
func TestUpstreamTLSCancel(t *testing.T) {
	s := upstreamServers(t)
	forTLSRelays(t, func(t *testing.T, base Config) { upstreamTLSCancel(t, s, base) })
}

func upstreamTLSCancel(t *testing.T, s *tlsServers, base Config) {
	p, logs := tlsProxy(t, base, s.hostssl, TLSRequire, verifying(s.ca, "localhost"), nil)
	c, err := pgconn.Connect(ctxT(t), p.userURL("postgres", tlsPassword, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Exec(ctxT(t), "SELECT pg_sleep(60)").Close() }()
	deadline := time.Now().Add(30 * time.Second)
	var got error
	for got == nil {
		if time.Now().After(deadline) {
			t.Fatal("the statement was not cancelled")
		}
		if err := c.CancelRequest(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		select {
		case got = <-done:
		case <-time.After(200 * time.Millisecond):
			// The cancel may have come before the statement started:
			// send another.
		}
	}
	if pgCode(got) != "57014" {
		t.Fatalf("want 57014 query_canceled, got %v", got)
	}
	checkTLSRelay(t, p, base, logs)
}

// TestUpstreamSCRAMChannelBinding: the server offers SCRAM-SHA-256-PLUS
// over TLS, but channel binding cannot cross the proxy. A client in
// plaintext logs in; a client on TLS that would bind gets the proxy's
// explanation (28000) instead of the server's "channel binding
// negotiation error"; with channel_binding=disable it logs in; with
// channel_binding=require it stops with its own error, as in front of
// PgBouncer.
func TestUpstreamSCRAMChannelBinding(t *testing.T) {
	s := upstreamServers(t)
	forTLSRelays(t, func(t *testing.T, cfg Config) { upstreamSCRAMChannelBinding(t, s, cfg) })
}

func upstreamSCRAMChannelBinding(t *testing.T, s *tlsServers, cfg Config) {
	p, logs := tlsProxy(t, cfg, s.hostssl, TLSRequire, verifying(s.ca, "localhost"), selfSigned(t))
	base := p.userURL("postgres", tlsPassword, "postgres")
	if _, err := sessionSSL(t, base); err != nil {
		t.Fatalf("plaintext client: %v", err)
	}
	checkTLSRelay(t, p, cfg, logs)
	onTLS := strings.Replace(base, "sslmode=disable", "sslmode=require", 1)
	_, err := sessionSSL(t, onTLS)
	if pgCode(err) != "28000" || !strings.Contains(err.Error(), "channel_binding=disable") {
		t.Fatalf("TLS client with channel binding: want the proxy's 28000, got %v", err)
	}
	if _, err := sessionSSL(t, onTLS+"&channel_binding=disable"); err != nil {
		t.Fatalf("TLS client with channel_binding=disable: %v", err)
	}
	_, err = sessionSSL(t, onTLS+"&channel_binding=require")
	if err == nil || !strings.Contains(err.Error(), "channel binding required") {
		t.Fatalf("channel_binding=require: want the client's own refusal, got %v", err)
	}
}

// TestUpstreamClientCertificate: the proxy presents its client
// certificate to a server that requires one (clientcert=verify-ca), and
// the client's password is still checked end to end; but a session that
// the server would admit on the certificate alone (cert authentication)
// is refused: the proxy does not lend its credentials to clients.
func TestUpstreamClientCertificate(t *testing.T) {
	s := upstreamServers(t)
	forTLSRelays(t, func(t *testing.T, base Config) { upstreamClientCertificate(t, s, base) })
}

func upstreamClientCertificate(t *testing.T, s *tlsServers, base Config) {
	withCert := verifying(s.ca, "localhost")
	withCert.Certificates = []tls.Certificate{s.clientCert.TLS(t)}
	p, logs := tlsProxy(t, base, s.hostssl, TLSRequire, withCert, nil)
	if _, err := sessionSSL(t, p.userURL("certpw", tlsPassword, "postgres")); err != nil {
		t.Fatalf("password session with the proxy's certificate: %v", err)
	}
	checkTLSRelay(t, p, base, logs)
	if _, err := sessionSSL(t, p.userURL("certpw", "wrong", "postgres")); pgCode(err) != "28P01" {
		t.Fatalf("wrong password: want the server's 28P01, got %v", err)
	}
	_, err := sessionSSL(t, p.userURL("certuser", "", "postgres"))
	if pgCode(err) != "28000" || !strings.Contains(err.Error(), "does not lend") {
		t.Fatalf("session admitted on the proxy's certificate: want 28000, got %v", err)
	}
	if !strings.Contains(logs.String(), "session refused") {
		t.Fatalf("the refusal is not logged:\n%s", logs)
	}
	// Without a certificate the server refuses clientcert=verify-ca:
	// the certificate above was really presented.
	q, _ := tlsProxy(t, base, s.hostssl, TLSRequire, verifying(s.ca, "localhost"), nil)
	if _, err := sessionSSL(t, q.userURL("certpw", tlsPassword, "postgres")); pgCode(err) != "28000" {
		t.Fatalf("no certificate: want the server's 28000, got %v", err)
	}
}

func TestUpstreamTLSConfigChecked(t *testing.T) {
	for _, u := range []Upstream{
		{Address: "127.0.0.1:5432", TLSMode: TLSRequire},
		{Address: "127.0.0.1:5432", TLSMode: TLSPrefer},
		{Address: "127.0.0.1:5432", TLSMode: TLSRequire + 1, TLS: unverified()},
	} {
		if _, err := New(Config{Upstream: u}); err == nil {
			t.Fatalf("New accepted %+v", u)
		}
	}
}

// TestDirectTLSNeedsALPN: with sslnegotiation=direct the server must
// select the postgresql protocol in the handshake, as libpq requires;
// another TLS service answering on the port (which selects none) is
// refused before anything is sent to it. Against a TLS listener of Go's
// own, with and without ALPN.
func TestDirectTLSNeedsALPN(t *testing.T) {
	ca := pgtest.NewCA(t, "direct CA")
	cert := ca.Server(t, "localhost", "127.0.0.1").TLS(t)
	for _, tc := range []struct {
		name   string
		protos []string
		msg    string // "": the dial succeeds
	}{
		{"postgresql selected", []string{"postgresql"}, ""},
		{"no ALPN", nil, "without the postgresql protocol negotiated (ALPN)"},
		// Go's server ends such a handshake itself (no_application_protocol).
		{"another protocol", []string{"http/1.1"}, "TLS with the server failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: tc.protos})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := make(chan []byte, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					got <- nil
					return
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 64)
				n, _ := c.Read(buf) // the handshake, then what the proxy sends
				got <- buf[:n]
			}()
			s, err := New(Config{Upstream: Upstream{Network: "tcp", Address: ln.Addr().String(), TLSMode: TLSRequire,
				TLS: verifying(ca, "localhost"), DirectTLS: true}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, _, err := s.dialServer(ctx, attemptTLS)
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				if _, err := c.Write([]byte("hello")); err != nil {
					t.Fatal(err)
				}
				if b := <-got; string(b) != "hello" {
					t.Fatalf("server read %q", b)
				}
				_ = c.Close()
				return
			}
			var we *Error
			if !errors.As(err, &we) || we.Code != "08001" || !strings.Contains(we.Message, tc.msg) {
				t.Fatalf("dial: %v", err)
			}
			if b := <-got; len(b) != 0 {
				t.Fatalf("the proxy sent %q to a server that did not select postgresql", b)
			}
		})
	}
}
