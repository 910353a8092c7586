package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pgbenchSlack is how long a pgbench run may take beyond its -T duration
// (connection set-up, a stuck target) before it is killed.
const pgbenchSlack = 60 * time.Second

// measurement is one pgbench run's result.
type measurement struct {
	TPS   float64
	LatMs float64  // latency average, ms
	CPU   cpuUse   // CPU per transaction, when it was read (cpu.go)
	Cross crossUse // kernel crossings per transaction (crossings.go)
	Err   error
}

// pgbenchRun describes one pgbench invocation.
type pgbenchRun struct {
	Port     int
	Script   string // file for -f; empty with Builtin
	Builtin  string // "-S" for the built-in select-only script
	Mode     string // simple or prepared
	Clients  int
	Duration time.Duration
	SSLMode  string // libpq's sslmode (clientSSLMode); "" is disable
}

func (r pgbenchRun) args() []string {
	secs := int(r.Duration.Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	jobs := min(r.Clients, 2)
	a := []string{"-n", "-M", r.Mode, "-c", strconv.Itoa(r.Clients), "-j", strconv.Itoa(jobs),
		"-T", strconv.Itoa(secs), "-h", "127.0.0.1", "-p", strconv.Itoa(r.Port), "-U", "postgres"}
	if r.Builtin != "" {
		a = append(a, r.Builtin)
	} else {
		a = append(a, "-f", r.Script)
	}
	return append(a, benchDB)
}

// env is what pgbench gets on top of the harness's environment.
func (r pgbenchRun) env() []string {
	sslmode := r.SSLMode
	if sslmode == "" {
		sslmode = "disable"
	}
	return []string{"PGSSLMODE=" + sslmode, "PGCONNECT_TIMEOUT=10"}
}

// runPgbench runs pgbench and parses its summary. A failed run (non-zero
// exit, aborted clients, no summary) returns its error in the measurement.
// With cpu, and a run of at least cpuMinDuration, it also reads the CPU
// of cpu's parts at 20% and 90% of the run (cpu.go).
func runPgbench(ctx context.Context, r pgbenchRun, cpu *cpuParts) measurement {
	ctx, cancel := context.WithTimeout(ctx, r.Duration+pgbenchSlack)
	defer cancel()
	cmd := exec.CommandContext(ctx, "pgbench", r.args()...)
	cmd.Env = append(os.Environ(), r.env()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return measurement{Err: fmt.Errorf("pgbench: %w", err)}
	}
	var first, second cpuReading
	var window time.Duration
	var counting [numCPUParts]*perfRun
	if cpu != nil && r.Duration >= cpuMinDuration {
		parts := *cpu
		parts.clientPID = cmd.Process.Pid
		if sleepCtx(ctx, r.Duration/5) {
			t0 := time.Now()
			first = parts.read()
			if parts.perf {
				for part, pids := range parts.pids() {
					counting[part] = startSyscallCount(ctx, pids, r.Duration*7/10)
				}
			}
			if sleepCtx(ctx, r.Duration*7/10) {
				window = time.Since(t0)
				second = parts.read()
			}
		}
	}
	var perSecond [numCPUParts]float64
	counted := counting[partServer] != nil
	for part, c := range counting {
		if c == nil {
			continue // no relay on a direct route
		}
		n, ok := c.wait()
		perSecond[part], counted = n, counted && ok
	}
	err := cmd.Wait()
	if ctx.Err() != nil {
		return measurement{Err: fmt.Errorf("pgbench killed: %w", context.Cause(ctx))}
	}
	m := parsePgbench(stdout.String())
	if err != nil || m.Err != nil {
		msg := pgbenchError(stderr.String())
		if msg == "" && m.Err != nil {
			msg = m.Err.Error()
		}
		if msg == "" {
			msg = fmt.Sprint(err)
		}
		return measurement{Err: errors.New(msg)}
	}
	if window > 0 {
		m.CPU = perTx(first, second, m.TPS*window.Seconds())
		m.Cross = switchesPerTx(first, second, m.TPS*window.Seconds())
		if counted && m.TPS > 0 {
			m.Cross.SyscallsOK = true
			for part := range perSecond {
				m.Cross.Syscalls[part] = perSecond[part] / m.TPS
			}
		}
	}
	return m
}

// cpuMinDuration is the shortest run whose CPU is read: the window must
// leave out connection set-up and teardown.
const cpuMinDuration = 2 * time.Second

// sleepCtx waits d and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

var (
	tpsRe = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	latRe = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
	// failedRe matches PostgreSQL 15's count of failed transactions.
	failedRe = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
)

// parsePgbench extracts TPS and mean latency from pgbench's stdout.
func parsePgbench(out string) measurement {
	t := tpsRe.FindStringSubmatch(out)
	l := latRe.FindStringSubmatch(out)
	if t == nil || l == nil {
		return measurement{Err: fmt.Errorf("no tps/latency in pgbench output: %s", oneLine(lastN(out, 200)))}
	}
	if f := failedRe.FindStringSubmatch(out); f != nil && f[1] != "0" {
		return measurement{Err: fmt.Errorf("%s failed transactions", f[1])}
	}
	tps, err1 := strconv.ParseFloat(t[1], 64)
	lat, err2 := strconv.ParseFloat(l[1], 64)
	if err := errors.Join(err1, err2); err != nil {
		return measurement{Err: fmt.Errorf("parse pgbench output: %w", err)}
	}
	return measurement{TPS: tps, LatMs: lat}
}

// pgbenchError picks the most telling line of pgbench's stderr: the server's
// ERROR text when there is one, else the first error line.
func pgbenchError(stderr string) string {
	var first string
	for _, line := range strings.Split(stderr, "\n") {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, "ERROR:"); i >= 0 {
			return oneLine(line[i:])
		}
		if first == "" && strings.Contains(strings.ToLower(line), "error") {
			first = line
		}
	}
	first = strings.TrimPrefix(first, "pgbench: error: ")
	return oneLine(first)
}
