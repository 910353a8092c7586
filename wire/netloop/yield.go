package netloop

import (
	"runtime"
	"sync/atomic"
	"time"
)

// schedPassEvery is how often a busy loop thread passes through the Go
// scheduler: well inside the 10 ms after which the runtime counts a
// goroutine that has not as one to preempt.
const schedPassEvery = 4 * time.Millisecond

// schedPass makes a loop thread's goroutine pass through the Go scheduler
// every few milliseconds; the loop thread owns it.
//
// A loop goroutine never parks: it waits in the kernel (io_uring_enter,
// epoll_wait) holding its P, and goes back to the kernel as soon as a
// batch is done. The runtime's monitor thread (sysmon) leaves a P in a
// system call alone while another P is idle, unless the goroutine on it
// has not been through the scheduler for 10 ms: from then on it tries to
// preempt the goroutine, takes the P back at every one of its ticks that
// finds the thread in the kernel, and, having found something to do,
// ticks again 20 µs later. Under load the monitor then runs thousands of
// times a second, on a core the server and the clients need, and the loop
// comes back from its waits on the slow path that finds it a P. A
// runtime.Gosched (the P goes to another thread, which hands it back with
// the goroutine) every schedPassEvery costs a few thread wake-ups and
// keeps the monitor asleep (bench/README.md, "Figures behind design
// choices").
type schedPass struct {
	last time.Time
}

// due reports whether a pass is due at now, and if so starts the next
// interval from now.
func (p *schedPass) due(now time.Time) bool {
	if now.Sub(p.last) < schedPassEvery {
		return false
	}
	p.last = now
	return true
}

// maybe passes through the scheduler if a pass is due. The loop calls it
// once per batch, before it waits.
func (p *schedPass) maybe(lp *Loop) {
	if !p.due(time.Now()) {
		return
	}
	runtime.Gosched()
	if h := testHookSchedPass.Load(); h != nil {
		(*h)(lp)
	}
}

// testHookSchedPass, when set by a test, runs on the loop thread after
// each pass through the scheduler.
var testHookSchedPass atomic.Pointer[func(*Loop)]
