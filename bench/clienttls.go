package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Client TLS. -client-tls puts TLS between pgbench and the relays: the
// proxy serves clients with --tls-cert, --tls-key and --tls-require,
// PgBouncer with client_tls_sslmode = require and the same certificate,
// and pgbench connects to both with sslmode=require. How the relays reach
// the server is chosen apart (-upstream-tls, -upstream-tcp or the Unix
// socket), so -client-tls -upstream-tls has TLS on both legs, as a
// managed-PostgreSQL deployment with TLS clients has. The direct targets
// stay plaintext, as in every run, so proxy/direct of two runs have the
// same denominator. The floor relay does not terminate TLS (it would pass
// pgbench's handshake on to the server) and is not run.

// errPlaintextClient is a relay that lets a client in without TLS in a
// run that is to measure client TLS.
var errPlaintextClient = errors.New("the relay accepts a client in plaintext")

// relayCert is the certificate and key the relays serve clients with in a
// -client-tls run; nil in the others.
type relayCert struct {
	certFile, keyFile string
}

// writeRelayCert makes the relays' certificate for clients in dir,
// readable by the user PgBouncer runs as (the proxy runs as the harness's
// user, root or that same user). One certificate for both relays: the
// same key type, the same handshake.
func writeRelayCert(dir string) (*relayCert, error) {
	_, uid, gid, err := unprivileged()
	if err != nil {
		return nil, err
	}
	cert, key, err := writeServerCert(dir, uid, gid)
	if err != nil {
		return nil, fmt.Errorf("relay certificate for clients: %w", err)
	}
	return &relayCert{cert, key}, nil
}

// proxyClientTLSArgs are the proxy flags that serve clients with c and
// refuse those without TLS; none without c.
func proxyClientTLSArgs(c *relayCert) []string {
	if c == nil {
		return nil
	}
	return []string{"--tls-cert", c.certFile, "--tls-key", c.keyFile, "--tls-require"}
}

// pgbouncerClientTLS is the client side of PgBouncer's ini: TLS required
// with c, or disabled (PgBouncer's default) without c.
func pgbouncerClientTLS(c *relayCert) string {
	if c == nil {
		return "client_tls_sslmode = disable\n"
	}
	return "client_tls_sslmode = require\n" +
		"client_tls_cert_file = " + c.certFile + "\n" +
		"client_tls_key_file = " + c.keyFile + "\n"
}

// clientSSLMode is the sslmode of pgbench and the harness's own sessions
// on route r: require to the relays in a -client-tls run, disable
// otherwise (the direct targets, and every target of the other runs).
func clientSSLMode(clientTLS bool, r route) string {
	if clientTLS && (r == viaProxy || r == viaPgBouncer) {
		return "require"
	}
	return "disable"
}

// relaySSLMode is the sslmode of the harness's sessions through a relay.
func (h *harness) relaySSLMode() string {
	return clientSSLMode(h.cfg.clientTLS, viaProxy)
}

// runVariant names the run's variant in the title, e.g. "upstream TLS,
// client TLS"; "" for a default run.
func runVariant(k upstreamKind, clientTLS bool) string {
	var parts []string
	switch k {
	case upTLS:
		parts = append(parts, "upstream TLS")
	case upTCP:
		parts = append(parts, "upstream TCP")
	}
	if clientTLS {
		parts = append(parts, "client TLS")
	}
	return strings.Join(parts, ", ")
}

// resultSuffix marks the variant in the result files' names: the
// upstream's suffix, then -client-tls.
func resultSuffix(k upstreamKind, clientTLS bool) string {
	if clientTLS {
		return k.suffix() + "-client-tls"
	}
	return k.suffix()
}

// describeClients says how pgbench reaches the targets, for the report.
func describeClients(clientTLS bool) string {
	if clientTLS {
		return "clients connect over TCP 127.0.0.1, with TLS to the proxy and PgBouncer (pgbench sslmode=require; proxy --tls-cert/--tls-key/--tls-require, PgBouncer client_tls_sslmode = require; one self-signed ECDSA P-256 certificate, not verified) and without TLS to the server (direct)"
	}
	return "clients connect over TCP 127.0.0.1 without TLS"
}

var (
	// conninfoProtocolRe and conninfoCipherRe read psql's \conninfo:
	// "SSL connection (protocol: TLSv1.3, cipher: TLS_AES_256_GCM_SHA384,
	// compression: off)" up to PostgreSQL 17. psql 18 prints a table;
	// its rows are read too if they name the protocol and the cipher
	// before a "|" (this machine has psql 15: not checked). Either way the
	// proof of TLS is libpq's sslmode=require, not this text.
	conninfoProtocolRe = regexp.MustCompile(`(?i)\bprotocol\b[:|\s]*(TLSv[0-9.]+)`)
	conninfoCipherRe   = regexp.MustCompile(`(?i)\bcipher\b[:|\s]*([A-Za-z0-9_-]+)`)
)

// parseConninfoTLS returns the TLS version and cipher in psql's \conninfo
// output, or "" when it names none.
func parseConninfoTLS(out string) string {
	p := conninfoProtocolRe.FindStringSubmatch(out)
	c := conninfoCipherRe.FindStringSubmatch(out)
	if p == nil || c == nil {
		return ""
	}
	return p[1] + " " + c[1]
}

// psqlTLS opens a session on 127.0.0.1:port with psql and
// sslmode=require, which is libpq as pgbench meets the relay: libpq ends a
// session with sslmode=require that the relay does not take into TLS, so
// success is the proof. It returns the TLS version and cipher libpq
// negotiated.
func psqlTLS(ctx context.Context, port int) (string, error) {
	psql, err := exec.LookPath("psql")
	if err != nil {
		return "", fmt.Errorf("psql not found in PATH (postgresql-client, which has pgbench): %w", err)
	}
	cmd := exec.CommandContext(ctx, psql, "-X", "-w", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "postgres", "-d", benchDB, "-c", `\conninfo`)
	cmd.Env = append(os.Environ(), "PGSSLMODE=require", "PGCONNECT_TIMEOUT=10")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql sslmode=require: %v: %s", err, oneLine(lastN(string(out), 300)))
	}
	if what := parseConninfoTLS(string(out)); what != "" {
		return what, nil
	}
	return "TLS (psql did not name the version)", nil
}

// checkClientTLS checks that the relay on port takes clients as pgbench
// meets it in a -client-tls run: a libpq session with sslmode=require is
// encrypted, and a session without TLS is refused. It returns the TLS
// version and cipher libpq negotiated.
func checkClientTLS(ctx context.Context, port int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, tlsCheckTimeout)
	defer cancel()
	what, err := psqlTLS(ctx, port)
	if err != nil {
		return "", err
	}
	if plain, err := connect(ctx, port); err == nil {
		plain.Close(context.Background())
		return "", errPlaintextClient
	}
	return what, nil
}

// verifyClientTLS checks, before anything is measured, that each relay
// takes its clients over TLS only. A relay that fails is not measured, as
// in verifyUpstreamTLS; what was seen goes into the report's header.
func (h *harness) verifyClientTLS(ctx context.Context) {
	if !h.cfg.clientTLS {
		return
	}
	if h.proxy.err == nil {
		what, err := checkClientTLS(ctx, h.proxy.port)
		if err != nil {
			h.proxy.err = fmt.Errorf("client TLS check failed, proxy not measured: %w", err)
			fmt.Println("bench: " + h.proxy.err.Error())
		} else {
			h.clientTLSSeen = append(h.clientTLSSeen, "proxy: "+what)
			fmt.Println("bench: client TLS of the proxy: " + what + " (a session without TLS refused)")
		}
	}
	if h.pgb.up() {
		what, err := checkClientTLS(ctx, h.pgb.port)
		if err != nil {
			h.pgb.fail(fmt.Sprintf("PgBouncer client TLS check failed, its column is left out: %v", err))
		} else {
			h.clientTLSSeen = append(h.clientTLSSeen, "PgBouncer: "+what)
			fmt.Println("bench: client TLS of PgBouncer: " + what + " (a session without TLS refused)")
		}
	}
}

// clientTLSDir is where a -client-tls run's relay certificate goes.
func clientTLSDir(runDir string) string { return filepath.Join(runDir, "client-tls") }
