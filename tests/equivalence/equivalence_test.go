// Package equivalence checks that the proxy is invisible: every SQL script in
// testdata/ is run with psql twice, through the proxy (--node 1) on database
// A and directly against the server on database B, where the shim was
// installed beforehand through a proxy (the direct session gets
// snowflake.node=1 from PGOPTIONS, as a server configured for node 1 would
// give it). After masking the values generated during the run (snowflake
// IDs, epochs, timestamps: see mask.go), the two outputs must be identical;
// any difference is a proxy bug.
//
// The expected output is also kept as testdata/NAME.out, and the proxy's
// masked output must equal it, so that a change in behaviour shows up in
// review. -update writes it from the direct run (the shim), or for a
// proxy-only script from the proxy run, which must then be reviewed:
//
//	go test ./tests/equivalence -update   # rewrite the .out files
//	go test ./tests/equivalence -run 'TestEquivalence/defaults' -v
//
// Scripts may start with directive comments (see parseDirectives):
//
//	-- proxy-only: reason        no direct run: the golden file alone is the
//	                             contract (for what a stock server cannot
//	                             do for direct sessions, e.g. validate the
//	                             placeholder setting snowflake.node)
//	-- roles: r1 r2              cluster-wide roles the script creates and
//	                             drops; dropped (if left over) before each run
//	-- proxy-var: name=value     psql variable for the run through the proxy
//	-- direct-var: name=value    psql variable for the direct run
//	-- direct-setup: SQL         run on database B before the direct run
//	-- direct-replace: A => B    replace text A by B in the direct output
//	                             (not in echoed "--" comment lines)
//
// The direct-* directives exist for the extension lifecycle script only: a
// server without extension files cannot run CREATE/DROP EXTENSION snowflake,
// so there the direct run uses a contrib extension and names are mapped.
package equivalence

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

var (
	update   = flag.Bool("update", false, "rewrite testdata/NAME.out from the direct run (proxy run for proxy-only scripts)")
	proxyLog = flag.Bool("proxylog", false, "print the proxy's log on stderr")
)

// node is the snowflake.node of both runs.
const node = 1

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestEquivalence(t *testing.T) {
	t.Parallel() // beside the PostgreSQL 18 re-run, which has its own server; the scripts themselves run one at a time (cluster-wide roles)
	psql := pgtest.Tool(t, "psql")
	scripts, err := filepath.Glob(filepath.Join("testdata", "*.sql"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts in testdata (%v)", err)
	}
	for _, script := range scripts {
		name := strings.TrimSuffix(filepath.Base(script), ".sql")
		t.Run(name, func(t *testing.T) { runEquivalence(t, psql, script) })
	}
}

func runEquivalence(t *testing.T, psql, script string) {
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	d, err := parseDirectives(string(src))
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	srv := pgtest.Shared(t)
	from := time.Now().Add(-time.Minute)

	proxy := startProxy(t, srv)
	dbA := pgtest.NewDatabase(t, srv)
	dbB := pgtest.NewDatabase(t, srv)
	installShim(t, proxy.Addr(), dbA)
	installShim(t, proxy.Addr(), dbB)
	for _, sql := range d.directSetup {
		pgtest.Exec(t, srv, dbB, sql)
	}

	dropRoles(t, srv, d.roles)
	viaProxy := runPsql(t, psql, proxy.Addr(), dbA, src, d.proxyVars, nil)
	dropRoles(t, srv, d.roles)
	var direct string
	if !d.proxyOnly {
		direct = runPsql(t, psql, srv.Addr(), dbB, src, d.directVars, []string{"PGOPTIONS=-c snowflake.node=" + strconv.Itoa(node)})
		dropRoles(t, srv, d.roles)
		direct = replaceOutside(direct, d.directReplace)
	}

	to := time.Now().Add(time.Hour) // leases may run IDs a little ahead of the clock
	gotProxy := mask(viaProxy, from, to)
	gotDirect := mask(direct, from, to)

	if !d.proxyOnly && gotProxy != gotDirect {
		t.Errorf("%s: output through the proxy differs from the direct run with the shim (masked; - direct, + proxy):\n%s",
			script, lineDiff(gotDirect, gotProxy))
	}
	golden := strings.TrimSuffix(script, ".sql") + ".out"
	if *update {
		// The golden file is the contract, not a recording of the proxy:
		// the direct run with the shim where there is one.
		expected := gotDirect
		if d.proxyOnly {
			expected = gotProxy
		}
		if err := os.WriteFile(golden, []byte(expected), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if gotProxy != string(want) {
		t.Errorf("%s: proxy output differs from %s (- golden, + proxy; -update rewrites it after review):\n%s",
			script, golden, lineDiff(string(want), gotProxy))
	}
}

// directives are the options a script gives in its leading comments.
type directives struct {
	proxyOnly     bool
	roles         []string
	proxyVars     []string
	directVars    []string
	directSetup   []string
	directReplace [][2]string
}

func parseDirectives(src string) (directives, error) {
	var d directives
	sc := bufio.NewScanner(strings.NewReader(src))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "--") {
			if line == "" {
				continue
			}
			break // directives only in the leading comment block
		}
		key, val, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "--")), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "proxy-only":
			d.proxyOnly = true
		case "roles":
			d.roles = append(d.roles, strings.Fields(val)...)
		case "proxy-var":
			d.proxyVars = append(d.proxyVars, val)
		case "direct-var":
			d.directVars = append(d.directVars, val)
		case "direct-setup":
			d.directSetup = append(d.directSetup, val)
		case "direct-replace":
			a, b, ok := strings.Cut(val, " => ")
			if !ok {
				return d, fmt.Errorf("direct-replace needs \"A => B\": %q", val)
			}
			d.directReplace = append(d.directReplace, [2]string{a, b})
		}
	}
	return d, sc.Err()
}

func startProxy(t *testing.T, srv *pgserver.Server) *app.App {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if *proxyLog {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	a, err := app.Start(ctx, app.Config{Listen: "127.0.0.1:0", Upstream: srv.URL("postgres"), Node: node, Logger: logger})
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	return a
}

// installShim runs CREATE EXTENSION snowflake through the proxy at addr.
func installShim(t *testing.T, addr, db string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", addr, db))
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE EXTENSION snowflake"); err != nil {
		t.Fatalf("CREATE EXTENSION snowflake on %s through the proxy: %v", db, err)
	}
}

// dropRoles removes roles a script creates, in case a failed run left them.
func dropRoles(t *testing.T, srv *pgserver.Server, roles []string) {
	t.Helper()
	for _, r := range roles {
		pgtest.Exec(t, srv, "postgres", "DROP ROLE IF EXISTS "+pgx.Identifier{r}.Sanitize())
	}
}

// runPsql feeds the script to psql on stdin (errors then read
// "psql:<stdin>:N:") and returns stdout and stderr interleaved in psql's own
// order (one pipe for both).
func runPsql(t *testing.T, psql, addr, db string, script []byte, vars, env []string) string {
	t.Helper()
	host, port, ok := strings.Cut(addr, ":")
	if !ok {
		t.Fatalf("bad address %q", addr)
	}
	args := []string{"-X", "-a", "-v", "ON_ERROR_STOP=0", "-h", host, "-p", port, "-U", "postgres", "-d", db}
	for _, v := range vars {
		args = append(args, "-v", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, psql, args...)
	cmd.Stdin = bytes.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "LC_ALL=C", "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=30",
		"PGTZ=UTC", "PGDATESTYLE=ISO, MDY",
	}, env...)
	if err := cmd.Run(); err != nil {
		t.Fatalf("psql on %s (%s): %v\n%s", addr, db, err, out.String())
	}
	return out.String()
}

// replaceOutside applies the replacements to every line of out except the
// echoed comment lines of the script (which show the directives).
func replaceOutside(out string, repl [][2]string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "--") {
			continue
		}
		for _, r := range repl {
			l = strings.ReplaceAll(l, r[0], r[1])
		}
		lines[i] = l
	}
	return strings.Join(lines, "\n")
}
