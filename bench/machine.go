package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// machine describes where and with what the benchmark ran.
type machine struct {
	Date      string
	NProc     int
	CPU       string
	Kernel    string
	Virt      string // what the machine says about virtualisation (virtualisation)
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
	m.Virt = virtualisation()
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
	if m.Virt != "" {
		fmt.Fprintf(w, "- virtualisation: %s\n", m.Virt)
	}
	if m.Load != "" {
		fmt.Fprintf(w, "- load average at start: %s (anything well above 0 means other work shares the cores)\n", m.Load)
	}
	fmt.Fprintf(w, "- PostgreSQL %s (%s)\n", m.Postgres, m.Pgbench)
	fmt.Fprintf(w, "- server settings: %s\n", strings.Join(m.Settings, ", "))
	if m.PgBouncer != "" {
		fmt.Fprintf(w, "- %s\n", m.PgBouncer)
	}
	if m.Floor != "" {
		fmt.Fprintf(w, "- floor relays: %s\n", m.Floor)
	}
	if m.Commit != "" {
		fmt.Fprintf(w, "- proxy built from commit %s (plus any uncommitted changes in the tree)\n", m.Commit)
	}
}

// virtualisation gathers what the machine tells about the layers under it,
// each source named, since none is reliable alone (systemd-detect-virt
// guesses the hypervisor from CPUID, the kernel names the one it detected):
// the CPU's hypervisor flag, the kernel's "Hypervisor detected" line, and
// systemd-detect-virt for virtual machines and containers.
func virtualisation() string {
	var parts []string
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		flag := "no"
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
				if slices.Contains(strings.Fields(v), "hypervisor") {
					flag = "yes"
				}
				break
			}
		}
		parts = append(parts, "CPU hypervisor flag "+flag)
	}
	if out, err := exec.Command("dmesg").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if _, v, ok := strings.Cut(line, "Hypervisor detected:"); ok {
				parts = append(parts, "kernel: hypervisor "+strings.TrimSpace(v))
				break
			}
		}
	}
	for _, kind := range []string{"vm", "container"} {
		// Exits 1 printing "none" when it finds nothing.
		out, _ := exec.Command("systemd-detect-virt", "--"+kind).Output()
		if v := strings.TrimSpace(string(out)); v != "" {
			parts = append(parts, "systemd-detect-virt --"+kind+": "+v)
		}
	}
	return strings.Join(parts, "; ")
}
