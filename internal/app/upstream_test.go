package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

// TestParseUpstream checks that --upstream follows libpq: its sslmode
// names, defaults and environment variables, its root certificate rules,
// and that no form lets the password into what the proxy prints.
func TestParseUpstream(t *testing.T) {
	home := t.TempDir()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pgtest.NewCA(t, "test CA").PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"PGSSLMODE", "PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY", "PGPASSWORD", "PGPASSFILE", "PGHOST", "PGPORT", "PGUSER", "PGSSLNEGOTIATION"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("HOME", home)
	cases := []struct {
		name     string
		in       string
		env      map[string]string
		mode     wire.TLSMode
		sslmode  string
		network  string
		address  string
		serverNm string // expected tls.Config.ServerName ("" unchecked)
		err      string
	}{
		{name: "url default prefer", in: "postgres://app:pw@db.example:5433/app", mode: wire.TLSPrefer, sslmode: "prefer", network: "tcp", address: "db.example:5433"},
		{name: "url require", in: "postgres://app:pw@db.example/app?sslmode=require", mode: wire.TLSRequire, sslmode: "require", network: "tcp", address: "db.example:5432"},
		{name: "url disable", in: "postgres://app@db.example/app?sslmode=disable", mode: wire.TLSDisable, sslmode: "disable", network: "tcp", address: "db.example:5432"},
		{name: "url allow", in: "postgres://app@db.example/app?sslmode=allow", mode: wire.TLSAllow, sslmode: "allow", network: "tcp", address: "db.example:5432"},
		{name: "verify-full without root", in: "postgres://app@db.example/app?sslmode=verify-full", err: "needs the server's root certificate"},
		{name: "verify-ca without root", in: "postgres://app@db.example/app?sslmode=verify-ca", err: "needs the server's root certificate"},
		{name: "verify-full with root", in: "postgres://app@db.example/app?sslmode=verify-full&sslrootcert=" + caFile, mode: wire.TLSRequire, sslmode: "verify-full", network: "tcp", address: "db.example:5432", serverNm: "db.example"},
		{name: "verify-ca with root", in: "postgres://app@db.example/app?sslmode=verify-ca&sslrootcert=" + caFile, mode: wire.TLSRequire, sslmode: "verify-ca", network: "tcp", address: "db.example:5432"},
		{name: "require with root verifies the chain", in: "postgres://app@db.example/app?sslmode=require&sslrootcert=" + caFile, mode: wire.TLSRequire, sslmode: "verify-ca", network: "tcp", address: "db.example:5432"},
		{name: "sslrootcert=system", in: "postgres://app@db.example/app?sslrootcert=system", mode: wire.TLSRequire, sslmode: "verify-full", network: "tcp", address: "db.example:5432", serverNm: "db.example"},
		{name: "key=value", in: "host=db.example port=6000 user=app password=pw sslmode=require", mode: wire.TLSRequire, sslmode: "require", network: "tcp", address: "db.example:6000"},
		{name: "host:port with PGSSLMODE", in: "db.example:5432", env: map[string]string{"PGSSLMODE": "require"}, mode: wire.TLSRequire, sslmode: "require", network: "tcp", address: "db.example:5432"},
		{name: "PGSSLROOTCERT", in: "db.example:5432", env: map[string]string{"PGSSLMODE": "verify-full", "PGSSLROOTCERT": caFile}, mode: wire.TLSRequire, sslmode: "verify-full", network: "tcp", address: "db.example:5432"},
		{name: "URL wins over environment", in: "postgres://app@db.example/app?sslmode=disable", env: map[string]string{"PGSSLMODE": "require"}, mode: wire.TLSDisable, sslmode: "disable", network: "tcp", address: "db.example:5432"},
		{name: "unix socket dir", in: "/var/run/postgresql", mode: wire.TLSDisable, network: "unix", address: "/var/run/postgresql/.s.PGSQL.5432", sslmode: "disable"},
		{name: "unix socket dir and port (never TLS, as libpq)", in: "/tmp/pg:5433", network: "unix", address: "/tmp/pg/.s.PGSQL.5433", mode: wire.TLSDisable, sslmode: "disable"},
		{name: "several hosts", in: "postgres://app@db1.example,db2.example/app", err: "several hosts"},
		// Regression: a host named twice gives pgconn a fallback with the
		// same TLS, which was read as prefer (a plaintext attempt after an
		// N) although TLS was required.
		{name: "host named twice, verify-full", in: "host=db.example,db.example sslmode=verify-full sslrootcert=" + caFile, mode: wire.TLSRequire, sslmode: "verify-full", network: "tcp", address: "db.example:5432", serverNm: "db.example"},
		{name: "host named twice, verify-ca", in: "postgres://app@db.example,db.example/app?sslmode=verify-ca&sslrootcert=" + caFile, mode: wire.TLSRequire, sslmode: "verify-ca", network: "tcp", address: "db.example:5432"},
		{name: "host named twice, require", in: "host=db.example,db.example sslmode=require", mode: wire.TLSRequire, sslmode: "require", network: "tcp", address: "db.example:5432"},
		{name: "host named twice, prefer", in: "host=db.example,db.example", mode: wire.TLSPrefer, sslmode: "prefer", network: "tcp", address: "db.example:5432"},
		{name: "host named twice, allow", in: "host=db.example,db.example sslmode=allow", mode: wire.TLSAllow, sslmode: "allow", network: "tcp", address: "db.example:5432"},
		{name: "host named twice, disable", in: "host=db.example,db.example sslmode=disable", mode: wire.TLSDisable, sslmode: "disable", network: "tcp", address: "db.example:5432"},
		{name: "bad host:port", in: "db.example:port", err: "invalid --upstream"},
		{name: "bad sslmode", in: "postgres://app@db.example/app?sslmode=sometimes", err: "sslmode"},
		// Regression: errors quoted the input, password included, where
		// pgconn's own masking misses it.
		{name: "bad sslmode, spaced password", in: "host=db.example password = pw sslmode=verfy-full", err: "sslmode"},
		{name: "bad sslmode, sslpassword in a URL", in: "postgres://app@db.example/app?sslmode=verfy-full&sslpassword=pw", err: "sslmode"},
		{name: "URL without its scheme", in: "app:pw@db.example:5432/app", err: "invalid --upstream"},
		{name: "channel_binding=require without verifying the server", in: "postgres://app@db.example/app?sslmode=require&channel_binding=require", err: "channel_binding=require needs sslmode=verify-full or verify-ca"},
		{name: "channel_binding=require with verify-full", in: "postgres://app@db.example/app?sslmode=verify-full&channel_binding=require&sslrootcert=" + caFile, mode: wire.TLSRequire, sslmode: "verify-full", network: "tcp", address: "db.example:5432", serverNm: "db.example"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			up, err := parseUpstream(tc.in, "")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error %q, got %v", tc.err, err)
				}
				if strings.Contains(err.Error(), "pw") {
					t.Fatalf("error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w := up.wire
			if w.Network != tc.network || w.Address != tc.address {
				t.Fatalf("dials %s %s, want %s %s", w.Network, w.Address, tc.network, tc.address)
			}
			if w.TLSMode != tc.mode || w.SSLMode != tc.sslmode {
				t.Fatalf("mode %v (%s), want %v (%s)", w.TLSMode, w.SSLMode, tc.mode, tc.sslmode)
			}
			if (w.TLS == nil) != (tc.mode == wire.TLSDisable) {
				t.Fatalf("TLS config %v with mode %v", w.TLS, w.TLSMode)
			}
			if tc.serverNm != "" && w.TLS.ServerName != tc.serverNm {
				t.Fatalf("ServerName %q, want %q", w.TLS.ServerName, tc.serverNm)
			}
			if strings.Contains(up.display, "pw") && strings.Contains(tc.in, "pw") {
				t.Fatalf("display shows the password: %s", up.display)
			}
		})
	}
}

// TestParseUpstreamDefaultRootCert: like libpq, ~/.postgresql/root.crt is
// the default root certificate; with it sslmode=require verifies the
// chain and verify-full works without sslrootcert.
func TestParseUpstreamDefaultRootCert(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("PGSSLROOTCERT", "")
	os.Unsetenv("PGSSLROOTCERT")
	if err := os.MkdirAll(filepath.Join(home, ".postgresql"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".postgresql", "root.crt"), pgtest.NewCA(t, "home CA").PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	up, err := parseUpstream("postgres://app@db.example/app?sslmode=require", "")
	if err != nil {
		t.Fatal(err)
	}
	if up.wire.SSLMode != "verify-ca" || up.wire.TLS.VerifyPeerCertificate == nil {
		t.Fatalf("require with ~/.postgresql/root.crt: %s, want verify-ca", up.wire.SSLMode)
	}
	up, err = parseUpstream("postgres://app@db.example/app?sslmode=verify-full", "")
	if err != nil {
		t.Fatal(err)
	}
	if up.wire.TLS.RootCAs == nil || up.wire.TLS.InsecureSkipVerify {
		t.Fatal("verify-full does not verify against ~/.postgresql/root.crt")
	}
}

// TestUpstreamPasswordHidden: the control password reaches the control
// connection string, from the URL or a password file, and never the
// string that is logged or printed.
func TestUpstreamPasswordHidden(t *testing.T) {
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("file-secret:with'quote\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, file, secret string }{
		{"postgres://app:url-secret@db.example/app?sslmode=disable", "", "url-secret"},
		{"postgres://app@db.example/app?sslmode=disable&password=query-secret", "", "query-secret"},
		{"host=db.example user=app password='dsn secret' sslmode=disable", "", "dsn secret"},
		{"host=db.example user=app password=dsnsecret2 sslmode=disable", "", "dsnsecret2"},
		// Regression: the passphrase of the client key in a URL was shown.
		{"postgres://app@db.example/app?sslmode=disable&sslpassword=key-secret", "", "key-secret"},
		{"host=db.example user=app sslpassword=key-secret2 sslmode=disable", "", "key-secret2"},
		{"host=db.example user=app password = spaced-secret sslmode=disable", "", "spaced-secret"},
		{"postgres://app@db.example/app?sslmode=disable", pwFile, "file-secret"},
		{"host=db.example user=app sslmode=disable", pwFile, "file-secret"},
	} {
		up, err := parseUpstream(tc.in, tc.file)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if strings.Contains(up.display, tc.secret) {
			t.Fatalf("%s: display shows the password: %s", tc.in, up.display)
		}
		if !strings.Contains(up.display, "db.example") {
			t.Fatalf("%s: display lost the host: %s", tc.in, up.display)
		}
		if tc.file != "" {
			cfg, err := pgconn.ParseConfig(up.controlURL)
			if err != nil {
				t.Fatalf("%s: control connection string: %v", tc.in, err)
			}
			if cfg.Password != "file-secret:with'quote" {
				t.Fatalf("%s: the password file's password is not used as is", tc.in)
			}
		}
	}
	if _, err := parseUpstream("postgres://app@db.example/app", filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing password file is accepted")
	}
}
