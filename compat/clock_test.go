package compat

import (
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

// The generator's clock stays at or behind the server's as last read plus
// the time elapsed since, when the proxy's clock steps forward between two
// leases (regression: a 3 s step made fast-path IDs run 3 s ahead of the
// shim's until the next lease, and a shim ID came out below the fast-path
// ID before it on one connection). Behind the server's, the proxy's own
// clock, held back, still rules.
func TestServerBoundClockIgnoresAStepForward(t *testing.T) {
	base := generator.NewFakeClock(1_000_000)
	c := newServerBoundClock(base)
	start := time.Now()
	c.observe(1_000_000) // the server and the proxy agree
	base.Set(1_003_000)  // the proxy's clock steps 3 s forward
	if now, bound := c.NowMs(), 1_000_000+time.Since(start).Milliseconds(); now > bound {
		t.Fatalf("after a 3 s step: %d, past the server's clock %d", now, bound)
	}
	base.Set(990_000) // and 13 s back
	if now := c.NowMs(); now != 990_000 {
		t.Fatalf("behind the server's clock: %d, want the proxy's own 990000", now)
	}
	base.Set(1_000_500)
	c.observe(1_000_000) // the proxy now runs 500 ms ahead: held back
	if now := c.NowMs(); now > 1_000_000+time.Since(start).Milliseconds() {
		t.Fatalf("500 ms ahead: %d", now)
	}
}
