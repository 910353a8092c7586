package main

import (
	"context"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

func TestParseSwitches(t *testing.T) {
	status := "Name:\tpostgres\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n"
	if n, ok := parseSwitches([]byte(status)); !ok || n != 127 {
		t.Fatalf("got %d %v, want 127", n, ok)
	}
	if _, ok := parseSwitches([]byte("voluntary_ctxt_switches:\t1\n")); ok {
		t.Fatal("a status without the non-voluntary count parsed")
	}
	if _, ok := parseSwitches([]byte("voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t1\n")); ok {
		t.Fatal("a malformed count parsed")
	}
}

func TestSwitchesPerTx(t *testing.T) {
	var a, b cpuReading
	for part := range a.switches {
		a.switches[part], b.switches[part] = map[int]int64{}, map[int]int64{}
	}
	a.switches[partRelay][10] = 100
	b.switches[partRelay][10] = 400
	b.switches[partRelay][11] = 100 // born in the window: counts whole
	b.switches[partServer][1] = 2000
	u := switchesPerTx(a, b, 100)
	if !u.OK || u.Switches[partRelay] != 4 || u.Switches[partServer] != 20 || u.Switches[partClient] != 0 {
		t.Fatalf("got %+v, want relay 4, server 20, client 0 per transaction", u)
	}
	if switchesPerTx(a, b, 0).OK {
		t.Fatal("no transactions gave a figure")
	}
}

func TestParsePerfCount(t *testing.T) {
	out := "\n1234,,raw_syscalls:sys_enter,2000000,100.00,,\n500000000,ns,duration_time,500000000,100.00,,\n"
	if n, ok := parsePerfCount(out, syscallEvent); !ok || n != 1234 {
		t.Fatalf("got %v %v", n, ok)
	}
	if n, ok := parsePerfCount(out, "duration_time"); !ok || n != 5e8 {
		t.Fatalf("got %v %v", n, ok)
	}
	if n, ok := parsePerfCount("<not counted>,,raw_syscalls:sys_enter,0,100.00,,", syscallEvent); !ok || n != 0 {
		t.Fatalf("not counted: got %v %v, want 0 true", n, ok)
	}
	if _, ok := parsePerfCount("Error: no permission", syscallEvent); ok {
		t.Fatal("an error parsed as a count")
	}
}

// TestCountOwnSyscalls counts this process's system calls while it makes
// a known number of them, where perf can count at all.
func TestCountOwnSyscalls(t *testing.T) {
	pgtest.Tool(t, "perf")
	ok, why := probePerf(context.Background())
	if !ok {
		pgtest.CannotRun(t, "%s", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := startSyscallCount(ctx, []int{os.Getpid()}, time.Second)
	if r == nil {
		t.Fatal("perf did not start")
	}
	// Three threads read /dev/null all through perf's second, so that
	// whenever it attaches it sees reads of every thread (regression: the
	// rate was divided by perf's duration_time, which adds up the time of
	// every thread, and came out a few times too low).
	var total atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Second)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			f, err := os.Open("/dev/null")
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			buf := make([]byte, 1)
			n := int64(0)
			for time.Now().Before(deadline) {
				_, _ = f.Read(buf)
				n++
			}
			total.Add(n)
		}()
	}
	wg.Wait()
	n := float64(total.Load())
	perSecond, ok := r.wait()
	if !ok {
		t.Fatalf("perf counted nothing: %s", strings.TrimSpace(r.out.String()))
	}
	// perf attaches a moment after the reads start, and the runtime makes
	// system calls of its own: between half and three times the reads.
	if perSecond < n/2 || perSecond > 3*n {
		t.Fatalf("%.0f system calls per second counted while making %.0f reads in a second", perSecond, n)
	}
}
