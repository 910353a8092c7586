package pgfetch

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Hard limits on an archive's contents (a release unpacks to about 100 MB
// in about 1,000 files).
const (
	maxUnpacked = 2 << 30
	maxEntries  = 50000
)

// unpackInto unpacks the archive (a package tarball: one top directory,
// "package/") into a new directory beside dir, restores the symbolic links
// the package lists, and renames it to dir, replacing a damaged one: dir
// exists only once complete. The archive is hashed again as it is read,
// and nothing is renamed into place unless the hash is still want.
func unpackInto(archive, dir string, want []byte) error {
	f, err := os.Open(archive)
	if err != nil {
		return fmt.Errorf("pgfetch: %w", err)
	}
	defer f.Close()
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("pgfetch: %w", err)
	}
	defer os.RemoveAll(tmp) // nothing left once renamed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("pgfetch: %w", err)
	}
	sum := sha512.New()
	if err := untar(io.TeeReader(f, sum), tmp); err != nil {
		return fmt.Errorf("pgfetch: unpacking %s: %w", archive, err)
	}
	// The tar stream may end before the gzip data does.
	if _, err := io.Copy(sum, f); err != nil {
		return fmt.Errorf("pgfetch: %w", err)
	}
	if err := checkSum(sum, want); err != nil {
		return fmt.Errorf("pgfetch: %s changed while it was unpacked: %w", archive, err)
	}
	if err := hydrateSymlinks(tmp); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("pgfetch: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("pgfetch: %w", err)
	}
	return nil
}

// untar writes the regular files and directories of a gzipped tar stream
// into root, without its top directory. Files are readable by everyone
// and directories and programs usable by everyone whatever the umask: the
// server may run as another user than the one who fetched it.
func untar(r io.Reader, root string) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	var total int64
	for entries := 0; ; entries++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if entries >= maxEntries {
			return fmt.Errorf("more than %d entries", maxEntries)
		}
		_, name, _ := strings.Cut(strings.TrimPrefix(h.Name, "./"), "/")
		if name == "" {
			continue
		}
		name = filepath.FromSlash(name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("entry %q points outside the package", h.Name)
		}
		path := filepath.Join(root, name)
		switch h.Typeflag {
		case tar.TypeXGlobalHeader:
			// PAX settings for what follows, applied by archive/tar.
		case tar.TypeDir:
			if err := mkdirAll(root, name); err != nil {
				return err
			}
		case tar.TypeReg:
			total += h.Size
			if total > maxUnpacked {
				return fmt.Errorf("more than %d bytes", maxUnpacked)
			}
			if err := mkdirAll(root, filepath.Dir(name)); err != nil {
				return err
			}
			mode := fs.FileMode(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			if err := writeFile(path, tr, mode); err != nil {
				return err
			}
		default:
			// npm packages hold files and directories only; the links
			// are listed in native/pg-symlinks.json.
			return fmt.Errorf("entry %q: type %q is not a file or directory", h.Name, h.Typeflag)
		}
	}
}

// mkdirAll creates the directory rel of root and its missing parents with
// mode 0755.
func mkdirAll(root, rel string) error {
	if rel == "." {
		return nil
	}
	if err := mkdirAll(root, filepath.Dir(rel)); err != nil {
		return err
	}
	d := filepath.Join(root, rel)
	if st, err := os.Lstat(d); err == nil && st.IsDir() {
		return nil
	}
	if err := os.Mkdir(d, 0o755); err != nil {
		return err
	}
	return os.Chmod(d, 0o755)
}

func writeFile(path string, r io.Reader, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// hydrateSymlinks restores the links the package lists in
// native/pg-symlinks.json (npm cannot carry links; the package's install
// script, which npm would run, makes them): each {source, target}, paths
// relative to the package, is a link at target to source, made relative so
// that the directory can move.
func hydrateSymlinks(root string) error {
	b, err := os.ReadFile(filepath.Join(root, "native", "pg-symlinks.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgfetch: %w", err)
	}
	var links []struct{ Source, Target string }
	if err := json.Unmarshal(b, &links); err != nil {
		return fmt.Errorf("pgfetch: native/pg-symlinks.json: %w", err)
	}
	for _, l := range links {
		src, dst := filepath.FromSlash(l.Source), filepath.FromSlash(l.Target)
		if !filepath.IsLocal(src) || !filepath.IsLocal(dst) {
			return fmt.Errorf("pgfetch: native/pg-symlinks.json: link %q -> %q points outside the package", l.Target, l.Source)
		}
		rel, err := filepath.Rel(filepath.Dir(dst), src)
		if err != nil {
			return fmt.Errorf("pgfetch: %w", err)
		}
		if err := mkdirAll(root, filepath.Dir(dst)); err != nil {
			return fmt.Errorf("pgfetch: %w", err)
		}
		if err := os.Symlink(rel, filepath.Join(root, dst)); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("pgfetch: %w", err)
		}
	}
	return nil
}
