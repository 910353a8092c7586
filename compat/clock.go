package compat

import (
	"sync/atomic"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

// serverBoundClock is the generator's clock: the proxy's own, held back by
// as much as it was last seen ahead of the server's.
//
// Why: the shim dates its IDs by the server's clock. A session that gets a
// fast-path ID and then a shim ID must see them increase, as with the
// extension; the shim issues above the sequence's last_value, which trails
// the fast path by up to one lease, and above the current millisecond. So
// the fast-path ID must not be dated after the server's clock at the time
// the shim runs. Each lease reports the server's clock (read inside the
// lease, so before the reply arrived): the proxy's clock read after the
// reply, minus that, bounds how far ahead the proxy runs, by at least
// that much. A clock behind the server's needs nothing.
type serverBoundClock struct {
	base generator.Clock
	lag  atomic.Int64 // ms, >= 0
}

func newServerBoundClock(base generator.Clock) *serverBoundClock {
	if base == nil {
		base = generator.SystemClock{}
	}
	return &serverBoundClock{base: base}
}

// NowMs implements generator.Clock.
func (c *serverBoundClock) NowMs() int64 { return c.base.NowMs() - c.lag.Load() }

// observe takes in a reading of the server's clock made before now.
func (c *serverBoundClock) observe(serverMs int64) {
	c.lag.Store(max(0, c.base.NowMs()-serverMs))
}
