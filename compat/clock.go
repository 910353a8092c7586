package compat

import (
	"sync/atomic"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

// serverBoundClock is the generator's clock: the proxy's own, held back by
// as much as it was last seen ahead of the server's, and never past the
// server's clock as last read plus the time elapsed since on the
// monotonic clock.
//
// Why: the shim dates its IDs by the server's clock. A session that gets a
// fast-path ID and then a shim ID must see them increase, as with the
// extension; the shim issues above the sequence's last_value, which trails
// the fast path by up to one lease, and above the current millisecond. So
// the fast-path ID must not be dated after the server's clock at the time
// the shim runs. Each lease reports the server's clock (read inside the
// lease, so before the reply arrived): the proxy's clock read after the
// reply, minus that, bounds how far ahead the proxy runs, by at least
// that much. A clock behind the server's needs nothing. The proxy's clock
// stepping forward between two leases would carry the generator ahead of
// the server's until the next one (regression: in the chaos test a shim ID
// came out below a fast-path ID dated 3 s later, on one connection); the
// monotonic bound does not move with such a step.
type serverBoundClock struct {
	base generator.Clock
	lag  atomic.Int64 // ms, >= 0
	seen atomic.Pointer[serverReading]
}

// serverReading is the server's clock as a lease read it, and when the
// proxy received it.
type serverReading struct {
	ms int64
	at time.Time // with its monotonic reading
}

func newServerBoundClock(base generator.Clock) *serverBoundClock {
	if base == nil {
		base = generator.SystemClock{}
	}
	return &serverBoundClock{base: base}
}

// NowMs implements generator.Clock.
func (c *serverBoundClock) NowMs() int64 {
	now := c.base.NowMs() - c.lag.Load()
	if r := c.seen.Load(); r != nil {
		now = min(now, r.ms+time.Since(r.at).Milliseconds())
	}
	return now
}

// observe takes in a reading of the server's clock made before now.
func (c *serverBoundClock) observe(serverMs int64) {
	c.lag.Store(max(0, c.base.NowMs()-serverMs))
	c.seen.Store(&serverReading{ms: serverMs, at: time.Now()})
}
