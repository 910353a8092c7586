package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// PgBouncerOptions configure StartPgBouncer.
type PgBouncerOptions struct {
	// Host and Port are what PgBouncer connects to: a server or a proxy.
	// Every database name maps to the same name there (PgBouncer's "*"
	// entry).
	Host string
	Port int
	// PoolMode: "session" or "transaction". Empty: session.
	PoolMode string
	// PoolSize is default_pool_size: server connections per database and
	// user. 0: 20.
	PoolSize int
	// Users may connect (trust authentication: PgBouncer checks only that
	// the name is listed). Empty: postgres.
	Users []string
	// Settings are extra lines of the [pgbouncer] section (name -> value
	// as PgBouncer reads it), e.g. ignore_startup_parameters.
	Settings map[string]string
}

// PgBouncer is a running PgBouncer started by StartPgBouncer.
type PgBouncer struct {
	port   int
	dir    string
	log    string
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been reaped
	err    error         // its exit, read after exited is closed
}

// pgbouncerReadyTimeout bounds the wait for PgBouncer to accept
// connections, pgbouncerStopTimeout the wait for it to exit.
const (
	pgbouncerReadyTimeout = 15 * time.Second
	pgbouncerStopTimeout  = 10 * time.Second
)

// StartPgBouncer writes a pgbouncer.ini and a userlist into a directory of
// its own, starts PgBouncer on a free port of 127.0.0.1 (as the postgres
// user when root: PgBouncer refuses to run as root) and waits until it
// accepts connections. It is stopped at the end of the test. Without a
// pgbouncer program (Tool) the test cannot run.
func StartPgBouncer(tb testing.TB, o PgBouncerOptions) *PgBouncer {
	tb.Helper()
	bin := Tool(tb, "pgbouncer")
	if o.PoolMode == "" {
		o.PoolMode = "session"
	}
	if o.PoolSize == 0 {
		o.PoolSize = 20
	}
	if len(o.Users) == 0 {
		o.Users = []string{"postgres"}
	}
	uid, gid, cred, err := daemonUser()
	if err != nil {
		tb.Fatal(err)
	}
	// A directory the daemon's user owns (t.TempDir is root's).
	dir, err := os.MkdirTemp("", "sfpgb-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	port, err := pgserver.FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	p := &PgBouncer{port: port, dir: dir, log: filepath.Join(dir, "pgbouncer.log"), exited: make(chan struct{})}
	var users strings.Builder
	for _, u := range o.Users {
		fmt.Fprintf(&users, "%q \"\"\n", u)
	}
	files := map[string]string{
		"pgbouncer.ini": p.ini(o),
		"userlist.txt":  users.String(),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	if uid >= 0 {
		for _, f := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "userlist.txt")} {
			if err := os.Chown(f, uid, gid); err != nil {
				tb.Fatalf("pgtest: chown %s: %v", f, err)
			}
		}
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = dir
	// A process group of its own: a terminal's Ctrl-C reaches the test,
	// whose cleanup stops PgBouncer.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("pgtest: starting pgbouncer: %v", err)
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	tb.Cleanup(func() {
		if err := p.stop(); err != nil {
			tb.Errorf("pgtest: %v", err)
		}
	})
	if err := p.waitAccepting(); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return p
}

// ini is the configuration: one fallback database entry for every name,
// trust authentication against the userlist, no Unix socket.
func (p *PgBouncer) ini(o PgBouncerOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[databases]\n* = host=%s port=%d\n\n[pgbouncer]\n", o.Host, o.Port)
	settings := map[string]string{
		"listen_addr":        "127.0.0.1",
		"listen_port":        strconv.Itoa(p.port),
		"unix_socket_dir":    "",
		"auth_type":          "trust",
		"auth_file":          filepath.Join(p.dir, "userlist.txt"),
		"logfile":            p.log,
		"pool_mode":          o.PoolMode,
		"default_pool_size":  strconv.Itoa(o.PoolSize),
		"max_client_conn":    "200",
		"log_connections":    "0",
		"log_disconnections": "0",
		"log_pooler_errors":  "1",
	}
	for k, v := range o.Settings {
		settings[k] = v
	}
	names := make([]string, 0, len(settings))
	for k := range settings {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	return b.String()
}

// waitAccepting polls until PgBouncer accepts TCP connections, fails at
// once if it exits, and gives up after pgbouncerReadyTimeout.
func (p *PgBouncer) waitAccepting() error {
	deadline := time.Now().Add(pgbouncerReadyTimeout)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("pgbouncer exited before accepting connections (%v): %s", p.err, p.LogTail(5))
		default:
		}
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer did not accept connections on %s within %s: %v: %s", p.Addr(), pgbouncerReadyTimeout, err, p.LogTail(5))
		}
		select {
		case <-p.exited:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM (PgBouncer's immediate shutdown) and waits for the
// exit, killing the process when it does not come within
// pgbouncerStopTimeout.
func (p *PgBouncer) stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(pgbouncerStopTimeout):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
		return fmt.Errorf("pgbouncer did not stop within %s of SIGTERM; killed", pgbouncerStopTimeout)
	case <-time.After(pgbouncerStopTimeout):
		return fmt.Errorf("pgbouncer (pid %d) survived SIGKILL for %s", p.cmd.Process.Pid, pgbouncerStopTimeout)
	}
}

// Addr is PgBouncer's "127.0.0.1:port".
func (p *PgBouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// Port is PgBouncer's TCP port on 127.0.0.1.
func (p *PgBouncer) Port() int { return p.port }

// LogTail returns the last n lines of PgBouncer's log (its stderr before
// the log file was opened), for failure messages.
func (p *PgBouncer) LogTail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil || len(b) == 0 {
		b, _ = os.ReadFile(filepath.Join(p.dir, "stderr.log"))
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// daemonUser is the user daemons that refuse root run as: postgres when
// the caller is root (uid -1 and no credential otherwise).
func daemonUser() (uid, gid int, cred *syscall.Credential, err error) {
	if os.Geteuid() != 0 {
		return -1, -1, nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return -1, -1, nil, fmt.Errorf("pgtest: running as root and no user postgres to run pgbouncer as: %w", err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
