package main

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// runAsProxyEnv set to 1 makes the test binary run main (see TestMain).
const runAsProxyEnv = "SFPROXY_TEST_AS_PROXY"

// embeddedDataDir is a data directory path in a new temporary directory
// that the server's OS user (postgres, when the tests run as root) may
// enter.
func embeddedDataDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(d, "pgdata")
}

// connectCommand is the command of a ready line ("... connect with: CMD").
func connectCommand(t *testing.T, line string) string {
	t.Helper()
	_, cmd, ok := strings.Cut(strings.TrimSpace(line), "connect with: ")
	if !ok {
		t.Fatalf("no command in the ready line %q", line)
	}
	return cmd
}

// psqlAs runs a connect command as a shell would, with a query appended,
// in an environment without passwords (no PGPASSWORD, no ~/.pgpass), and
// never prompting.
func psqlAs(t *testing.T, ctx context.Context, command, query string) (string, error) {
	t.Helper()
	// The command runs psql by name, as a user would.
	if psql := pgtest.Tool(t, "psql"); !inPath("psql") {
		t.Fatalf("psql is at %s, not in PATH: the printed command cannot run", psql)
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", command+" -X -At -w -v ON_ERROR_STOP=1 -c '"+query+"'")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func inPath(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// checkEmbeddedAccess asserts that the printed command works as printed
// and that without its PGPASSFILE the server wants a password.
func checkEmbeddedAccess(t *testing.T, ctx context.Context, command string) {
	t.Helper()
	if !strings.HasPrefix(command, "PGPASSFILE=") {
		t.Fatalf("connect command %q: want PGPASSFILE=... psql ...", command)
	}
	if out, err := psqlAs(t, ctx, command, "SELECT 40 + 2"); err != nil || out != "42" {
		t.Fatalf("the printed command %q: %q, %v", command, out, err)
	}
	_, bare, _ := strings.Cut(command, " ")
	if out, err := psqlAs(t, ctx, bare, "SELECT 1"); err == nil || !strings.Contains(out, "password") {
		t.Fatalf("without the password file (%q): %q, %v; want a refusal asking for a password", bare, out, err)
	}
}

// inProcess is a proxy run by Main in this process.
type inProcess struct {
	m            *Main
	out, errOut  *pgtest.SyncBuffer
	done         chan int
	line, passwd string
}

// startInProcess runs the proxy with args and waits for its ready line.
func startInProcess(t *testing.T, ctx context.Context, args ...string) *inProcess {
	t.Helper()
	p := &inProcess{out: &pgtest.SyncBuffer{}, errOut: &pgtest.SyncBuffer{}, done: make(chan int, 1)}
	p.m = &Main{Stdout: p.out, Stderr: p.errOut, Signals: make(chan os.Signal, 2), Getenv: func(string) string { return "" }}
	go func() { p.done <- p.m.Run(context.Background(), args) }()
	for !strings.Contains(p.out.String(), "\n") {
		select {
		case code := <-p.done:
			t.Fatalf("exited %d: %s", code, p.errOut.String())
		case <-ctx.Done():
			t.Fatalf("no ready line: %v; stderr %s", ctx.Err(), p.errOut.String())
		case <-p.out.Changed():
		}
	}
	p.line = p.out.String()
	return p
}

// stop sends SIGTERM and wants exit 0.
func (p *inProcess) stop(t *testing.T, ctx context.Context) {
	t.Helper()
	p.m.Signals <- syscall.SIGTERM
	select {
	case code := <-p.done:
		if code != 0 {
			t.Fatalf("exit %d after SIGTERM: %s", code, p.errOut.String())
		}
	case <-ctx.Done():
		t.Fatal("no exit after SIGTERM")
	}
}

// startProxyProcess runs this test binary as the proxy (see TestMain) and
// returns the process and its ready line.
func startProxyProcess(t *testing.T, ctx context.Context, args ...string) (*exec.Cmd, string, *pgtest.SyncBuffer) {
	t.Helper()
	p := spawnProxyProcess(t, args...)
	return p.cmd, p.ready(t, ctx), p.errOut
}

// proxyProcess is this test binary running as the proxy.
type proxyProcess struct {
	cmd    *exec.Cmd
	lines  chan string // the ready line ("" when stdout closed first)
	errOut *pgtest.SyncBuffer
}

// spawnProxyProcess starts the proxy process without waiting for it; it is
// killed at the end of the test.
func spawnProxyProcess(t *testing.T, args ...string) *proxyProcess {
	t.Helper()
	return spawnProxyProcessEnv(t, nil, args...)
}

// spawnProxyProcessEnv is spawnProxyProcess with env (KEY=value) added to
// the test binary's environment.
func spawnProxyProcessEnv(t *testing.T, env []string, args ...string) *proxyProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), env...), runAsProxyEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proxyProcess{cmd: cmd, lines: make(chan string, 1), errOut: &pgtest.SyncBuffer{}}
	cmd.Stderr = p.errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		p.lines <- l
	}()
	return p
}

// ready waits for the process's ready line.
func (p *proxyProcess) ready(t *testing.T, ctx context.Context) string {
	t.Helper()
	select {
	case l := <-p.lines:
		if l == "" {
			t.Fatalf("the proxy process printed no ready line; stderr: %s", p.errOut.String())
		}
		return l
	case <-ctx.Done():
		t.Fatalf("no ready line: %v; stderr: %s", ctx.Err(), p.errOut.String())
	}
	return ""
}

// waitNoPostmaster polls until no live postmaster serves dataDir, for at
// most a minute (a fast shutdown takes a fraction of that).
func waitNoPostmaster(t *testing.T, ctx context.Context, dataDir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for pgserver.RunningPID(dataDir) != 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("postmaster %d of %s still runs: %v", pgserver.RunningPID(dataDir), dataDir, ctx.Err())
		case <-tick.C:
		}
	}
}

// A taken --listen address fails before the embedded server is touched.
// The server used to be initialised and started first, and stopped again
// when the listener then failed.
func TestBusyListenAddressStartsNoServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := t.TempDir()
	code, _, errOut := run(t, nil, "--listen", l.Addr().String(), "--data-dir", filepath.Join(d, "pgdata"))
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if code != 1 || !strings.Contains(lines[len(lines)-1], "cannot listen on "+l.Addr().String()) {
		t.Fatalf("exit %d, stderr %q: want 1 and cannot listen on %s", code, errOut, l.Addr())
	}
	if entries, _ := os.ReadDir(d); len(entries) != 0 {
		t.Fatalf("the failed start left %v beside the data directory: an embedded server was prepared", entries)
	}
}

// The embedded server dies with its proxy: kill -9 of the proxy process
// leaves no postmaster (it used to run on, detached, and the next start
// failed on it). The next start reuses the data directory and password.
// The ready line's command works as printed; without its PGPASSFILE the
// server refuses (it used to trust every local user as superuser).
func TestEmbeddedServerDiesWithKilledProxy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := embeddedDataDir(t)
	pwFile := filepath.Join(filepath.Dir(dir), "pgpass")
	proc, line, errOut := startProxyProcess(t, ctx, "--listen", "127.0.0.1:0", "--data-dir", dir)
	command := connectCommand(t, line)
	_, port, _ := net.SplitHostPort(strings.Fields(strings.SplitN(line, "listening on ", 2)[1])[0])
	if want := "PGPASSFILE=" + pwFile + " psql -h 127.0.0.1 -p " + port + " -U postgres postgres"; command != want {
		t.Fatalf("connect command %q, want %q", command, want)
	}
	checkEmbeddedAccess(t, ctx, command)
	pw, err := os.ReadFile(pwFile)
	if err != nil {
		t.Fatal(err)
	}
	password := strings.TrimSpace(string(pw))[len("*:*:*:postgres:"):]
	if strings.Contains(line+errOut.String(), password) {
		t.Fatal("the password is printed")
	}

	pid := pgserver.RunningPID(dir)
	if pid == 0 {
		t.Fatalf("no live postmaster for %s while the proxy runs: the check below would prove nothing", dir)
	}
	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = proc.Wait()
	waitNoPostmaster(t, ctx, dir)

	p := startInProcess(t, ctx, "--listen", "127.0.0.1:0", "--data-dir", dir)
	checkEmbeddedAccess(t, ctx, connectCommand(t, p.line))
	if s := p.errOut.String(); strings.Contains(s, "leftover") || strings.Contains(s, "initdb") || strings.Contains(s, "a new password") {
		t.Errorf("the restart found a leftover, ran initdb or set a new password:\n%s", s)
	}
	if again, _ := os.ReadFile(pwFile); string(again) != string(pw) {
		t.Error("the password file changed across the restart")
	}
	p.stop(t, ctx)
	if pid := pgserver.RunningPID(dir); pid != 0 {
		t.Fatalf("postmaster %d still runs after the proxy exited", pid)
	}
}

// Upgrading from a version whose embedded server trusted everyone and
// outlived a kill -9 of its proxy: the new proxy stops that server (one
// line), gives the superuser a password and serves with it.
func TestUpgradeStopsLeftoverTrustServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := embeddedDataDir(t)
	// What an older version left running: started by pg_ctl (detached),
	// trust on the socket and on 127.0.0.1.
	old, err := pgserver.Start(ctx, pgserver.Options{DataDir: dir, Detached: true, Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Stop(context.Background()) })
	oldPID := pgserver.RunningPID(dir)
	c, err := pgx.Connect(ctx, "postgres://postgres@"+old.Addr()+"/postgres?sslmode=disable&connect_timeout=10")
	if err != nil || oldPID == 0 {
		t.Fatalf("the old setup (pid %d) should let anyone in without a password: %v", oldPID, err)
	}
	c.Close(ctx)

	p := startInProcess(t, ctx, "--listen", "127.0.0.1:0", "--data-dir", dir)
	logs := p.errOut.String()
	var leftover []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "leftover") {
			leftover = append(leftover, l)
		}
	}
	if len(leftover) != 1 || !strings.Contains(leftover[0], `msg="stopped a leftover embedded PostgreSQL from an earlier run"`) ||
		!strings.Contains(leftover[0], "pid="+strconv.Itoa(oldPID)) {
		t.Fatalf("want one line about stopping leftover pid %d, got:\n%s", oldPID, logs)
	}
	if strings.Count(logs, "gave the embedded PostgreSQL a new password") != 1 {
		t.Errorf("want one line about the new password:\n%s", logs)
	}
	if pid := pgserver.RunningPID(dir); pid == 0 || pid == oldPID {
		t.Fatalf("postmaster now %d, old %d: want a new one", pid, oldPID)
	}
	checkEmbeddedAccess(t, ctx, connectCommand(t, p.line))
	p.stop(t, ctx)
}
