package pgserver

import (
	"os"
	"path/filepath"
	"testing"
)

// The password file, the server log and the configuration files live in
// directories of the server's OS user, while the proxy may run as root: a
// link left there must not make root read, chmod, append to or overwrite
// the file it points to.
func TestFilesInTheServersDirectoriesDoNotFollowLinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	const orig = "*:*:*:postgres:theirs\n"
	link := func(name string) string {
		if err := os.WriteFile(target, []byte(orig), 0o644); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		_ = os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	untouched := func(what string) {
		t.Helper()
		st, err := os.Stat(target)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(target)
		if string(b) != orig || st.Mode().Perm() != 0o644 {
			t.Fatalf("%s: the link's target changed: mode %v, %q", what, st.Mode().Perm(), b)
		}
	}

	if pw, err := readPassFile(link("pgpass"), "postgres"); err == nil {
		t.Fatalf("read the password %q through a link", pw)
	}
	untouched("readPassFile")

	s := &Server{logFile: link("server.log")}
	if f, err := s.openLog(); err == nil {
		f.Close()
		t.Fatal("opened the server log through a link")
	}
	untouched("openLog")
	hard := filepath.Join(dir, "hard.log")
	if err := os.Link(target, hard); err != nil {
		t.Fatal(err)
	}
	s.logFile = hard
	if f, err := s.openLog(); err == nil {
		f.Close()
		t.Fatal("opened a server log with a second name (a hard link)")
	}

	p := link("pg_hba.conf")
	if err := replaceFile(p, []byte("local all all scram-sha-256\n"), -1, -1); err != nil {
		t.Fatal(err)
	}
	untouched("replaceFile")
	if st, err := os.Lstat(p); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("%s after replaceFile: %v, %v; want a plain file", p, st, err)
	}
}
