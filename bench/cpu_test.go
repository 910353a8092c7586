package main

import (
	"os"
	"strings"
	"testing"
)

func TestParseSchedstat(t *testing.T) {
	if ns, ok := parseSchedstat([]byte("123456789 2000 17\n")); !ok || ns != 123456789 {
		t.Fatalf("got %d %v", ns, ok)
	}
	if _, ok := parseSchedstat([]byte("")); ok {
		t.Fatal("empty schedstat parsed")
	}
}

func TestParentFromStat(t *testing.T) {
	// A command name with a space and a ')' must not shift the fields.
	stat := "4242 (postgres: a) b) S 4100 4242 4242 0 -1 4194560 0 0 0 0"
	if ppid, ok := parentFromStat([]byte(stat)); !ok || ppid != 4100 {
		t.Fatalf("got %d %v", ppid, ok)
	}
	if _, ok := parentFromStat([]byte("garbage")); ok {
		t.Fatal("garbage parsed")
	}
}

func TestPerTx(t *testing.T) {
	reading := func(server, relay, client map[int]int64) cpuReading {
		return cpuReading{ns: [numCPUParts]map[int]int64{server, relay, client}}
	}
	a := reading(map[int]int64{1: 1_000_000, 2: 5_000_000}, map[int]int64{10: 0}, map[int]int64{20: 100})
	// Thread 2 ended (lost), thread 3 started inside the window (counts
	// whole), thread 1 ran 2 ms more.
	b := reading(map[int]int64{1: 3_000_000, 3: 1_000_000}, map[int]int64{10: 4_000_000}, map[int]int64{20: 1_000_100})
	u := perTx(a, b, 1000)
	if !u.OK || u.Server != 3 || u.Relay != 4 || u.Client != 1 {
		t.Fatalf("got %+v, want 3/4/1 µs per transaction", u)
	}
	if u := perTx(a, b, 0); u.OK {
		t.Fatal("no transactions gave a CPU figure")
	}
}

func TestReadOwnThreads(t *testing.T) {
	own := map[int]int64{}
	addThreadTimes(os.Getpid(), own)
	if len(own) == 0 {
		t.Fatal("no thread of this process read")
	}
	var total int64
	for _, ns := range own {
		total += ns
	}
	if total <= 0 {
		t.Fatalf("this process has run %d ns", total)
	}
}

func TestCPUTable(t *testing.T) {
	res := newResults()
	k := groupKey{"select1", "prepared", 8}
	res.add(k, colProxy, 0, measurement{TPS: 1, LatMs: 1, CPU: cpuUse{OK: true, Server: 14, Relay: 15, Client: 11}})
	res.add(k, colProxy, 1, measurement{TPS: 1, LatMs: 1, CPU: cpuUse{OK: true, Server: 16, Relay: 17, Client: 9}})
	res.add(k, colDirect, 0, measurement{TPS: 1, LatMs: 1})
	rep := newReport(res, workloads, false, false, false)
	var b strings.Builder
	if !rep.writeCPUMarkdown(&b) {
		t.Fatal("no table written")
	}
	if !strings.Contains(b.String(), "15.0 + 16.0 + 10.0 = 41.0") {
		t.Fatalf("proxy cell missing (medians 15/16/10):\n%s", b.String())
	}
	empty := newResults()
	empty.add(k, colDirect, 0, measurement{TPS: 1, LatMs: 1})
	if newReport(empty, workloads, false, false, false).writeCPUMarkdown(&strings.Builder{}) {
		t.Fatal("a table without CPU figures was written")
	}
}
