package pgserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// postmaster is the postmaster of a server that is not Detached, a child
// of this process.
type postmaster struct {
	proc     *os.Process
	pid      int
	exited   chan struct{} // closed once the process has exited and been reaped
	err      error         // its exit, read after exited is closed
	ready    atomic.Bool   // it has started: an exit from now on is news
	stopping atomic.Bool   // we asked it to stop: its exit is not
}

// startPostmaster runs postgres itself rather than through pg_ctl, whose
// server is detached from its caller: the postmaster stays this process's
// child, in a process group of its own (Ctrl-C and a terminal's hang-up
// reach the proxy, which stops the server after draining its sessions),
// and on Linux gets SIGINT (fast shutdown) when its parent dies: a test
// binary that panics, times out or is killed leaves no server behind.
func (s *Server) startPostmaster(ctx context.Context) error {
	f, err := s.openLog()
	if err != nil {
		return err
	}
	defer f.Close() // the child has its own descriptor
	offset, _ := f.Seek(0, io.SeekEnd)
	args := []string{"-D", s.dataDir, "-p", strconv.Itoa(s.port)}
	if s.private {
		// On the command line these win over postgresql.auto.conf (ALTER
		// SYSTEM): no TCP, this pg_hba.conf, this socket directory.
		args = append(args, "-c", "listen_addresses=", "-c", "hba_file="+filepath.Join(s.dataDir, "pg_hba.conf"),
			"-c", "unix_socket_directories="+s.sockDir)
	}
	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), args...)
	s.prepare(cmd)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	tieToParent(cmd.SysProcAttr)
	cmd.Stdout, cmd.Stderr = f, f

	pm := &postmaster{exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The kernel sends the parent-death signal when the thread that
		// forked the child ends, not the process, and the Go runtime ends
		// or reuses threads as it likes. This goroutine keeps the forking
		// thread locked to itself, alive until the postmaster has exited.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		pm.err = cmd.Wait()
		if pm.ready.Load() && !pm.stopping.Load() {
			s.log.Error("PostgreSQL exited", "pid", cmd.Process.Pid, "err", pm.err, "log", s.logFile)
		}
		close(pm.exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("pgserver: starting postgres: %w", err)
	}
	pm.proc, pm.pid = cmd.Process, cmd.Process.Pid
	s.log.Info("starting postgres", "pid", pm.pid, "socket", s.SocketPath(), "dir", s.dataDir)

	// Ready when postmaster.pid, written by this postmaster, says so (what
	// pg_ctl -w waits for).
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !pidFileReady(s.dataDir, pm.pid) {
		select {
		case <-pm.exited:
			err := pm.err
			if err == nil {
				err = errors.New("exited")
			}
			return s.startFailure("postgres: "+err.Error(), offset, nil)
		case <-ctx.Done():
			s.pm = pm
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = s.stopPostmaster(stopCtx)
			cancel()
			return fmt.Errorf("pgserver: PostgreSQL was not ready in time (%w); server log: %s", ctx.Err(), s.logFile)
		case <-tick.C:
		}
	}
	pm.ready.Store(true)
	s.pm = pm
	return nil
}

// openLog opens the server log for appending. It is opened here, perhaps
// by root, in a directory of the server's OS user (pg_ctl opened it as that
// user): it must not be a link, or a hard link, to another file. It is
// given to the server's user, as pg_ctl's was.
func (s *Server) openLog() (*os.File, error) {
	f, err := os.OpenFile(s.logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgserver: server log: %w", err)
	}
	st, err := f.Stat()
	if err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); !st.Mode().IsRegular() || !ok || sys.Nlink != 1 {
			err = fmt.Errorf("%s is not a plain file; remove it", s.logFile)
		}
	}
	if err == nil && s.cred != nil {
		err = f.Chown(int(s.cred.Uid), int(s.cred.Gid))
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pgserver: server log: %w", err)
	}
	return f, nil
}

// pidFileReady reports whether postmaster.pid names pid and its status line
// (the 8th) says it accepts connections.
func pidFileReady(dataDir string, pid int) bool {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 8 || strings.TrimSpace(lines[0]) != strconv.Itoa(pid) {
		return false
	}
	st := strings.TrimSpace(lines[7])
	return st == "ready" || st == "standby"
}

// stopPostmaster asks for a fast shutdown (as pg_ctl stop -m fast) and
// waits until ctx is done; then it asks for an immediate one (the next start
// recovers) and waits a little more.
func (s *Server) stopPostmaster(ctx context.Context) error {
	pm := s.pm
	if pm == nil {
		return nil
	}
	s.pm = nil
	pm.stopping.Store(true)
	// Process.Signal knows when the child has been reaped, so it never
	// signals another process that got the pid.
	if err := pm.proc.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgserver: stopping postgres (pid %d): %w", pm.pid, err)
	}
	select {
	case <-pm.exited:
		return nil
	case <-ctx.Done():
	}
	_ = pm.proc.Signal(syscall.SIGQUIT)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-pm.exited:
		return fmt.Errorf("pgserver: postgres (pid %d) did not shut down in time and was stopped immediately: %w", pm.pid, ctx.Err())
	case <-t.C:
		return fmt.Errorf("pgserver: postgres (pid %d) does not stop; server log: %s", pm.pid, s.logFile)
	}
}

// startFailure is the one line saying why the server did not start: the
// last FATAL or PANIC (and its HINT) the server logged since offset, else
// the last line of output, a hint for the usual causes, and where the whole
// log is. It never quotes the log at length.
func (s *Server) startFailure(what string, offset int64, output []byte) error {
	cause := causeIn(logSince(s.logFile, offset))
	if cause == "" {
		cause = causeIn(string(output))
	}
	if cause == "" {
		cause = "nothing in the server log"
	}
	if h := knownCause(cause); h != "" && !strings.Contains(cause, "HINT:") {
		cause += " (" + h + ")"
	}
	return fmt.Errorf("pgserver: PostgreSQL did not start (%s): %s; server log: %s", short(what), cause, s.logFile)
}

// causeIn picks the line of server output that says what went wrong: the
// last FATAL or PANIC with the HINT after it, else the last line; with the
// timestamp and pid prefix cut and its length bounded.
func causeIn(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		for _, sev := range []string{"PANIC:", "FATAL:"} {
			j := strings.Index(lines[i], sev)
			if j < 0 {
				continue
			}
			c := lines[i][j:]
			if i+1 < len(lines) {
				if k := strings.Index(lines[i+1], "HINT:"); k >= 0 {
					c += " " + lines[i+1][k:]
				}
			}
			return short(c)
		}
	}
	return short(lines[len(lines)-1])
}

func knownCause(c string) string {
	switch {
	case strings.Contains(c, "lock file") && strings.Contains(c, "already exists"):
		return "another PostgreSQL uses this data directory or socket"
	case strings.Contains(c, "Address already in use") || strings.Contains(c, "could not bind"):
		return "the port is taken"
	case strings.Contains(c, "incompatible with server"):
		return "the data directory belongs to another PostgreSQL major version"
	case strings.Contains(c, "shared memory"):
		return "not enough shared memory"
	case strings.Contains(c, "Permission denied"):
		return "the server's OS user may not use a file or directory it needs"
	}
	return ""
}

// short collapses whitespace and bounds the length of one line for an
// error message.
func short(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	const max = 240
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "..."
	}
	return s
}

// logSince returns the end of the file from offset on (at most 64 KiB).
func logSince(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size()-offset > 64<<10 {
		offset = st.Size() - 64<<10
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 64<<10))
	return string(b)
}

func logSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
