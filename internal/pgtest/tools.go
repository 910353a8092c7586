package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgfetch"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// toolPackages are the programs the tests run and the Debian (and Ubuntu)
// package that has each. The downloaded PostgreSQL packages hold the
// server only (initdb, pg_ctl, postgres): psql, pg_dump and pgbench come
// from the distribution; pgbench is in the server package there.
var toolPackages = map[string]string{
	"psql":      "postgresql-client",
	"pg_dump":   "postgresql-client",
	"pgbench":   "postgresql",
	"pgbouncer": "pgbouncer",
	"node":      "nodejs",
	"npm":       "npm",
	"perf":      "linux-perf",
	"java":      "default-jre-headless",
	"openssl":   "openssl",
	// Libraries, found by a file of theirs (toolFiles).
	"pgjdbc":  "libpostgresql-jdbc-java",
	"psycopg": "python3-psycopg",
}

// toolFiles are the tools that are not programs: the file Tool returns for
// each. psycopg is Debian's python3's module: Tool returns that python3.
var toolFiles = map[string]struct{ check, path string }{
	"pgjdbc":  {"/usr/share/java/postgresql.jar", "/usr/share/java/postgresql.jar"},
	"psycopg": {"/usr/lib/python3/dist-packages/psycopg/__init__.py", "/usr/bin/python3"},
}

// Tool returns the path of a program the tests need (a key of
// toolPackages). When it is missing and the tests run as root on Debian or
// Ubuntu, the packages of every missing program are installed with apt-get,
// once for all test binaries (a file lock keeps parallel ones from racing
// apt); otherwise the test cannot run (CannotRun), saying what to install.
func Tool(tb testing.TB, name string) string {
	tb.Helper()
	if p := findTool(name); p != "" {
		return p
	}
	toolsOnce.Do(func() { toolsErr = installTools() })
	if p := findTool(name); p != "" {
		return p
	}
	pkg := toolPackages[name]
	why := ""
	if toolsErr != nil {
		why = " (" + toolsErr.Error() + ")"
	}
	CannotRun(tb, "%s is not installed%s: install it (Debian and Ubuntu: apt-get install %s)", name, why, pkg)
	return ""
}

var (
	toolsOnce sync.Once
	toolsErr  error
)

// findTool looks in PATH, then where Debian keeps PostgreSQL's programs
// and PgBouncer.
func findTool(name string) string {
	if f, ok := toolFiles[name]; ok {
		if _, err := os.Stat(f.check); err != nil {
			return ""
		}
		return f.path
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	cands := []string{"/usr/sbin/" + name}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		cands = append(cands, filepath.Join(d, name))
	}
	for _, p := range cands {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// missingPackages are the packages of the programs findTool does not find.
func missingPackages() []string {
	seen := map[string]bool{}
	var out []string
	for name, pkg := range toolPackages {
		if findTool(name) == "" && !seen[pkg] {
			seen[pkg] = true
			out = append(out, pkg)
		}
	}
	sort.Strings(out)
	return out
}

// canApt says whether installTools may install packages here, and if not
// why not.
func canApt(euid int, debian bool, aptGet string) (bool, string) {
	switch {
	case !debian:
		return false, "not Debian or Ubuntu"
	case euid != 0:
		return false, "not root"
	case aptGet == "":
		return false, "no apt-get"
	}
	return true, ""
}

// installTools installs the missing packages with apt-get where canApt
// allows it, holding a lock shared by the test binaries.
func installTools() error {
	_, err := os.Stat("/etc/debian_version")
	aptGet, _ := exec.LookPath("apt-get")
	if ok, why := canApt(os.Geteuid(), err == nil, aptGet); !ok {
		return fmt.Errorf("not installed automatically: %s", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	unlock, err := pgfetch.LockFile(ctx, filepath.Join(os.TempDir(), "snowflake-proxy-test-apt.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	pkgs := missingPackages() // another test binary may have installed them
	if len(pkgs) == 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "pgtest: installing %s with apt-get (the tests run them)\n", strings.Join(pkgs, " "))
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	apt := func(args ...string) error {
		cmd := exec.CommandContext(ctx, aptGet, args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w: %s", strings.Join(args, " "), err, tail(out, 3))
		}
		return nil
	}
	if err := apt("update", "-qq"); err != nil {
		return err
	}
	install := []string{"install", "-y", "-qq", "--no-install-recommends"}
	var failed []error
	if err := apt(append(install, pkgs...)...); err != nil {
		// One package this distribution lacks (linux-perf is Debian's
		// name) must not keep the others out.
		for _, p := range pkgs {
			if err := apt(append(install, p)...); err != nil {
				failed = append(failed, err)
			}
		}
	}
	// The packages may start a PostgreSQL cluster and a PgBouncer service
	// of their own, on the usual ports; the tests start theirs.
	_ = exec.CommandContext(ctx, "sh", "-c", `command -v pg_lsclusters >/dev/null && pg_lsclusters -h | while read -r v n _; do pg_ctlcluster "$v" "$n" stop; done; `+
		`(command -v systemctl >/dev/null && systemctl stop pgbouncer) || (command -v service >/dev/null && service pgbouncer stop)`).Run()
	return errors.Join(failed...)
}

var userOnce sync.Once

// ensureServerUser creates the postgres system user when the tests run as
// root and it does not exist: PostgreSQL refuses to run as root, and the
// tests' servers and PgBouncer run as that user.
func ensureServerUser() {
	userOnce.Do(func() {
		if os.Geteuid() != 0 {
			return
		}
		if _, err := pgserver.EnsureSystemUser(context.Background(), "postgres"); err != nil {
			// The servers' start says what is missing.
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
	})
}
