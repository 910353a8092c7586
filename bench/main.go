package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config holds the command-line flags.
type config struct {
	duration      time.Duration
	rounds        int
	only          string
	skipPgBouncer bool
	skipFloor     bool
	clients       []int
	modes         []string
	keep          bool
	outDir        string
	proxyArgs     []string // extra proxy flags (A/B runs of tuning flags)
	upstream      upstreamKind
	clientTLS     bool     // TLS between pgbench and the relays (clienttls.go)
	args          []string // as given, for the report
}

// errInterrupted is the cancellation cause on SIGINT/SIGTERM.
var errInterrupted = errors.New("interrupted")

func main() {
	os.Exit(run(os.Args[1:]))
}

func parseFlags(args []string) (*config, error) {
	c := &config{args: args}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "pgbench -T of each measurement (whole seconds)")
	fs.IntVar(&c.rounds, "rounds", 3, "how many times each target is measured (median reported)")
	fs.StringVar(&c.only, "only", "", "comma-separated workloads to run: "+workloadNames())
	fs.BoolVar(&c.skipPgBouncer, "skip-pgbouncer", false, "do not start or measure PgBouncer")
	fs.BoolVar(&c.skipFloor, "skip-floor", false, "do not build, start or measure the floor relay (bench/floor)")
	clients := fs.String("clients", "1,8", "comma-separated client counts")
	modes := fs.String("modes", "simple,prepared", "comma-separated pgbench -M protocol modes")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary directory (server data, logs, configs, scripts)")
	fs.StringVar(&c.outDir, "out", "", "directory for the Markdown and CSV results (default: bench/results in the module)")
	proxyArgs := fs.String("proxy-args", "", "extra snowflake-proxy flags, space-separated (e.g. \"--procs 2\")")
	useTLS := fs.Bool("upstream-tls", false, "proxy and PgBouncer reach the server over TCP 127.0.0.1 with TLS (sslmode=require); the floor relay is not run")
	useTCP := fs.Bool("upstream-tcp", false, "proxy and PgBouncer reach the server over TCP 127.0.0.1 in plaintext (the -upstream-tls run without TLS); the floor relay is not run")
	fs.BoolVar(&c.clientTLS, "client-tls", false, "pgbench reaches the proxy and PgBouncer over TLS (sslmode=require; both relays require it), with any upstream variant; the floor relay is not run")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.proxyArgs = strings.Fields(*proxyArgs)
	switch {
	case *useTLS && *useTCP:
		return nil, errors.New("-upstream-tls and -upstream-tcp: choose one")
	case *useTLS:
		c.upstream = upTLS
	case *useTCP:
		c.upstream = upTCP
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.duration < time.Second {
		return nil, fmt.Errorf("-duration %s: must be at least 1s", c.duration)
	}
	if c.rounds < 1 || c.rounds > 100 {
		return nil, fmt.Errorf("-rounds %d: must be 1..100", c.rounds)
	}
	for _, s := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 64 {
			return nil, fmt.Errorf("-clients %q: want numbers 1..64", *clients)
		}
		c.clients = append(c.clients, n)
	}
	for _, m := range strings.Split(*modes, ",") {
		m = strings.TrimSpace(m)
		if m != "simple" && m != "prepared" && m != "extended" {
			return nil, fmt.Errorf("-modes %q: want simple, extended or prepared", *modes)
		}
		c.modes = append(c.modes, m)
	}
	if _, err := selectWorkloads(c.only); err != nil {
		return nil, err
	}
	return c, nil
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "idle" {
		return runIdle(args[1:])
	}
	if len(args) > 0 && args[0] == "bulk" {
		return runBulk(args[1:])
	}
	cfg, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for range sigs {
			if ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "\nbench: interrupted, stopping everything it started")
				cancel(errInterrupted)
			} else {
				fmt.Fprintln(os.Stderr, "bench: still stopping processes, please wait")
			}
		}
	}()

	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	if cfg.outDir == "" {
		cfg.outDir = filepath.Join(root, "bench", "results")
	}
	dir, err := os.MkdirTemp("", "sfbench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer func() {
		if cfg.keep {
			fmt.Println("bench: kept", dir)
			return
		}
		os.RemoveAll(dir)
	}()
	if err := chmodTraversable(dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}

	h := &harness{cfg: cfg, root: root, dir: dir, res: newResults()}
	defer h.stopAll()
	if err := h.run(ctx); err != nil {
		if errors.Is(context.Cause(ctx), errInterrupted) {
			return 130
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

// moduleRoot finds the directory of this module's go.mod from the working
// directory upwards.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 64 {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/snowflake-proxy/snowflake-proxy") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("run from inside the snowflake-proxy module (go run ./bench)")
}
