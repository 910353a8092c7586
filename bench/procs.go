package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Limits on waiting for the processes the harness starts.
const (
	// stopGrace is how long a process may take to exit after SIGTERM before
	// it gets SIGKILL.
	stopGrace = 10 * time.Second
	// readyTimeout bounds waiting for a started process to accept
	// connections.
	readyTimeout = 30 * time.Second
	// pollInterval is the pause between connection attempts while waiting.
	pollInterval = 50 * time.Millisecond
)

// proc is a long-running child process (the proxy, PgBouncer, the floor
// relay) in its own session, hence its own process group, so that a
// terminal's Ctrl-C reaches only the harness, which then stops it in order.
//
// A session of its own also gives it its own scheduling group where the
// kernel groups tasks by session (CONFIG_SCHED_AUTOGROUP; on when
// /proc/sys/kernel/sched_autogroup_enabled is 1, as on the development
// machine): the way a daemon runs (pg_ctl and "pgbouncer -d" call setsid,
// systemd gives each service its own cgroup). In the harness's session a
// relay would share one group's CPU share with pgbench, its load, while
// PostgreSQL (started by pg_ctl) has a group of its own.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string        // file receiving stdout and stderr
	done chan struct{} // closed when the process has exited
	err  error         // exit status, valid after done is closed
}

// startProc starts name with args, stdout and stderr going to logPath. cred,
// when not nil, runs it as another user.
func startProc(name, logPath string, cred *syscall.Credential, bin string, args ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: cred}
	if cred != nil {
		cmd.Dir = "/"
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: start: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go p.wait(f)
	return p, nil
}

func (p *proc) wait(f *os.File) {
	p.err = p.cmd.Wait()
	f.Close()
	close(p.done)
}

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		if p.err == nil {
			return true, errors.New("exited with status 0")
		}
		return true, p.err
	default:
		return false, nil
	}
}

// startAccepting starts a daemon (startProc) that must accept TCP
// connections on 127.0.0.1:port, and waits until it does; on failure it is
// stopped.
func startAccepting(ctx context.Context, name, logPath string, cred *syscall.Credential, port int, bin string, args ...string) (*proc, error) {
	p, err := startProc(name, logPath, cred, bin, args...)
	if err != nil {
		return nil, err
	}
	if err := p.waitAccept(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// waitAccept waits until addr accepts TCP connections, the process exits, or
// readyTimeout passes.
func (p *proc) waitAccept(ctx context.Context, addr string) error {
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		if dead, err := p.exited(); dead {
			return fmt.Errorf("%s exited before accepting connections (%v): %s", p.name, err, tailFile(p.log, 5))
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
	return fmt.Errorf("%s did not accept connections on %s within %s: %s", p.name, addr, readyTimeout, tailFile(p.log, 5))
}

// stop sends SIGTERM to the process group, then SIGKILL after stopGrace.
// Safe to call more than once and on a nil proc.
func (p *proc) stop() {
	if p == nil {
		return
	}
	if dead, _ := p.exited(); dead {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(stopGrace):
	}
	fmt.Fprintf(os.Stderr, "bench: %s did not stop within %s, killing it\n", p.name, stopGrace)
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
	}
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// unprivileged returns the credential to run daemons that refuse root
// (PgBouncer) as the postgres user, or nil when not running as root.
func unprivileged() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, -1, -1, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, -1, -1, fmt.Errorf("running as root and no user postgres to run daemons as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid, nil
}

// tailFile returns the last n lines of a file, joined with " | ".
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
