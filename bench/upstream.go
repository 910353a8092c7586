package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
)

// How the proxy and PgBouncer reach the server. By default they use its
// Unix socket. -upstream-tls puts both on TCP 127.0.0.1 with TLS (libpq's
// sslmode=require for the proxy, server_tls_sslmode = require for
// PgBouncer; libpq never uses TLS on a Unix socket), so that what
// encrypting the server leg costs shows beside a default run's figures.
// -upstream-tcp is the same TCP path in plaintext: it tells TLS's share of
// that cost from TCP's. The direct targets are the same in every variant
// (pgbench over TCP, plaintext), so proxy/direct of two runs have the same
// denominator. The floor relay relays to a Unix socket only and is not run
// on the TCP variants.

// upstreamKind is the variant of one whole run.
type upstreamKind int

const (
	upSocket upstreamKind = iota // the server's Unix socket
	upTCP                        // TCP 127.0.0.1, plaintext
	upTLS                        // TCP 127.0.0.1, TLS required
)

// tlsCheckTimeout bounds each check that a relay's sessions are encrypted.
const tlsCheckTimeout = 30 * time.Second

// errPlaintext is a session that reaches the server unencrypted in a run
// that is to measure TLS.
var errPlaintext = errors.New("the session reaches the server in plaintext")

// flag is the command-line flag selecting k ("" for the default).
func (k upstreamKind) flag() string {
	switch k {
	case upTCP:
		return "-upstream-tcp"
	case upTLS:
		return "-upstream-tls"
	}
	return ""
}

// suffix marks the variant in the result files' names.
func (k upstreamKind) suffix() string {
	switch k {
	case upTCP:
		return "-tcp"
	case upTLS:
		return "-tls"
	}
	return ""
}

// describe says how the relays reach the server, for the report.
func (k upstreamKind) describe() string {
	switch k {
	case upTCP:
		return "TCP 127.0.0.1, plaintext (proxy sslmode=disable, PgBouncer server_tls_sslmode = disable)"
	case upTLS:
		return "TCP 127.0.0.1 with TLS (proxy sslmode=require, PgBouncer server_tls_sslmode = require; self-signed ECDSA P-256 certificate, not verified)"
	}
	return "the server's Unix socket"
}

// proxyUpstream is the proxy's --upstream for the server on sockDir and
// port. The TCP variants spell out sslmode: the proxy follows libpq,
// whose default (prefer) would pick TLS whenever the server offers it.
func proxyUpstream(k upstreamKind, sockDir string, port int) string {
	switch k {
	case upTCP:
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	case upTLS:
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=require", port)
	}
	return fmt.Sprintf("%s:%d", sockDir, port)
}

// pgbouncerUpstream is PgBouncer's host for the server and its
// server_tls_sslmode.
func pgbouncerUpstream(k upstreamKind, sockDir string) (host, sslmode string) {
	switch k {
	case upTCP:
		return "127.0.0.1", "disable"
	case upTLS:
		return "127.0.0.1", "require"
	}
	return sockDir, "disable"
}

// writeServerCert makes a self-signed certificate for 127.0.0.1 and
// localhost and writes it and its key into dir (created 0700), owned by
// uid:gid when uid >= 0: PostgreSQL refuses a key it does not own or that
// others may read. Nothing of it outlives the run's directory.
func writeServerCert(dir string, uid, gid int) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("server key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", "", fmt.Errorf("serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		// A run lasts hours at most; sessions are opened throughout.
		NotAfter:    time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", fmt.Errorf("server certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("server key: %w", err)
	}
	// The parent may be where the server's data and socket go: 0755, not
	// MkdirAll's 0700 all the way down.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	files := []struct {
		path string
		pem  []byte
	}{
		{certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})},
		{keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.pem, 0o600); err != nil {
			return "", "", err
		}
	}
	if uid >= 0 {
		for _, p := range []string{dir, certFile, keyFile} {
			if err := os.Chown(p, uid, gid); err != nil {
				return "", "", fmt.Errorf("chown %s: %w", p, err)
			}
		}
	}
	return certFile, keyFile, nil
}

// tlsSettings are the postgresql.conf lines serving certFile and keyFile.
func tlsSettings(certFile, keyFile string) map[string]string {
	return map[string]string{
		"ssl":           "on",
		"ssl_cert_file": "'" + certFile + "'",
		"ssl_key_file":  "'" + keyFile + "'",
	}
}

// sessionTLS returns the TLS version and cipher of the connection between
// conn's backend and whoever opened it (the relay, for a session through
// one), or errPlaintext.
func sessionTLS(ctx context.Context, conn *pgx.Conn) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, tlsCheckTimeout)
	defer cancel()
	var ssl bool
	var version, cipher string
	err := conn.QueryRow(ctx, "SELECT ssl, coalesce(version, ''), coalesce(cipher, '') FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl, &version, &cipher)
	if err != nil {
		return "", fmt.Errorf("read pg_stat_ssl: %w", err)
	}
	if !ssl {
		return "", errPlaintext
	}
	return version + " " + cipher, nil
}

// proxyControlTLS counts the proxy's own connections to the server (their
// application_name starts with snowflake-proxy) and fails when one of
// them is plaintext.
func proxyControlTLS(ctx context.Context, conn *pgx.Conn) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, tlsCheckTimeout)
	defer cancel()
	var plain, all int
	err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT s.ssl), count(*)
		FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
		WHERE a.backend_type = 'client backend' AND a.application_name LIKE 'snowflake-proxy%'`).Scan(&plain, &all)
	if err != nil {
		return 0, fmt.Errorf("read pg_stat_ssl: %w", err)
	}
	if plain > 0 {
		return all, fmt.Errorf("%d of the proxy's %d control connections reach the server in plaintext", plain, all)
	}
	return all, nil
}

// relayTLS opens a session through the relay on 127.0.0.1:port, with
// sslmode between the harness and the relay, and returns its server leg's
// TLS version and cipher, or why it is not encrypted.
func relayTLS(ctx context.Context, port int, sslmode string) (string, error) {
	conn, err := connectSSL(ctx, port, sslmode)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	return sessionTLS(ctx, conn)
}

// checkProxyTLS checks a session through the proxy on port (its client
// with sslmode) and the proxy's control connections, seen from a direct
// connection to the server on serverPort.
func checkProxyTLS(ctx context.Context, port int, sslmode string, serverPort int) (string, error) {
	session, err := relayTLS(ctx, port, sslmode)
	if err != nil {
		return "", fmt.Errorf("session through the proxy: %w", err)
	}
	direct, err := connect(ctx, serverPort)
	if err != nil {
		return "", fmt.Errorf("direct connection to check the proxy's control connections: %w", err)
	}
	defer direct.Close(context.Background())
	n, err := proxyControlTLS(ctx, direct)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("session %s, %d control connection(s) all TLS", session, n), nil
}

// verifyUpstreamTLS checks, before anything is measured, that the
// sessions of each relay reach the server encrypted. A relay whose session
// is plaintext is not measured: no figure of a TLS run may come from a
// plaintext session. What was seen goes into the report's header.
func (h *harness) verifyUpstreamTLS(ctx context.Context) {
	if h.cfg.upstream != upTLS {
		return
	}
	if h.proxy.err == nil {
		what, err := checkProxyTLS(ctx, h.proxy.port, h.relaySSLMode(), h.srv.Port())
		if err != nil {
			h.proxy.err = fmt.Errorf("upstream TLS check failed, proxy not measured: %w", err)
			fmt.Println("bench: " + h.proxy.err.Error())
		} else {
			h.tlsSeen = append(h.tlsSeen, "proxy: "+what)
			fmt.Println("bench: upstream TLS of the proxy: " + what)
		}
	}
	if h.pgb.up() {
		what, err := relayTLS(ctx, h.pgb.port, h.relaySSLMode())
		if err != nil {
			h.pgb.fail(fmt.Sprintf("PgBouncer upstream TLS check failed, its column is left out: session through PgBouncer: %v", err))
		} else {
			h.tlsSeen = append(h.tlsSeen, "PgBouncer: session "+what)
			fmt.Println("bench: upstream TLS of PgBouncer: session " + what)
		}
	}
}
