package pgfetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

// ErrUnavailable is wrapped by Fetch's error when binaries cannot be had
// here at all (no package for the platform or major version, a registry
// that cannot be reached or does not have the package), as opposed to a
// fetch that went wrong (an archive that fails its integrity check, a full
// disk).
var ErrUnavailable = errors.New("PostgreSQL binaries cannot be fetched here")

// Options configure Fetch. Zero values are documented defaults.
type Options struct {
	// Major is the PostgreSQL major version. 0: DefaultMajor.
	Major int
	// Registry is the npm registry's base URL, https only (a mirror's,
	// with a path if it has one). Empty: DefaultRegistry.
	Registry string
	// CacheDir holds the archives and the unpacked releases. Empty:
	// CacheDir().
	CacheDir string
	// Platform is the package's platform ("linux-x64"). Empty: Platform().
	Platform string
	// Client makes the requests. nil: one that honours HTTPS_PROXY and
	// NO_PROXY and bounds connecting and the wait for headers.
	Client *http.Client
	// Progress, when not nil, receives a progress line rewritten in place
	// ("\r") while the archive downloads: give it a terminal only.
	Progress io.Writer
	// Logger receives what Fetch does. nil: discard.
	Logger *slog.Logger
	// MetadataTimeout bounds the registry's version document. 0: 30s.
	MetadataTimeout time.Duration
	// StallTimeout ends a download that receives nothing for that long.
	// 0: 60s.
	StallTimeout time.Duration
	// DownloadTimeout bounds the whole download. 0: 15 minutes.
	DownloadTimeout time.Duration
}

// Install is a release unpacked in the cache.
type Install struct {
	// BinDir holds initdb, pg_ctl and postgres.
	BinDir string
	// Major and Release are the PostgreSQL major version and the package's
	// release ("18.4.0-beta.17").
	Major   int
	Release string
	// Downloaded is true when this call downloaded the archive, false when
	// the cache had it.
	Downloaded bool
}

// CacheDir is the default cache directory: $XDG_CACHE_HOME/snowflake-proxy/pg
// when XDG_CACHE_HOME is set; for root otherwise /var/cache/snowflake-proxy/pg
// (the server then runs as another user, which cannot enter /root); else
// the user's cache directory (~/.cache on Linux).
func CacheDir() string {
	if d := os.Getenv("XDG_CACHE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "snowflake-proxy", "pg")
	}
	if os.Geteuid() == 0 {
		return "/var/cache/snowflake-proxy/pg"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "snowflake-proxy", "pg")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("snowflake-proxy-%d", os.Getuid()), "pg")
}

// Fetch returns the pinned release of a PostgreSQL major version for this
// platform, unpacked in the cache directory: from the cache when it is
// there (no network at all), else downloaded from the registry, checked
// against the registry's integrity hash before anything is unpacked, and
// unpacked into a new directory renamed into place once complete. A file
// lock in the cache directory makes concurrent callers (test binaries run
// in parallel) wait for one download.
func Fetch(ctx context.Context, o Options) (*Install, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	release, err := Release(o.Platform, o.Major)
	if err != nil {
		return nil, err
	}
	in := &Install{Major: o.Major, Release: release}
	name := o.Platform + "-" + release
	dir := filepath.Join(o.CacheDir, name)
	in.BinDir = filepath.Join(dir, "native", "bin")
	if checkBinDir(ctx, in.BinDir, o.Major) == nil {
		return in, nil
	}

	if err := mkdirShared(o.CacheDir); err != nil {
		return nil, err
	}
	// Another process's fetch ends within its own bounds; waiting for it
	// is bounded the same way.
	lctx, cancel := context.WithTimeout(ctx, o.MetadataTimeout+o.DownloadTimeout+time.Minute)
	defer cancel()
	unlock, err := LockFile(lctx, filepath.Join(o.CacheDir, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Another process may have finished while this one waited.
	if err := checkBinDir(ctx, in.BinDir, o.Major); err == nil {
		return in, nil
	} else if _, statErr := os.Stat(dir); statErr == nil {
		o.Logger.Warn("the cached PostgreSQL is damaged; unpacking it again", "dir", dir, "err", err)
	}
	removeLeftovers(o.CacheDir)

	meta, err := o.metadata(ctx, release)
	if err != nil {
		return nil, err
	}
	archive := filepath.Join(o.CacheDir, name+".tgz")
	if err := verifyFile(archive, meta.integrity); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			o.Logger.Warn("refusing the cached archive; fetching it again", "archive", archive, "err", err)
		}
		if err := o.download(ctx, meta, release, archive); err != nil {
			return nil, err
		}
		in.Downloaded = true
	}
	if err := unpackInto(archive, dir, meta.integrity); err != nil {
		return nil, err
	}
	if err := checkBinDir(ctx, in.BinDir, o.Major); err != nil {
		return nil, err
	}
	o.Logger.Info("PostgreSQL unpacked", "release", release, "platform", o.Platform, "dir", dir)
	return in, nil
}

func (o *Options) defaults() error {
	if o.Major == 0 {
		o.Major = DefaultMajor
	}
	if o.Registry == "" {
		o.Registry = DefaultRegistry
	}
	if o.CacheDir == "" {
		o.CacheDir = CacheDir()
	}
	if o.Platform == "" {
		p, err := Platform()
		if err != nil {
			return err
		}
		o.Platform = p
	}
	if o.Client == nil {
		o.Client = defaultClient()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MetadataTimeout == 0 {
		o.MetadataTimeout = 30 * time.Second
	}
	if o.StallTimeout == 0 {
		o.StallTimeout = 60 * time.Second
	}
	if o.DownloadTimeout == 0 {
		o.DownloadTimeout = 15 * time.Minute
	}
	return nil
}

// defaultClient is http.DefaultTransport's settings (HTTPS_PROXY and
// NO_PROXY honoured, connect and TLS handshake bounded) with a bound on the
// wait for response headers too.
func defaultClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = 30 * time.Second
	return &http.Client{Transport: t}
}

var versionLine = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// checkBinDir runs binDir's postgres --version: a release is used only when
// its server runs and is the major version asked for.
func checkBinDir(ctx context.Context, binDir string, major int) error {
	for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
		if st, err := os.Stat(filepath.Join(binDir, b)); err != nil || st.IsDir() {
			return fmt.Errorf("pgfetch: %s has no %s", binDir, b)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "postgres"), "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgfetch: %s --version: %w: %s", filepath.Join(binDir, "postgres"), err, bytes.TrimSpace(out))
	}
	if m := versionLine.FindSubmatch(out); m == nil || string(m[1]) != strconv.Itoa(major) {
		return fmt.Errorf("pgfetch: %s --version printed %q, want PostgreSQL %d", filepath.Join(binDir, "postgres"), bytes.TrimSpace(out), major)
	}
	return nil
}

// removeLeftovers deletes what a fetch that was killed left behind (the
// caller holds the cache's lock).
func removeLeftovers(cache string) {
	old, _ := filepath.Glob(filepath.Join(cache, "*.tmp-*"))
	for _, d := range old {
		_ = os.RemoveAll(d)
	}
}

// mkdirShared creates dir and its missing parents with mode 0755 whatever
// the umask: the server's OS user must be able to pass through them.
func mkdirShared(dir string) error {
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirShared(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pgfetch: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("pgfetch: %w", err)
	}
	return nil
}
