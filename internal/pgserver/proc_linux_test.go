//go:build linux

package pgserver_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// socketInodes are the inodes of the sockets process pid holds open.
func socketInodes(t *testing.T, pid int) map[string]bool {
	t.Helper()
	fds, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/fd/*")
	if err != nil || len(fds) == 0 {
		t.Fatalf("no descriptors of pid %d: %v", pid, err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	return inodes
}

// tcpListeners are the local addresses (hex, as in /proc/net/tcp*) of the
// TCP sockets in LISTEN state that process pid holds.
func tcpListeners(t *testing.T, pid int) []string {
	t.Helper()
	mine := socketInodes(t, pid)
	var addrs []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 9 && f[3] == "0A" && mine[f[9]] {
				addrs = append(addrs, f[1])
			}
		}
	}
	return addrs
}

// checkNoTCP asserts that the postmaster pid listens on no TCP address, and
// (so that the scan is known to see its sockets) that it holds the Unix
// socket at socketPath.
func checkNoTCP(t *testing.T, pid int, socketPath string) {
	t.Helper()
	if addrs := tcpListeners(t, pid); len(addrs) > 0 {
		t.Errorf("the postmaster listens on TCP: %v", addrs)
	}
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	mine := socketInodes(t, pid)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 8 && f[7] == socketPath && mine[f[6]] {
			return
		}
	}
	t.Errorf("the postmaster holds no socket at %s: the scan sees none of its sockets", socketPath)
}
