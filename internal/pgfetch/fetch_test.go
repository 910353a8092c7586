package pgfetch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgfetch"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// fetcher fetches from a test registry into a cache of its own.
type fetcher struct {
	reg   *pgtest.Registry
	cache string
	logs  *pgtest.SyncBuffer
}

func newFetcher(t *testing.T) *fetcher {
	t.Helper()
	return &fetcher{reg: pgtest.NewRegistry(t), cache: t.TempDir(), logs: &pgtest.SyncBuffer{}}
}

func (f *fetcher) options() pgfetch.Options {
	return pgfetch.Options{Registry: f.reg.URL, Client: f.reg.Client, CacheDir: f.cache, Platform: f.reg.Platform,
		Logger: slog.New(slog.NewTextHandler(f.logs, nil))}
}

func (f *fetcher) fetch(t *testing.T, o pgfetch.Options) (*pgfetch.Install, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return pgfetch.Fetch(ctx, o)
}

func (f *fetcher) mustFetch(t *testing.T) *pgfetch.Install {
	t.Helper()
	in, err := f.fetch(t, f.options())
	if err != nil {
		t.Fatalf("fetch: %v\nlogs:\n%s", err, f.logs.String())
	}
	return in
}

// cacheNames lists the cache directory.
func (f *fetcher) cacheNames(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(f.cache)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// checkRelease asserts that in's postgres runs and that every link the
// package lists (native/pg-symlinks.json) was restored and resolves.
func checkRelease(t *testing.T, in *pgfetch.Install) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(in.BinDir, "postgres"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "(PostgreSQL) 18.") {
		t.Fatalf("postgres --version: %q, %v", out, err)
	}
	pkg := filepath.Dir(filepath.Dir(in.BinDir))
	b, err := os.ReadFile(filepath.Join(pkg, "native", "pg-symlinks.json"))
	if err != nil {
		t.Fatal(err)
	}
	var links []struct{ Source, Target string }
	if err := json.Unmarshal(b, &links); err != nil || len(links) == 0 {
		t.Fatalf("pg-symlinks.json: %d links, %v", len(links), err)
	}
	for _, l := range links {
		p := filepath.Join(pkg, l.Target)
		if st, err := os.Lstat(p); err != nil || st.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s: not a link (%v)", l.Target, err)
		} else if _, err := os.Stat(p); err != nil {
			t.Errorf("%s does not resolve: %v", l.Target, err)
		}
	}
}

// Callers that fetch into one cache at once (parallel test binaries) get
// one download, verified and unpacked once, and nothing partial is left;
// a later fetch uses the cache without asking the registry anything.
func TestFetchDownloadsOnceAndReuses(t *testing.T) {
	f := newFetcher(t)
	const callers = 3
	ins := make([]*pgfetch.Install, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { ins[i], errs[i] = f.fetch(t, f.options()) })
	}
	wg.Wait()
	downloaded := 0
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if ins[i].BinDir != ins[0].BinDir {
			t.Errorf("caller %d got %s, caller 0 %s", i, ins[i].BinDir, ins[0].BinDir)
		}
		if ins[i].Downloaded {
			downloaded++
		}
	}
	if downloaded != 1 || f.reg.Downloads() != 1 {
		t.Fatalf("%d callers say they downloaded, the registry served %d archives; want 1 and 1", downloaded, f.reg.Downloads())
	}
	checkRelease(t, ins[0])
	name := f.reg.Platform + "-" + f.reg.Release
	if got, want := f.cacheNames(t), []string{".lock", name, name + ".tgz"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("cache holds %v, want %v", got, want)
	}

	docs := f.reg.Documents()
	again := f.mustFetch(t)
	if again.Downloaded || again.BinDir != ins[0].BinDir || f.reg.Documents() != docs || f.reg.Downloads() != 1 {
		t.Fatalf("second fetch: %+v, registry asked %d more times: want the cache, no request", again, f.reg.Documents()-docs)
	}
}

// An archive in the cache whose hash is not the registry's is refused and
// fetched again.
func TestFetchRefusesCorruptCachedArchive(t *testing.T) {
	f := newFetcher(t)
	in := f.mustFetch(t)
	release := filepath.Dir(filepath.Dir(in.BinDir))
	if err := os.RemoveAll(release); err != nil {
		t.Fatal(err)
	}
	archive := release + ".tgz"
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 0x55
	if err := os.WriteFile(archive, b, 0o644); err != nil {
		t.Fatal(err)
	}
	again := f.mustFetch(t)
	if !again.Downloaded || f.reg.Downloads() != 2 {
		t.Fatalf("fetch after corrupting the cached archive: downloaded %v, registry served %d archives; want a new download", again.Downloaded, f.reg.Downloads())
	}
	if !strings.Contains(f.logs.String(), "refusing the cached archive") {
		t.Errorf("no line about refusing the archive:\n%s", f.logs.String())
	}
	checkRelease(t, again)
}

// An unpacked release whose server no longer runs is unpacked again from
// the cached archive, without a download.
func TestFetchUnpacksDamagedReleaseAgain(t *testing.T) {
	f := newFetcher(t)
	in := f.mustFetch(t)
	if err := os.WriteFile(filepath.Join(in.BinDir, "postgres"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	again := f.mustFetch(t)
	if again.Downloaded || f.reg.Downloads() != 1 {
		t.Fatalf("downloaded %v, %d downloads: want the cached archive used", again.Downloaded, f.reg.Downloads())
	}
	if !strings.Contains(f.logs.String(), "damaged") {
		t.Errorf("no line about the damaged release:\n%s", f.logs.String())
	}
	checkRelease(t, again)
}

// A download whose hash is not the registry's is refused before anything
// is unpacked, and not kept.
func TestFetchRefusesCorruptDownload(t *testing.T) {
	f := newFetcher(t)
	f.reg.Corrupt(true)
	_, err := f.fetch(t, f.options())
	if !errors.Is(err, pgfetch.ErrIntegrity) || !strings.Contains(err.Error(), "nothing was unpacked") {
		t.Fatalf("fetch of a corrupt archive: %v; want an integrity error", err)
	}
	if got := f.cacheNames(t); len(got) != 1 || got[0] != ".lock" {
		t.Errorf("cache holds %v after the refused download, want the lock only", got)
	}
}

// A registry that cannot be reached, or does not have the package, is
// ErrUnavailable, and its error names the registry; a registry that is
// not https is refused.
func TestFetchUnavailable(t *testing.T) {
	f := newFetcher(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "https://" + l.Addr().String()
	l.Close()
	for _, c := range []struct {
		name, registry string
		unavailable    bool
		want           string
	}{
		{"closed port", closed, true, closed},
		{"no such package", f.reg.URL + "/mirror", true, "404"},
		{"plain http", "http://" + strings.TrimPrefix(f.reg.URL, "https://"), false, "want an https:// URL"},
		{"password hidden", "https://user:s3cret@" + l.Addr().String(), true, "user:xxxxx@"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := f.options()
			o.Registry = c.registry
			_, err := f.fetch(t, o)
			if err == nil || errors.Is(err, pgfetch.ErrUnavailable) != c.unavailable || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("fetch from %s: %v; want unavailable %v and %q", c.registry, err, c.unavailable, c.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the registry's password is in the error: %v", err)
			}
		})
	}
}

// With a progress writer (a terminal), the download shows a line
// rewritten in place up to 100%, ended by a newline.
func TestFetchProgress(t *testing.T) {
	f := newFetcher(t)
	var out bytes.Buffer
	o := f.options()
	o.Progress = &out
	if _, err := f.fetch(t, o); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.HasPrefix(s, "\rdownloading PostgreSQL "+f.reg.Release) || !strings.Contains(s, "100% of ") || !strings.HasSuffix(s, "\n") {
		t.Fatalf("progress output %q", s)
	}
}
