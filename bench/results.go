package main

import (
	"fmt"
	"sort"
)

// groupKey identifies a table row: one workload, protocol mode and client
// count.
type groupKey struct {
	Workload string
	Mode     string
	Clients  int
}

// results holds every measurement of the run, by row and column.
type results struct {
	order []groupKey
	rows  map[groupKey]*[numColumns][]measurement
	runs  []runRecord
}

// runRecord is one pgbench run, for the per-run CSV.
type runRecord struct {
	Key    groupKey
	Col    column
	Round  int
	Result measurement
}

func newResults() *results {
	return &results{rows: map[groupKey]*[numColumns][]measurement{}}
}

func (r *results) add(k groupKey, c column, round int, m measurement) {
	row, ok := r.rows[k]
	if !ok {
		row = new([numColumns][]measurement)
		r.rows[k] = row
		r.order = append(r.order, k)
	}
	row[c] = append(row[c], m)
	r.runs = append(r.runs, runRecord{k, c, round, m})
}

// summary is the median of one cell's successful runs.
type summary struct {
	Present bool // the workload has this column
	OK      int  // successful runs
	Runs    int
	TPS     float64
	LatMs   float64
	CPU     cpuUse   // medians, per part, of the runs whose CPU was read
	Cross   crossUse // medians, per part, of the runs whose crossings were read
	Err     error    // the first error, when a run failed
}

func summarize(ms []measurement) summary {
	s := summary{Present: len(ms) > 0, Runs: len(ms)}
	var tps, lat []float64
	var cpu, switches, syscalls [numCPUParts][]float64
	for _, m := range ms {
		if m.Err != nil {
			if s.Err == nil {
				s.Err = m.Err
			}
			continue
		}
		tps = append(tps, m.TPS)
		lat = append(lat, m.LatMs)
		if m.CPU.OK {
			cpu[partServer] = append(cpu[partServer], m.CPU.Server)
			cpu[partRelay] = append(cpu[partRelay], m.CPU.Relay)
			cpu[partClient] = append(cpu[partClient], m.CPU.Client)
		}
		for part := range switches {
			if m.Cross.OK {
				switches[part] = append(switches[part], m.Cross.Switches[part])
			}
			if m.Cross.SyscallsOK {
				syscalls[part] = append(syscalls[part], m.Cross.Syscalls[part])
			}
		}
	}
	s.OK = len(tps)
	if s.OK > 0 {
		s.TPS, s.LatMs = median(tps), median(lat)
	}
	if len(cpu[partServer]) > 0 {
		s.CPU = cpuUse{OK: true, Server: median(cpu[partServer]), Relay: median(cpu[partRelay]), Client: median(cpu[partClient])}
	}
	for part := range switches {
		if len(switches[part]) > 0 {
			s.Cross.OK = true
			s.Cross.Switches[part] = median(switches[part])
		}
		if len(syscalls[part]) > 0 {
			s.Cross.SyscallsOK = true
			s.Cross.Syscalls[part] = median(syscalls[part])
		}
	}
	return s
}

// median of xs (not modified); 0 when empty.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ratio is a/b of two summaries' TPS, or "" when either is missing.
func ratio(a, b summary) (float64, bool) {
	if a.OK == 0 || b.OK == 0 || b.TPS == 0 {
		return 0, false
	}
	return a.TPS / b.TPS, true
}

// addedLatencyRatio compares the mean latency the proxy adds over direct
// with what PgBouncer adds: (proxy - direct) / (pgbouncer - direct).
func addedLatencyRatio(proxy, direct, pgb summary) (float64, bool) {
	if proxy.OK == 0 || direct.OK == 0 || pgb.OK == 0 {
		return 0, false
	}
	d := pgb.LatMs - direct.LatMs
	if d <= 0 {
		return 0, false
	}
	return (proxy.LatMs - direct.LatMs) / d, true
}

func fmtRatio(x float64, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x)
}
