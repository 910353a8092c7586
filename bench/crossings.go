package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Kernel crossings per transaction, beside the CPU (cpu.go): a relay's
// cost is mostly kernel work, and two relays with the same throughput can
// differ in how many times they enter the kernel and how many times their
// threads sleep and wake. Two counters, per part, over the same window as
// the CPU:
//   - context switches: voluntary_ctxt_switches + nonvoluntary_ctxt_switches
//     of every thread (/proc/<pid>/task/<tid>/status), always read;
//   - system calls: perf stat counting the raw_syscalls:sys_enter
//     tracepoint of the part's processes (all their threads), when perf is
//     present and allowed (probePerf). Counting (not sampling) adds a
//     little to each system call of the processes it watches, and only to
//     theirs.

// crossUse is a measurement's crossings per transaction, per part.
type crossUse struct {
	OK         bool // switches were read
	Switches   [numCPUParts]float64
	SyscallsOK bool // perf counted the system calls
	Syscalls   [numCPUParts]float64
}

// switchesPerTx turns two readings into context switches per transaction.
func switchesPerTx(a, b cpuReading, tx float64) crossUse {
	if tx <= 0 {
		return crossUse{}
	}
	u := crossUse{OK: true}
	for part := range b.switches {
		u.Switches[part] = float64(sinceReading(a.switches[part], b.switches[part])) / tx
	}
	return u
}

// addThreadSwitches adds tid -> context switches for every thread of pid.
func addThreadSwitches(pid int, into map[int]int64) {
	addPerThread(pid, "status", parseSwitches, into)
}

// parseSwitches sums the voluntary and non-voluntary context switches of a
// /proc status file; both must be there.
func parseSwitches(status []byte) (int64, bool) {
	var sum int64
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "voluntary_ctxt_switches" && k != "nonvoluntary_ctxt_switches") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, false
		}
		sum += n
		found++
	}
	return sum, found == 2
}

// syscallEvent is the tracepoint every system call entry fires.
const syscallEvent = "raw_syscalls:sys_enter"

// probePerf tells whether perf can count this machine's system calls, and
// if not, why (for the report's notes).
func probePerf(ctx context.Context) (ok bool, why string) {
	if _, err := exec.LookPath("perf"); err != nil {
		return false, "perf not found: system calls per transaction not counted (apt-get install linux-perf)"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "perf", "stat", "-x,", "-e", syscallEvent, "--", "true").CombinedOutput()
	if err != nil {
		return false, fmt.Sprintf("perf cannot count %s here (%v: %s): system calls per transaction not counted", syscallEvent, err, oneLine(lastN(string(out), 200)))
	}
	if n, ok := parsePerfCount(string(out), syscallEvent); !ok || n <= 0 {
		return false, fmt.Sprintf("perf counted no %s for `true`: system calls per transaction not counted", syscallEvent)
	}
	return true, ""
}

// perfRun is one perf stat counting the system calls of some processes
// for a fixed time: while its command, sleep d, runs. (perf's
// duration_time event cannot time it: attached to processes, it adds up
// the time of every thread.)
type perfRun struct {
	cmd *exec.Cmd
	out bytes.Buffer
	d   time.Duration
}

// startSyscallCount counts the system calls of pids (every thread) for d.
// nil when there is nothing to count or perf did not start.
func startSyscallCount(ctx context.Context, pids []int, d time.Duration) *perfRun {
	if len(pids) == 0 {
		return nil
	}
	list := make([]string, len(pids))
	for i, p := range pids {
		list[i] = strconv.Itoa(p)
	}
	secs := strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
	r := &perfRun{d: d}
	r.cmd = exec.CommandContext(ctx, "perf", "stat", "-x,", "-e", syscallEvent,
		"-p", strings.Join(list, ","), "--", "sleep", secs)
	r.cmd.Stderr = &r.out
	r.cmd.WaitDelay = 5 * time.Second
	if err := r.cmd.Start(); err != nil {
		return nil
	}
	return r
}

// wait returns the system calls per second perf counted.
func (r *perfRun) wait() (perSecond float64, ok bool) {
	if r == nil {
		return 0, false
	}
	if err := r.cmd.Wait(); err != nil {
		return 0, false
	}
	n, ok := parsePerfCount(r.out.String(), syscallEvent)
	if !ok || r.d <= 0 {
		return 0, false
	}
	return n / r.d.Seconds(), true
}

// parsePerfCount reads event's count from perf stat -x, output. A process
// that did not run in the window is "<not counted>": zero.
func parsePerfCount(out, event string) (float64, bool) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 || f[2] != event {
			continue
		}
		if f[0] == "<not counted>" {
			return 0, true
		}
		n, err := strconv.ParseFloat(f[0], 64)
		return n, err == nil
	}
	return 0, false
}
