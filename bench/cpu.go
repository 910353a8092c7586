package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Where the CPU of a measurement goes: the harness reads the run time of
// every thread of three parts (/proc/<pid>/task/<tid>/schedstat: ns,
// kept by the scheduler, where /proc/<pid>/stat counts clock ticks),
// twice during a pgbench run, and divides the difference by the
// transactions in between. The parts:
//   - server: the postmaster and every process it forked (backends, WAL
//     writer, checkpointer...);
//   - relay: the proxy or PgBouncer, for the targets that go through one;
//   - client: pgbench.
//
// The window starts after pgbench has connected and ends before it
// disconnects, so that the backends' start-up and exit do not count.
// Threads that exist only at the second reading count whole (they started
// inside the window); threads gone by then are lost (none in steady
// state).

// cpuParts are the processes a measurement's CPU is read from.
type cpuParts struct {
	serverPID int  // postmaster
	relayPID  int  // 0 for direct routes
	clientPID int  // pgbench
	perf      bool // count system calls with perf (crossings.go)
}

// cpuReading is one reading of every thread's run time (ns) and context
// switches (crossings.go), per part.
type cpuReading struct {
	ns       [numCPUParts]map[int]int64
	switches [numCPUParts]map[int]int64
}

const (
	partServer = iota
	partRelay
	partClient
	numCPUParts
)

// cpuUse is a measurement's CPU per transaction, in µs, per part.
type cpuUse struct {
	OK                    bool
	Server, Relay, Client float64
}

// read takes one reading. A part whose process is gone reads empty.
func (p cpuParts) read() cpuReading {
	var r cpuReading
	for i := range r.ns {
		r.ns[i], r.switches[i] = map[int]int64{}, map[int]int64{}
	}
	for part, pids := range p.pids() {
		for _, pid := range pids {
			addThreadTimes(pid, r.ns[part])
			addThreadSwitches(pid, r.switches[part])
		}
	}
	return r
}

// pids lists the processes of each part now: the server's backends come
// and go with the clients.
func (p cpuParts) pids() [numCPUParts][]int {
	var out [numCPUParts][]int
	out[partServer] = append([]int{p.serverPID}, childrenOf(p.serverPID)...)
	if p.relayPID > 0 {
		out[partRelay] = []int{p.relayPID}
	}
	out[partClient] = []int{p.clientPID}
	return out
}

// perTx is the CPU per transaction, in µs, between readings a and b,
// over tx transactions.
func perTx(a, b cpuReading, tx float64) cpuUse {
	if tx <= 0 {
		return cpuUse{}
	}
	var us [numCPUParts]float64
	for part := range b.ns {
		us[part] = float64(sinceReading(a.ns[part], b.ns[part])) / 1e3 / tx
	}
	return cpuUse{OK: true, Server: us[partServer], Relay: us[partRelay], Client: us[partClient]}
}

// sinceReading sums per thread what b gained over a; a thread born in
// between counts whole.
func sinceReading(a, b map[int]int64) int64 {
	var sum int64
	for tid, v := range b {
		sum += v - a[tid]
	}
	return sum
}

// addThreadTimes adds tid -> run time (ns) for every thread of pid.
func addThreadTimes(pid int, into map[int]int64) {
	addPerThread(pid, "schedstat", parseSchedstat, into)
}

// addPerThread adds tid -> parse(/proc/<pid>/task/<tid>/<file>) for every
// thread of pid whose file parses.
func addPerThread(pid int, file string, parse func([]byte) (int64, bool), into map[int]int64) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), file))
		if err != nil {
			continue
		}
		if v, ok := parse(b); ok {
			into[tid] = v
		}
	}
}

// parseSchedstat returns the first field of a schedstat line: time spent
// on the CPU, in ns.
func parseSchedstat(b []byte) (int64, bool) {
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0, false
	}
	ns, err := strconv.ParseInt(string(f[0]), 10, 64)
	return ns, err == nil
}

// childrenOf lists the processes whose parent is ppid.
func childrenOf(ppid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if parent, ok := parentFromStat(b); ok && parent == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// parentFromStat reads the ppid field of /proc/<pid>/stat. The command
// name, in parentheses, may contain spaces and parentheses, so fields are
// counted from the last ')'.
func parentFromStat(b []byte) (int, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:])) // state, ppid, ...
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// postmasterPID reads the first line of the data directory's
// postmaster.pid.
func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0
	}
	return pid
}
