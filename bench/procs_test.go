package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Regression: daemons were started in the harness's session (Setpgid), so
// under the kernel's per-session scheduling groups the relay measured shared
// a group with pgbench while PostgreSQL had its own (procs.go). Each daemon
// must lead a session of its own, and stop must still end it.
func TestStartProcLeadsItsOwnSession(t *testing.T) {
	p, err := startProc("sleeper", filepath.Join(t.TempDir(), "sleep.log"), nil, "sleep", "60")
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	pid := p.cmd.Process.Pid
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses: state, ppid,
	// pgrp, session.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 4 {
		t.Fatalf("short /proc stat: %q", stat)
	}
	if want := strconv.Itoa(pid); f[2] != want || f[3] != want {
		t.Errorf("pgrp %s, session %s; want both %s (the daemon's own)", f[2], f[3], want)
	}
	p.stop()
	if dead, _ := p.exited(); !dead {
		t.Error("stop returned with the daemon still running")
	}
}
