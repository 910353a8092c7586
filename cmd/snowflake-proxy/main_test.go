package main

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

func TestMain(m *testing.M) {
	// startProxyProcess runs this binary as the proxy itself.
	if os.Getenv(runAsProxyEnv) == "1" {
		if g := os.Getenv(systemBinDirsEnv); g != "" {
			pgserver.SystemBinDirs = g
		}
		main()
		return
	}
	pgtest.Main(m)
}

// run executes the command line with env and returns exit code, stdout and
// stderr.
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(k string) string { return env[k] }, Signals: make(chan os.Signal, 2)}
	code := m.Run(context.Background(), args)
	return code, out.String(), errOut.String()
}

func TestVersionAndDecode(t *testing.T) {
	if code, out, _ := run(t, nil, "version"); code != 0 || !strings.HasPrefix(out, "snowflake-proxy ") {
		t.Fatalf("version: %d %q", code, out)
	}
	// ms 1 since the epoch (2023-01-01 00:00:00.001 UTC), node 7, count 5.
	id := int64(1)<<22 | 7<<12 | 5
	code, out, _ := run(t, nil, "decode", strconv.FormatInt(id, 10))
	if code != 0 || !strings.Contains(out, "ms=1\t") || !strings.Contains(out, "2023-01-01 00:00:00.001Z") ||
		!strings.Contains(out, "node=7") || !strings.Contains(out, "count=5") {
		t.Fatalf("decode: %d %q", code, out)
	}
	if code, _, errOut := run(t, nil, "decode", "abc"); code == 0 || !strings.Contains(errOut, "not a snowflake") {
		t.Fatalf("decode abc: %d %q", code, errOut)
	}
}

// Bad flags and values give one clear line and a non-zero exit, before
// anything starts.
func TestBadFlagsAndValues(t *testing.T) {
	srv := pgtest.Shared(t)
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"node 0", nil, []string{"--node", "0"}, "invalid --node 0"},
		{"node 1024", nil, []string{"--node", "1024"}, "invalid --node 1024"},
		{"node from env", map[string]string{"SNOWFLAKE_PROXY_NODE": "2000"}, nil, "invalid --node 2000"},
		{"node not a number", map[string]string{"SNOWFLAKE_PROXY_NODE": "abc"}, nil, "SNOWFLAKE_PROXY_NODE"},
		{"unreadable cert", nil, []string{"--node", "1", "--upstream", srv.URL("postgres"), "--listen", "127.0.0.1:0",
			"--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem"}, "cannot load TLS certificate"},
		{"cert without key", nil, []string{"--tls-cert", "/x.pem", "--upstream", srv.URL("postgres"), "--listen", "127.0.0.1:0"}, "must be given together"},
		{"unreachable upstream", nil, []string{"--upstream", "127.0.0.1:1", "--listen", "127.0.0.1:0"}, "unreachable"},
		{"bad upstream", nil, []string{"--upstream", "not a url"}, "invalid --upstream"},
		{"bad log level", nil, []string{"--log-level", "loud"}, "invalid --log-level"},
		{"bad log format", nil, []string{"--log-format", "xml"}, "invalid --log-format \"xml\": want text or json"},
		{"bad log format from env", map[string]string{"SNOWFLAKE_PROXY_LOG_FORMAT": "JSON"}, nil, "invalid --log-format \"JSON\""},
		{"event loops -2", nil, []string{"--event-loops", "-2"}, "invalid --event-loops -2"},
		{"event loop io unknown", nil, []string{"--event-loop-io", "kqueue"}, `invalid --event-loop-io: event loop I/O "kqueue": want auto, epoll or io_uring`},
		{"event loops from env", map[string]string{"SNOWFLAKE_PROXY_EVENT_LOOPS": "5000"}, nil, "invalid --event-loops 5000"},
		{"prepared inserts not a bool", map[string]string{"SNOWFLAKE_PROXY_PREPARED_INSERTS": "sometimes"}, nil, "SNOWFLAKE_PROXY_PREPARED_INSERTS"},
		{"admin listen without port", nil, []string{"--admin-listen", "localhost"}, "invalid --admin-listen"},
		{"admin listen from env", map[string]string{"SNOWFLAKE_PROXY_ADMIN_LISTEN": "127.0.0.1"}, nil, "invalid --admin-listen"},
		{"admin listen port out of range", nil, []string{"--admin-listen", "127.0.0.1:99999", "--upstream", srv.URL("postgres"), "--listen", "127.0.0.1:0"},
			"cannot listen on admin address 127.0.0.1:99999"},
		{"stray argument", nil, []string{"serve"}, "unexpected argument"},
		{"embedded pg version 9", nil, []string{"--embedded-pg-version", "9"}, "invalid --embedded-pg-version 9"},
		{"embedded pg registry http", map[string]string{"SNOWFLAKE_PROXY_EMBEDDED_PG_REGISTRY": "http://mirror.internal/npm"}, nil, "invalid --embedded-pg-registry: want an https:// URL"},
		{"dial timeout 0", nil, []string{"--dial-timeout", "0s"}, "invalid --dial-timeout 0s"},
		{"negative grace", nil, []string{"--grace", "-1s"}, "invalid --grace -1s"},
		{"tls-require without cert", nil, []string{"--tls-require", "--upstream", srv.URL("postgres"), "--listen", "127.0.0.1:0"}, "--tls-require needs --tls-cert"},
		{"client CA without cert", nil, []string{"--tls-client-ca", "/x.pem", "--upstream", srv.URL("postgres"), "--listen", "127.0.0.1:0"}, "--tls-client-ca needs --tls-cert"},
		{"verify-full without root certificate", map[string]string{"HOME": "/nonexistent"}, []string{"--upstream", "postgres://u:hidden-pw@db.example/db?sslmode=verify-full"}, "needs the server's root certificate"},
		{"control upstream without upstream", nil, []string{"--control-upstream", srv.URL("postgres"), "--listen", "127.0.0.1:0"}, "--control-upstream needs --upstream"},
		{"bad control upstream", nil, []string{"--upstream", srv.URL("postgres"), "--control-upstream", "not a url", "--listen", "127.0.0.1:0"}, "invalid --control-upstream"},
		{"unreachable control upstream", nil, []string{"--upstream", srv.URL("postgres"), "--control-upstream", "127.0.0.1:1", "--listen", "127.0.0.1:0"}, "--control-upstream: upstream"},
		{"control upstream from env", map[string]string{"SNOWFLAKE_PROXY_CONTROL_UPSTREAM": "127.0.0.1:1"}, []string{"--upstream", srv.URL("postgres"), "--listen", "127.0.0.1:0"}, "--control-upstream: upstream"},
		{"missing password file", nil, []string{"--upstream", "postgres://u@127.0.0.1:1/db?sslmode=disable", "--password-file", "/nonexistent/pw"}, "password file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := run(t, c.env, c.args...)
			if code == 0 {
				t.Fatalf("exit 0, want non-zero (stderr %q)", errOut)
			}
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			last := lines[len(lines)-1]
			if !strings.Contains(last, c.want) {
				t.Fatalf("stderr %q, want a line with %q", errOut, c.want)
			}
		})
	}
}

// The proxy starts from flags given as environment variables, prints where
// it listens, serves, and drains on SIGTERM.
func TestRunServesAndStopsOnSignal(t *testing.T) {
	srv := pgtest.Shared(t)
	var out, errOut pgtest.SyncBuffer
	m := &Main{Stdout: &out, Stderr: &errOut, Signals: make(chan os.Signal, 2),
		Getenv: func(k string) string {
			return map[string]string{"SNOWFLAKE_PROXY_UPSTREAM": srv.URL("postgres"), "SNOWFLAKE_PROXY_NODE": "9"}[k]
		}}
	done := make(chan int, 1)
	go func() {
		done <- m.Run(context.Background(), []string{"--listen", "127.0.0.1:0", "--log-level", "warn"})
	}()
	addr := ""
	for deadline := time.Now().Add(60 * time.Second); addr == "" && time.Now().Before(deadline); {
		select {
		case code := <-done:
			t.Fatalf("exited %d: %s", code, errOut.String())
		case <-out.Changed():
		}
		if s := out.String(); strings.Contains(s, "listening on ") {
			addr = strings.Fields(strings.SplitN(s, "listening on ", 2)[1])[0]
		}
	}
	if addr == "" || !strings.Contains(out.String(), "psql -h 127.0.0.1 -p ") {
		t.Fatalf("no listen line: %q", out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("query through the proxy: %v", err)
	}
	c.Close(ctx)
	m.Signals <- syscall.SIGTERM
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after SIGTERM: %s", code, errOut.String())
		}
	case <-ctx.Done():
		t.Fatal("no exit after SIGTERM")
	}
}
