package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// -client-tls configures both relays to take clients over TLS only, with
// the one certificate the harness makes, and pgbench to reach them (and
// only them) with sslmode=require, whatever the upstream variant.
func TestClientTLSConfig(t *testing.T) {
	for _, c := range []struct {
		args      []string
		clientTLS bool
		kind      upstreamKind
		variant   string
		suffix    string
	}{
		{nil, false, upSocket, "", ""},
		{[]string{"-client-tls"}, true, upSocket, "client TLS", "-client-tls"},
		{[]string{"-client-tls", "-upstream-tls"}, true, upTLS, "upstream TLS, client TLS", "-tls-client-tls"},
		{[]string{"-upstream-tcp", "-client-tls"}, true, upTCP, "upstream TCP, client TLS", "-tcp-client-tls"},
		{[]string{"-upstream-tls"}, false, upTLS, "upstream TLS", "-tls"},
	} {
		cfg, err := parseFlags(c.args)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if cfg.clientTLS != c.clientTLS || cfg.upstream != c.kind {
			t.Errorf("%q: client TLS %v, upstream %d; want %v, %d", c.args, cfg.clientTLS, cfg.upstream, c.clientTLS, c.kind)
		}
		if got := runVariant(cfg.upstream, cfg.clientTLS); got != c.variant {
			t.Errorf("%q: title variant %q, want %q", c.args, got, c.variant)
		}
		if got := resultSuffix(cfg.upstream, cfg.clientTLS); got != c.suffix {
			t.Errorf("%q: result suffix %q, want %q", c.args, got, c.suffix)
		}
	}

	ct := &relayCert{"/tmp/sfbench-x/client-tls/server.crt", "/tmp/sfbench-x/client-tls/server.key"}
	args := proxyArgs("127.0.0.1:7000", "/tmp/sock:5433", append(proxyClientTLSArgs(ct), "--procs", "2"))
	want := "--listen 127.0.0.1:7000 --upstream /tmp/sock:5433 --node 1 --log-level warn" +
		" --tls-cert /tmp/sfbench-x/client-tls/server.crt --tls-key /tmp/sfbench-x/client-tls/server.key --tls-require --procs 2"
	if got := strings.Join(args, " "); got != want {
		t.Errorf("proxy args %q, want %q", got, want)
	}
	if got := proxyClientTLSArgs(nil); got != nil {
		t.Errorf("proxy client TLS args without a certificate: %q", got)
	}

	ini := pgbouncerINI(upTLS, ct, "/tmp/sock", 5433, 7001, "/tmp/sfbench-x/pgbouncer")
	for _, line := range []string{
		"\nserver_tls_sslmode = require\n",
		"\nclient_tls_sslmode = require\n",
		"\nclient_tls_cert_file = /tmp/sfbench-x/client-tls/server.crt\n",
		"\nclient_tls_key_file = /tmp/sfbench-x/client-tls/server.key\n",
	} {
		if !strings.Contains(ini, line) {
			t.Errorf("PgBouncer ini lacks %q:\n%s", line, ini)
		}
	}
	if plain := pgbouncerINI(upSocket, nil, "/tmp/sock", 5433, 7001, "/tmp/x"); strings.Contains(plain, "client_tls_cert_file") {
		t.Errorf("PgBouncer ini of a run without client TLS has a certificate:\n%s", plain)
	}

	routes := []route{viaProxy, viaDirect, viaPgBouncer, viaFloor, viaFloorUring}
	for _, clientTLS := range []bool{false, true} {
		for _, r := range routes {
			want := "disable"
			if clientTLS && (r == viaProxy || r == viaPgBouncer) {
				want = "require"
			}
			sslmode := clientSSLMode(clientTLS, r)
			if sslmode != want {
				t.Errorf("client TLS %v, route %d: sslmode %s, want %s", clientTLS, r, sslmode, want)
			}
			env := pgbenchRun{SSLMode: sslmode}.env()
			if env[0] != "PGSSLMODE="+want {
				t.Errorf("client TLS %v, route %d: pgbench env %q", clientTLS, r, env)
			}
		}
	}
	if env := (pgbenchRun{}).env(); env[0] != "PGSSLMODE=disable" {
		t.Errorf("pgbench env without an sslmode: %q", env)
	}
}

// The relays' certificate loads as the proxy loads it (tls.LoadX509KeyPair),
// is for 127.0.0.1, where pgbench connects, and its key is private to the
// user PgBouncer runs as.
func TestWriteRelayCert(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "client-tls")
	ct, err := writeRelayCert(dir)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(ct.certFile, ct.keyFile)
	if err != nil {
		t.Fatalf("the proxy cannot load the certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("certificate not for 127.0.0.1: %v", err)
	}
	fi, err := os.Stat(ct.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestParseConninfoTLS(t *testing.T) {
	for _, c := range []struct{ out, want string }{
		// psql 15, sslmode=require.
		{`You are connected to database "bench" as user "postgres" on host "127.0.0.1" at port "6432".
SSL connection (protocol: TLSv1.3, cipher: TLS_AES_256_GCM_SHA384, compression: off)
`, "TLSv1.3 TLS_AES_256_GCM_SHA384"},
		// psql up to 13 also named the bits.
		{"SSL connection (protocol: TLSv1.2, cipher: ECDHE-RSA-AES256-GCM-SHA384, bits: 256, compression: off)\n", "TLSv1.2 ECDHE-RSA-AES256-GCM-SHA384"},
		// A plaintext session: no SSL line.
		{`You are connected to database "bench" as user "postgres" on host "127.0.0.1" at port "6432".` + "\n", ""},
	} {
		if got := parseConninfoTLS(c.out); got != c.want {
			t.Errorf("parseConninfoTLS(%q) = %q, want %q", c.out, got, c.want)
		}
	}
}

// clientTLSRunDir is a run directory the server's and PgBouncer's OS user
// can reach, as the harness makes it.
func clientTLSRunDir(t *testing.T) string {
	t.Helper()
	// Not t.TempDir: its parent is private to root.
	dir, err := os.MkdirTemp("", "sfbench-ctls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := chmodTraversable(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runPgBouncer runs PgBouncer as the harness does in front of srv, with
// client TLS when ct is not nil, until the end of the test.
func runPgBouncer(t *testing.T, ctx context.Context, dir string, ct *relayCert, srv *pgserver.Server) int {
	t.Helper()
	bin, err := findPgBouncer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, port, err := startPgBouncer(ctx, bin, dir, upSocket, ct, srv.SocketDir(), srv.Port())
	if err != nil {
		t.Fatalf("PgBouncer: %v", err)
	}
	t.Cleanup(p.stop)
	return port
}

// The client TLS check passes a PgBouncer configured as -client-tls
// configures it, with what libpq negotiated, and fails a relay that does
// not offer TLS (PgBouncer as in other runs) and one that also lets
// plaintext clients in (a server with ssl = on): no relay is measured in
// a -client-tls run unless pgbench's sessions to it are encrypted.
func TestClientTLSChecks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := startPostgres(ctx, clientTLSRunDir(t), upSocket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(context.Background()) })
	dir := clientTLSRunDir(t)
	ct, err := writeRelayCert(clientTLSDir(dir))
	if err != nil {
		t.Fatal(err)
	}

	tlsPort := runPgBouncer(t, ctx, dir, ct, srv)
	what, err := checkClientTLS(ctx, tlsPort)
	if err != nil {
		t.Fatalf("PgBouncer with client_tls_sslmode = require: %v", err)
	}
	if !strings.HasPrefix(what, "TLSv1.") {
		t.Errorf("client TLS described as %q, want its version and cipher", what)
	}
	t.Logf("PgBouncer: %s", what)
	// The harness's own sessions through it (setup, the upstream check)
	// use TLS too.
	conn, err := connectSSL(ctx, tlsPort, clientSSLMode(true, viaPgBouncer))
	if err != nil {
		t.Fatalf("session with sslmode=require through PgBouncer: %v", err)
	}
	conn.Close(context.Background())

	plainPort := runPgBouncer(t, ctx, clientTLSRunDir(t), nil, srv)
	what, err = checkClientTLS(ctx, plainPort)
	if err == nil || !strings.Contains(err.Error(), "SSL") {
		t.Fatalf("PgBouncer without client TLS: %q, %v; want psql's refusal of a relay without SSL", what, err)
	}
	t.Logf("PgBouncer without client TLS: %v", err)

	both := tlsRunServer(t, ctx)
	if what, err := checkClientTLS(ctx, both.Port()); !errors.Is(err, errPlaintextClient) {
		t.Fatalf("a relay taking TLS and plaintext clients: %q, %v; want errPlaintextClient", what, err)
	}
}
