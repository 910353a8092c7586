package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// machine describes where and with what the benchmark ran.
type machine struct {
	Date      string
	NProc     int
	CPU       string
	Kernel    string
	Go        string
	Postgres  string
	Pgbench   string
	PgBouncer string
	Floor     string // how the floor relay was built, when it runs
	Commit    string
	Settings  []string
	Load      string // /proc/loadavg at the start: other work on the machine skews results
}

func probeMachine(root string) machine {
	m := machine{
		Date:  time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		NProc: runtime.NumCPU(),
		CPU:   "unknown",
		Go:    runtime.Version(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	if out, err := exec.Command("pgbench", "--version").Output(); err == nil {
		m.Pgbench = strings.TrimSpace(string(out))
	}
	// Read-only: which commit the proxy was built from.
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
	}
	return m
}

func (m machine) write(w io.Writer) {
	fmt.Fprintf(w, "- date: %s\n", m.Date)
	fmt.Fprintf(w, "- machine: nproc=%d, CPU %s, Linux %s, %s\n", m.NProc, m.CPU, m.Kernel, m.Go)
	if m.Load != "" {
		fmt.Fprintf(w, "- load average at start: %s (anything well above 0 means other work shares the cores)\n", m.Load)
	}
	fmt.Fprintf(w, "- PostgreSQL %s (%s)\n", m.Postgres, m.Pgbench)
	fmt.Fprintf(w, "- server settings: %s\n", strings.Join(m.Settings, ", "))
	if m.PgBouncer != "" {
		fmt.Fprintf(w, "- %s\n", m.PgBouncer)
	}
	if m.Floor != "" {
		fmt.Fprintf(w, "- floor relay: %s\n", m.Floor)
	}
	if m.Commit != "" {
		fmt.Fprintf(w, "- proxy built from commit %s (plus any uncommitted changes in the tree)\n", m.Commit)
	}
}
