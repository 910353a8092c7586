package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-23T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := versionLine(info, true), "snowflake-proxy v1.4.0 commit 0123456789ab+dirty 2026-11-23T10:00:00Z go1.26.8"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := versionLine(&debug.BuildInfo{GoVersion: "go1.26.8"}, true); got != "snowflake-proxy (devel) go1.26.8" {
		t.Fatalf("no module version: %q", got)
	}
	if got := versionLine(nil, false); got != "snowflake-proxy (unknown)" {
		t.Fatalf("no build information: %q", got)
	}
}

// TestVersionOfBuiltBinary: a binary built from this checkout names its
// commit and Go version. Go stamps the commit only when the module's
// .git is a directory; in a git worktree (.git is a file) the binary
// must say "(devel)" and still name the Go version.
func TestVersionOfBuiltBinary(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git not found: the build information needs it")
	}
	bin := filepath.Join(t.TempDir(), "snowflake-proxy")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=auto")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(string(out))
	if !strings.Contains(line, "go1.") {
		t.Fatalf("version %q does not name the Go version", line)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !st.IsDir() {
		if !strings.HasPrefix(line, "snowflake-proxy (devel) go1.") {
			t.Fatalf("in a git worktree, version %q: want (devel) and the Go version", line)
		}
		return
	}
	rev, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line, "commit "+strings.TrimSpace(string(rev))) {
		t.Fatalf("version %q does not name commit %s", line, rev)
	}
}
