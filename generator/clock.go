package generator

import (
	"sync/atomic"
	"time"
)

// Clock reads the current time in ms since the snowflake epoch
// (EpochUnixMs). Implementations must be safe for concurrent use.
type Clock interface {
	NowMs() int64
}

// SystemClock reads the wall clock. It may go backwards (NTP steps); the
// generation rule tolerates that.
//
// time.Now reads both the wall and the monotonic clock, which would be
// most of the cost of an ID, while time.Since on a Time carrying a
// monotonic reading costs one read (bench/README.md, "Figures behind
// design choices"). So NowMs reads the monotonic clock and adds it to a wall-clock base taken at most
// sysResync ago: a step of the wall clock is followed within sysResync, and
// NTP slewing changes both clocks alike.
type SystemClock struct{}

// sysResync bounds how long a wall-clock step goes unnoticed.
const sysResync = time.Second

type clockBase struct {
	t        time.Time // with its monotonic reading
	unixNano int64
}

var sysBase atomic.Pointer[clockBase]

// NowMs returns the wall-clock time in ms since the snowflake epoch.
func (SystemClock) NowMs() int64 {
	b := sysBase.Load()
	if b != nil {
		if d := time.Since(b.t); d < sysResync {
			return (b.unixNano+int64(d))/int64(time.Millisecond) - EpochUnixMs
		}
	}
	// First call, or time to re-read the wall clock. Concurrent callers
	// may each store a base; any of them is right.
	now := time.Now()
	sysBase.Store(&clockBase{t: now, unixNano: now.UnixNano()})
	return now.UnixMilli() - EpochUnixMs
}

// FakeClock is a Clock that moves only when told to. It is safe for
// concurrent use; the zero value reads 0 (the snowflake epoch).
type FakeClock struct {
	ms atomic.Int64
}

// NewFakeClock returns a FakeClock reading ms.
func NewFakeClock(ms int64) *FakeClock {
	c := &FakeClock{}
	c.ms.Store(ms)
	return c
}

// NowMs returns the current fake time.
func (c *FakeClock) NowMs() int64 { return c.ms.Load() }

// Set moves the clock to ms; it may move backwards.
func (c *FakeClock) Set(ms int64) { c.ms.Store(ms) }

// Advance moves the clock by d (truncated to ms; negative moves it back).
func (c *FakeClock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }
