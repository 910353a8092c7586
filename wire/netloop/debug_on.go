//go:build netloopdebug

package netloop

// The netloopdebug build tag turns the loop-thread check on outside tests.
const debugTag = true
