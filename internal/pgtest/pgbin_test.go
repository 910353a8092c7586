package pgtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// serverVersionNum asks srv for server_version_num.
func serverVersionNum(t *testing.T, srv *pgserver.Server) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var v string
	if err := c.QueryRow(ctx, "SHOW server_version_num").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestEnvBinDirStartsEveryServer: with SNOWFLAKE_PROXY_TEST_PGBIN naming
// installed PostgreSQL 18 binaries, Start (and Shared, through
// DefaultBinDir) runs PostgreSQL 18, whatever the machine has.
func TestEnvBinDirStartsEveryServer(t *testing.T) {
	bin := BinDir(t, 18)
	t.Setenv(EnvBinDir, bin)
	if d, err := DefaultBinDir(); err != nil || d != bin {
		t.Fatalf("DefaultBinDir() = %q, %v; want %q", d, err, bin)
	}
	srv := Start(t, pgserver.Options{})
	if srv.BinDir() != bin {
		t.Errorf("server started from %s, want %s", srv.BinDir(), bin)
	}
	if v := serverVersionNum(t, srv); !strings.HasPrefix(v, "18") {
		t.Errorf("server_version_num = %s, want 18xxxx", v)
	}
}

// TestEnvBinDirWithoutBinaries: a setting that names a directory without
// the server binaries is an error naming the setting, not a silent fall
// back to the machine's binaries.
func TestEnvBinDirWithoutBinaries(t *testing.T) {
	t.Setenv(EnvBinDir, t.TempDir())
	_, err := DefaultBinDir()
	if err == nil || !strings.Contains(err.Error(), EnvBinDir) {
		t.Fatalf("DefaultBinDir() with an empty directory: %v; want an error naming %s", err, EnvBinDir)
	}
}

// TestInstallMajorOnceForParallelCallers: callers that install the same
// version into the same cache at once (as parallel test binaries do) all
// get the same directory, whose binaries are that version, and no partial
// installation is left behind.
func TestInstallMajorOnceForParallelCallers(t *testing.T) {
	BinDir(t, 17) // skips here when nothing can be installed
	// A fresh cache the servers' OS user can pass through (t.TempDir is
	// private to the user running the tests).
	cache, err := os.MkdirTemp("", "sfpgcache-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(cache) })
	if err := os.Chmod(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const callers = 3
	dirs := make([]string, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], errs[i] = installIn(ctx, cache, 17)
		}()
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if dirs[i] != dirs[0] {
			t.Errorf("caller %d got %s, caller 0 %s", i, dirs[i], dirs[0])
		}
	}
	v, major, err := Version(dirs[0])
	if err != nil || major != 17 {
		t.Fatalf("installed binaries: version %s (%d), %v; want 17", v, major, err)
	}
	left, _ := filepath.Glob(filepath.Join(cache, "*.tmp-*"))
	entries, _ := os.ReadDir(cache)
	if len(left) != 0 || len(entries) != 2 { // the lock and one version
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("cache holds %v, want the lock file and %s only", names, npmVersions[17])
	}
	// Installed again later: reused as it is.
	st, err := os.Stat(filepath.Join(dirs[0], "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := installIn(ctx, cache, 17)
	if err != nil || again != dirs[0] {
		t.Fatalf("second installation: %s, %v; want %s", again, err, dirs[0])
	}
	if st2, err := os.Stat(filepath.Join(again, "postgres")); err != nil || !os.SameFile(st, st2) {
		t.Errorf("second installation replaced the binaries (%v)", err)
	}
}

// TestInstallMajorUnknownVersion: a major version with no pinned release
// is an error, not ErrUnavailable (the test asking for it would be skipped).
func TestInstallMajorUnknownVersion(t *testing.T) {
	_, err := installIn(context.Background(), t.TempDir(), 9)
	if err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("installing PostgreSQL 9: %v; want an error other than ErrUnavailable", err)
	}
}
