package pgfetch

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tgz builds a gzipped tar of the given headers, files with body "x".
func tgz(t *testing.T, headers ...*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for _, h := range headers {
		if h.Typeflag == tar.TypeReg {
			h.Size = 1
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Entries that would land outside the package, and links (npm packages
// carry none, so one is a forged archive), are refused.
func TestUntarRefusesEscapesAndLinks(t *testing.T) {
	for _, c := range []struct {
		name string
		h    *tar.Header
		want string
	}{
		{"parent", &tar.Header{Name: "package/../../etc/x", Typeflag: tar.TypeReg, Mode: 0o644}, "outside the package"},
		{"absolute", &tar.Header{Name: "package//etc/x", Typeflag: tar.TypeReg, Mode: 0o644}, "outside the package"},
		{"symlink", &tar.Header{Name: "package/native/bin/x", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, "not a file or directory"},
		{"hard link", &tar.Header{Name: "package/native/bin/x", Typeflag: tar.TypeLink, Linkname: "package/a"}, "not a file or directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			err := untar(bytes.NewReader(tgz(t, c.h)), root)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("untar: %v; want %q", err, c.want)
			}
		})
	}
}

// Files keep their execute bits and become readable by everyone whatever
// the umask; the top directory is dropped; a PAX global header is no
// entry.
func TestUntarModes(t *testing.T) {
	root := t.TempDir()
	err := untar(bytes.NewReader(tgz(t,
		&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"comment": "settings, not an entry"}},
		&tar.Header{Name: "package/native/bin/postgres", Typeflag: tar.TypeReg, Mode: 0o700},
		&tar.Header{Name: "package/native/share/a.sql", Typeflag: tar.TypeReg, Mode: 0o600},
	)), root)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{"native/bin/postgres": 0o755, "native/share/a.sql": 0o644, "native/bin": 0o755 | os.ModeDir} {
		st, err := os.Stat(filepath.Join(root, path))
		if err != nil || st.Mode() != want {
			t.Errorf("%s: %v, %v; want %v", path, st.Mode(), err, want)
		}
	}
}

// The links of pg-symlinks.json are made relative, beside their target;
// one that leaves the package is refused.
func TestHydrateSymlinks(t *testing.T) {
	for _, c := range []struct {
		name, json, link, want, err string
	}{
		{"library", `[{"source":"native/lib/libpq.so.5.18","target":"native/lib/libpq.so.5"}]`, "native/lib/libpq.so.5", "libpq.so.5.18", ""},
		{"escape", `[{"source":"../../etc/passwd","target":"native/lib/x"}]`, "", "", "outside the package"},
		{"escaping link", `[{"source":"native/lib/a","target":"../x"}]`, "", "", "outside the package"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "native", "lib"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "native", "pg-symlinks.json"), []byte(c.json), 0o644); err != nil {
				t.Fatal(err)
			}
			err := hydrateSymlinks(root)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("hydrate: %v; want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, err := os.Readlink(filepath.Join(root, c.link)); err != nil || got != c.want {
				t.Fatalf("link %s -> %q, %v; want %q", c.link, got, err, c.want)
			}
		})
	}
}

func TestParseIntegrity(t *testing.T) {
	const good = "sha512-jVw/MdDtIX/vICH/DKIe6/mHpiCggdx6QVyza4vt/NbcZFsL0KhwglF6F1Koqx3gRBZ9XtN+vi63EsqSyqOSxA=="
	for _, c := range []struct {
		in string
		ok bool
	}{
		{good, true},
		{"sha1-k+x1obYkcwsq5n7kbXN+AqUR8jM= " + good, true},
		{good + "?opt", true},
		{"sha1-k+x1obYkcwsq5n7kbXN+AqUR8jM=", false},
		{"sha512-dG9vIHNob3J0", false},
		{"", false},
	} {
		sum, err := parseIntegrity(c.in)
		if (err == nil) != c.ok || (c.ok && len(sum) != 64) {
			t.Errorf("parseIntegrity(%q) = %d bytes, %v; want ok %v", c.in, len(sum), err, c.ok)
		}
	}
}

func TestPlatformAndRelease(t *testing.T) {
	for _, c := range []struct {
		goos, goarch, want string
	}{
		{"linux", "amd64", "linux-x64"},
		{"linux", "arm64", "linux-arm64"},
		{"darwin", "amd64", "darwin-x64"},
		{"darwin", "arm64", "darwin-arm64"},
		{"windows", "amd64", ""},
		{"linux", "riscv64", ""},
	} {
		p, err := platformOf(c.goos, c.goarch)
		if p != c.want || (c.want == "") != errors.Is(err, ErrUnavailable) {
			t.Errorf("platformOf(%s, %s) = %q, %v; want %q", c.goos, c.goarch, p, err, c.want)
		}
	}
	if _, err := Release("linux-arm64", 13); !errors.Is(err, ErrUnavailable) {
		t.Errorf("PostgreSQL 13 on linux-arm64 (published for linux-x64 only): %v; want ErrUnavailable", err)
	}
	if _, err := Release("linux-x64", 9); err == nil || errors.Is(err, ErrUnavailable) {
		t.Errorf("PostgreSQL 9 (pinned nowhere): %v; want a plain error", err)
	}
	if v, err := Release("linux-x64", DefaultMajor); err != nil || !strings.HasPrefix(v, "18.") {
		t.Errorf("default release %q, %v", v, err)
	}
}
