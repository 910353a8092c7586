package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// Each upstream variant configures the proxy and PgBouncer alike: the
// proxy's --upstream, read by the parser the proxy itself uses (pgconn),
// and PgBouncer's ini reach the same server the same way.
func TestUpstreamConfig(t *testing.T) {
	const sock, pgPort = "/tmp/sfbench-x/pg/sock", 5433
	for _, c := range []struct {
		name     string
		flag     string
		kind     upstreamKind
		upstream string // the proxy's --upstream
		tls      bool   // the proxy must use TLS, with no plaintext fallback
		host     string // PgBouncer's host
		sslmode  string // PgBouncer's server_tls_sslmode
		suffix   string
	}{
		{"socket", "", upSocket, "/tmp/sfbench-x/pg/sock:5433", false, sock, "disable", ""},
		{"tcp", "-upstream-tcp", upTCP, "postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable", false, "127.0.0.1", "disable", "-tcp"},
		{"tls", "-upstream-tls", upTLS, "postgres://postgres@127.0.0.1:5433/postgres?sslmode=require", true, "127.0.0.1", "require", "-tls"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var args []string
			if c.flag != "" {
				args = []string{c.flag}
			}
			cfg, err := parseFlags(args)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.upstream != c.kind || c.kind.suffix() != c.suffix || c.kind.flag() != c.flag {
				t.Fatalf("%q: kind %d (suffix %q, flag %q), want %d", c.flag, cfg.upstream, cfg.upstream.suffix(), cfg.upstream.flag(), c.kind)
			}

			up := proxyUpstream(c.kind, sock, pgPort)
			args = proxyArgs("127.0.0.1:7000", up, []string{"--procs", "2"})
			want := []string{"--listen", "127.0.0.1:7000", "--upstream", c.upstream, "--node", "1", "--log-level", "warn", "--procs", "2"}
			if strings.Join(args, " ") != strings.Join(want, " ") {
				t.Errorf("proxy args %q, want %q", args, want)
			}
			if c.kind != upSocket {
				pc, err := pgconn.ParseConfig(up)
				if err != nil {
					t.Fatal(err)
				}
				if pc.Host != "127.0.0.1" || pc.Port != pgPort {
					t.Errorf("proxy upstream %s:%d, want TCP 127.0.0.1:%d", pc.Host, pc.Port, pgPort)
				}
				if got := pc.TLSConfig != nil && len(pc.Fallbacks) == 0; got != c.tls {
					t.Errorf("proxy upstream %s: TLS required %v, want %v", up, got, c.tls)
				}
				if !c.tls && pc.TLSConfig != nil {
					t.Errorf("proxy upstream %s may use TLS in a plaintext run", up)
				}
			}

			ini := pgbouncerINI(c.kind, nil, sock, pgPort, 7001, "/tmp/sfbench-x/pgbouncer")
			for _, line := range []string{
				fmt.Sprintf("bench = host=%s port=%d dbname=bench\n", c.host, pgPort),
				"\nserver_tls_sslmode = " + c.sslmode + "\n",
				"\nclient_tls_sslmode = disable\n",
				"\nlisten_port = 7001\n",
				"\npool_mode = session\n",
			} {
				if !strings.Contains(ini, line) {
					t.Errorf("PgBouncer ini lacks %q:\n%s", line, ini)
				}
			}
		})
	}
	if _, err := parseFlags([]string{"-upstream-tls", "-upstream-tcp"}); err == nil {
		t.Error("-upstream-tls with -upstream-tcp accepted")
	}
}

// tlsRunServer starts the bench's PostgreSQL as an -upstream-tls run does,
// with its certificate made and owned as the harness makes it.
func tlsRunServer(t *testing.T, ctx context.Context) *pgserver.Server {
	t.Helper()
	// Not t.TempDir: its parent is private to root, and the server's OS
	// user must reach the run's directory, as in the harness.
	dir, err := os.MkdirTemp("", "sfbench-tls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := chmodTraversable(dir); err != nil {
		t.Fatal(err)
	}
	srv, err := startPostgres(ctx, dir, upTLS)
	if err != nil {
		t.Fatalf("server with the run's certificate: %v", err)
	}
	t.Cleanup(func() { srv.Stop(context.Background()) })
	return srv
}

// connectApp opens a session on the server at 127.0.0.1:port with sslmode
// and application_name.
func connectApp(t *testing.T, ctx context.Context, port int, sslmode, app string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=%s&connect_timeout=10", port, benchDB, sslmode))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect sslmode=%s: %v", sslmode, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// The run's server serves TLS with the certificate the harness made (the
// key owned by the server's OS user, mode 0600, or PostgreSQL does not
// start), still takes the direct targets' plaintext sessions, and the
// checks tell the two apart: an encrypted session passes, a plaintext one
// fails, and one plaintext connection among the proxy's control
// connections fails the proxy.
func TestUpstreamTLSChecks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	port := tlsRunServer(t, ctx).Port()

	encrypted := connectApp(t, ctx, port, "require", "snowflake-proxy control")
	what, err := sessionTLS(ctx, encrypted)
	if err != nil {
		t.Fatalf("TLS session: %v", err)
	}
	if !strings.HasPrefix(what, "TLSv1.") {
		t.Errorf("TLS session described as %q, want its version and cipher", what)
	}

	plain := connectApp(t, ctx, port, "disable", "bench check")
	if _, err := sessionTLS(ctx, plain); !errors.Is(err, errPlaintext) {
		t.Fatalf("plaintext session: %v, want errPlaintext", err)
	}

	// The checking session is plaintext and not the proxy's: it does not
	// count.
	if n, err := proxyControlTLS(ctx, plain); err != nil || n != 1 {
		t.Fatalf("one encrypted control connection: %d, %v", n, err)
	}
	connectApp(t, ctx, port, "disable", "snowflake-proxy node 1 claim")
	if n, err := proxyControlTLS(ctx, plain); err == nil || n != 2 {
		t.Fatalf("a plaintext control connection among 2 passed the check: %d, %v", n, err)
	}
}

// A relay whose server leg is plaintext fails the check made through it
// (the floor relay, which relays to the Unix socket): the harness does not
// report a TLS figure for it.
func TestRelayTLSRefusesPlaintextRelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, port := runFloor(t, ctx, floorEpoll, tlsRunServer(t, ctx))
	if what, err := relayTLS(ctx, port, "disable"); !errors.Is(err, errPlaintext) {
		t.Fatalf("session through a plaintext relay: %q, %v; want errPlaintext", what, err)
	}
}
