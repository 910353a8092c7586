// Package pgserver starts and stops a private PostgreSQL server from the
// binaries installed on the machine: initdb into a data directory it owns,
// listen on loopback and a private Unix socket, stop cleanly on Stop.
//
// It serves the proxy's embedded default (no --upstream) and every test that
// needs a real server. PostgreSQL refuses to run as root; when the caller is
// root the server runs as an unprivileged user (Options.RunAs, default
// "postgres") and the data directory is handed to that user.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options configure Start. Zero values are documented defaults.
type Options struct {
	// BinDir holds initdb, pg_ctl and postgres. Empty: FindBinDir().
	BinDir string
	// DataDir is the cluster directory; initialised when it holds no cluster,
	// reused otherwise. Empty: a new temporary directory removed by Stop.
	DataDir string
	// Port to listen on at 127.0.0.1. 0: a free port.
	Port int
	// RunAs is the OS user the server runs as when the caller is root.
	// Empty: "postgres".
	RunAs string
	// Superuser is the database superuser initdb creates. Empty: "postgres".
	Superuser string
	// Password for Superuser. Empty: none (trust authentication).
	Password string
	// HBA, when not empty, replaces pg_hba.conf (lines). Default: trust for
	// local and loopback connections.
	HBA []string
	// Settings are extra postgresql.conf lines (name -> value, value written
	// as is, so quote strings).
	Settings map[string]string
	// StartTimeout bounds initdb and server start. 0: 60s.
	StartTimeout time.Duration
	// Logger receives progress lines. nil: discard.
	Logger *slog.Logger
}

// Server is a running private PostgreSQL.
type Server struct {
	binDir    string
	dataDir   string
	sockDir   string
	port      int
	superuser string
	password  string
	tempRoot  string // removed on Stop when the data dir was temporary
	cred      *syscall.Credential
	log       *slog.Logger
	stopped   bool
}

// ErrNoBinaries is returned when no PostgreSQL server binaries are found.
var ErrNoBinaries = errors.New("pgserver: no PostgreSQL server binaries found (looked in PATH, pg_config --bindir, /usr/lib/postgresql/*/bin); install the PostgreSQL server package or pass --upstream")

// FindBinDir locates a directory holding initdb, pg_ctl and postgres: PATH
// first, then `pg_config --bindir`, then the newest /usr/lib/postgresql/*/bin.
func FindBinDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		// Debian-style installs link initdb into PATH: the directory that
		// also holds pg_dump and friends is the link's target.
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if has(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); has(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start initialises (when needed) and starts a server.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.BinDir == "" {
		d, err := FindBinDir()
		if err != nil {
			return nil, err
		}
		o.BinDir = d
	}
	if o.RunAs == "" {
		o.RunAs = "postgres"
	}
	if o.Superuser == "" {
		o.Superuser = "postgres"
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()

	s := &Server{binDir: o.BinDir, superuser: o.Superuser, password: o.Password, log: o.Logger}
	var uid, gid int = -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup(o.RunAs)
		if err != nil {
			return nil, fmt.Errorf("pgserver: PostgreSQL refuses to run as root and user %q does not exist (create it, e.g. `useradd -r %s`, or run as a non-root user): %w", o.RunAs, o.RunAs, err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}

	if o.DataDir == "" {
		root, err := os.MkdirTemp("", "sfpg-")
		if err != nil {
			return nil, fmt.Errorf("pgserver: temp dir: %w", err)
		}
		s.tempRoot = root
		o.DataDir = filepath.Join(root, "data")
	}
	abs, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, fmt.Errorf("pgserver: data dir: %w", err)
	}
	s.dataDir = abs
	// The socket lives next to the data directory; Unix socket paths are
	// limited to about 100 bytes, so fall back to a short temp dir.
	s.sockDir = filepath.Join(filepath.Dir(abs), "sock")
	if len(s.sockDir) > 80 {
		d, err := os.MkdirTemp("", "sfsock-")
		if err != nil {
			return nil, fmt.Errorf("pgserver: socket dir: %w", err)
		}
		s.sockDir = d
	}
	for _, d := range []string{filepath.Dir(abs), s.sockDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
		if uid >= 0 {
			if err := os.Chown(d, uid, gid); err != nil {
				return nil, fmt.Errorf("pgserver: chown %s: %w", d, err)
			}
		}
	}
	if s.tempRoot != "" && uid >= 0 {
		_ = os.Chown(s.tempRoot, uid, gid)
	}

	if _, err := os.Stat(filepath.Join(abs, "PG_VERSION")); err != nil {
		if err := s.initdb(ctx, o); err != nil {
			s.cleanup()
			return nil, err
		}
	}
	if err := s.writeConf(o, uid, gid); err != nil {
		s.cleanup()
		return nil, err
	}
	port := o.Port
	if port == 0 {
		if port, err = freePort(); err != nil {
			s.cleanup()
			return nil, err
		}
	}
	s.port = port
	if err := s.start(ctx); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, nil
}

// Command prepares a program of the server's BinDir (pg_ctl,
// pg_basebackup...) to run as the server's OS user, in the C locale.
func (s *Server) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, name), args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
		cmd.Dir = "/"
	}
	return cmd
}

// Own gives path to the server's OS user, so that the server's programs
// can write there (nothing to do unless running as root).
func (s *Server) Own(path string) error {
	if s.cred == nil {
		return nil
	}
	return os.Chown(path, int(s.cred.Uid), int(s.cred.Gid))
}

func (s *Server) initdb(ctx context.Context, o Options) error {
	args := []string{"-D", s.dataDir, "-U", o.Superuser, "-E", "UTF8", "--locale=C", "--auth=trust", "--no-sync"}
	if o.Password != "" {
		pw := filepath.Join(filepath.Dir(s.dataDir), "pwfile")
		if err := os.WriteFile(pw, []byte(o.Password+"\n"), 0o600); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		defer os.Remove(pw)
		_ = s.Own(pw)
		args = append(args, "--pwfile="+pw)
	}
	s.log.Info("initdb", "dir", s.dataDir)
	if out, err := s.Command(ctx, "initdb", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: initdb: %w: %s", err, lastLines(out, 5))
	}
	return nil
}

// writeConf (re)writes the settings the proxy relies on into an included
// file, so a reused data directory picks up the current options.
func (s *Server) writeConf(o Options, uid, gid int) error {
	conf := []string{
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = '" + s.sockDir + "'",
		"max_connections = 300",
		"shared_buffers = 128MB",
		"fsync = on",
		"logging_collector = off",
		"log_min_messages = warning",
		"track_functions = 'pl'",
	}
	keys := make([]string, 0, len(o.Settings))
	for k := range o.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		conf = append(conf, k+" = "+o.Settings[k])
	}
	files := map[string]string{
		"snowflake_proxy.conf": strings.Join(conf, "\n") + "\n",
	}
	main := filepath.Join(s.dataDir, "postgresql.conf")
	b, err := os.ReadFile(main)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if !strings.Contains(string(b), "include_if_exists = 'snowflake_proxy.conf'") {
		b = append(b, "\ninclude_if_exists = 'snowflake_proxy.conf'\n"...)
		files["postgresql.conf"] = string(b)
	}
	hba := o.HBA
	if len(hba) == 0 {
		hba = []string{"local all all trust", "host all all 127.0.0.1/32 trust", "host all all ::1/128 trust"}
	}
	files["pg_hba.conf"] = strings.Join(hba, "\n") + "\n"
	for name, content := range files {
		p := filepath.Join(s.dataDir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		if uid >= 0 {
			_ = os.Chown(p, uid, gid)
		}
	}
	return nil
}

func (s *Server) start(ctx context.Context) error {
	logFile := filepath.Join(filepath.Dir(s.dataDir), "server.log")
	args := []string{"-D", s.dataDir, "-l", logFile, "-w", "-t", "60", "-o", "-p " + strconv.Itoa(s.port), "start"}
	s.log.Info("starting postgres", "port", s.port, "dir", s.dataDir)
	if out, err := s.Command(ctx, "pg_ctl", args...).CombinedOutput(); err != nil {
		tail, _ := os.ReadFile(logFile)
		return fmt.Errorf("pgserver: pg_ctl start: %w: %s %s", err, lastLines(out, 3), lastLines(tail, 8))
	}
	return nil
}

// Stop shuts the server down (fast mode) and removes a temporary data
// directory. It is safe to call more than once.
func (s *Server) Stop(ctx context.Context) error {
	if s == nil || s.stopped {
		return nil
	}
	s.stopped = true
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
	}
	out, err := s.Command(ctx, "pg_ctl", "-D", s.dataDir, "-m", "fast", "-w", "stop").CombinedOutput()
	s.cleanup()
	if err != nil {
		return fmt.Errorf("pgserver: pg_ctl stop: %w: %s", err, lastLines(out, 3))
	}
	return nil
}

// Restart stops and starts the server on the same port (fast mode).
func (s *Server) Restart(ctx context.Context) error {
	if out, err := s.Command(ctx, "pg_ctl", "-D", s.dataDir, "-m", "fast", "-w", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: pg_ctl stop: %w: %s", err, lastLines(out, 3))
	}
	return s.start(ctx)
}

func (s *Server) cleanup() {
	if s.tempRoot != "" {
		_ = os.RemoveAll(s.tempRoot)
	}
	if strings.HasPrefix(filepath.Base(s.sockDir), "sfsock-") {
		_ = os.RemoveAll(s.sockDir)
	}
}

// Port is the TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// Addr is "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// SocketDir is the directory of the server's Unix socket.
func (s *Server) SocketDir() string { return s.sockDir }

// SocketPath is the Unix socket file (SocketDir/.s.PGSQL.port).
func (s *Server) SocketPath() string {
	return filepath.Join(s.sockDir, ".s.PGSQL."+strconv.Itoa(s.port))
}

// DataDir is the cluster directory.
func (s *Server) DataDir() string { return s.dataDir }

// BinDir is the directory of the server binaries in use.
func (s *Server) BinDir() string { return s.binDir }

// Superuser is the database superuser name.
func (s *Server) Superuser() string { return s.superuser }

// URL is a TCP connection URL for the superuser and database db.
func (s *Server) URL(db string) string {
	auth := s.superuser
	if s.password != "" {
		auth += ":" + s.password
	}
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", auth, s.Addr(), db)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgserver: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
