package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	// buildTimeout bounds `go build` of the proxy (pg_query's C code makes
	// a cold build take minutes).
	buildTimeout = 15 * time.Minute
	// maxProxyRestarts bounds how often a proxy that died during the run is
	// started again.
	maxProxyRestarts = 5
)

// proxyTarget is the snowflake-proxy process under test.
type proxyTarget struct {
	bin      string
	upstream string   // --upstream (proxyUpstream)
	dir      string   // logs
	extra    []string // extra flags (-proxy-args)
	// verify, when set, checks a restarted proxy before it is measured
	// again (the upstream TLS check of -upstream-tls).
	verify func(ctx context.Context, port int) error
	port   int
	p      *proc
	starts int
	err    error // why the proxy is unavailable, if it is
}

// buildProxy builds ./cmd/snowflake-proxy from the module at root into dir.
func buildProxy(ctx context.Context, root, dir string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	bin := filepath.Join(dir, "snowflake-proxy")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/snowflake-proxy")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("proxy does not build: %s", buildErrors(string(out), err))
	}
	return bin, nil
}

// start runs the proxy on a fresh port and waits until it accepts
// connections.
func (t *proxyTarget) start(ctx context.Context) error {
	if t.starts >= 1+maxProxyRestarts {
		return fmt.Errorf("proxy started %d times already, giving up", t.starts)
	}
	t.starts++
	port, err := freePort()
	if err != nil {
		return err
	}
	t.port = port
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logPath := filepath.Join(t.dir, fmt.Sprintf("proxy-%d.log", t.starts))
	p, err := startProc("snowflake-proxy", logPath, nil, t.bin, proxyArgs(listen, t.upstream, t.extra)...)
	if err != nil {
		return err
	}
	t.p = p
	if err := p.waitAccept(ctx, listen); err != nil {
		p.stop()
		return err
	}
	return nil
}

// proxyArgs is the proxy's command line: extra (-proxy-args) last, so it
// may override the harness's own flags.
func proxyArgs(listen, upstream string, extra []string) []string {
	return append([]string{"--listen", listen, "--upstream", upstream, "--node", "1", "--log-level", "warn"}, extra...)
}

// ensure restarts the proxy when it has died since the last measurement and
// returns why it is unavailable otherwise.
func (t *proxyTarget) ensure(ctx context.Context) error {
	if t.err != nil {
		return t.err
	}
	dead, why := t.p.exited()
	if !dead {
		return nil
	}
	fmt.Printf("bench: proxy exited (%v): %s; restarting\n", why, tailFile(t.p.log, 3))
	if err := t.start(ctx); err != nil {
		t.err = fmt.Errorf("proxy died (%v) and restart failed: %w", why, err)
		return t.err
	}
	if t.verify != nil {
		if err := t.verify(ctx, t.port); err != nil {
			t.p.stop()
			t.err = fmt.Errorf("restarted proxy not measured: %w", err)
			return t.err
		}
	}
	return nil
}

func (t *proxyTarget) stop() {
	if t != nil && t.p != nil {
		t.p.stop()
	}
}

func lastN(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// buildErrors keeps the first compiler messages of go build's output.
func buildErrors(out string, err error) string {
	var msgs []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if msgs = append(msgs, line); len(msgs) == 3 {
			break
		}
	}
	if len(msgs) == 0 {
		return err.Error()
	}
	return strings.Join(msgs, "; ")
}
