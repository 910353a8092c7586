package netloop

import "testing"

// ForceInLoop marks r as relayed by a loop thread (on) or not, without a
// loop, for tests of steps that must not wait there. It panics outside
// test binaries.
func ForceInLoop(r *Relay, on bool) {
	mustTest("ForceInLoop")
	r.inLoop.Store(on)
}

func mustTest(what string) {
	if !testing.Testing() {
		panic("netloop: " + what + " outside a test")
	}
}
