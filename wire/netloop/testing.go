package netloop

import "testing"

// ForceInLoop marks r as relayed by a loop thread (on) or not, without a
// loop, for tests of steps that must not wait there. It panics outside
// test binaries.
func ForceInLoop(r *Relay, on bool) {
	if !testing.Testing() {
		panic("netloop: ForceInLoop outside a test")
	}
	r.inLoop.Store(on)
}
