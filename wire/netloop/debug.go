package netloop

import (
	"sync"
	"sync/atomic"
	"testing"
)

// The loop-thread rule: nothing on a loop thread may wait, or every
// session of the loop stalls behind it. Steps decide first and return
// ErrHandover instead; MayWait is the check that they did.
//
// debug turns the check on: in test binaries, so that the whole test
// suite runs with it, and in builds with the netloopdebug tag. Off, MayWait
// is a load of this flag and a branch.
var debug = testing.Testing() || debugTag

// loopThreads holds the OS thread ids of the running loop threads (debug
// only); loopCount how many there are, so that MayWait looks no further
// while there is none. A loop goroutine is locked to its thread, and no
// other goroutine runs there meanwhile: the thread tells the goroutine.
var (
	loopThreads sync.Map // int -> struct{}
	loopCount   atomic.Int32
)

// enterLoopThread records the calling goroutine, locked to its thread, as
// a loop thread until the returned function runs.
func enterLoopThread() (leave func()) {
	if !debug {
		return func() {}
	}
	id := threadID()
	loopThreads.Store(id, struct{}{})
	loopCount.Add(1)
	return func() {
		loopThreads.Delete(id)
		loopCount.Add(-1)
	}
}

// MayWait marks a point that can wait: for a lease or the generator, a
// hidden query's response, a channel or lock a loop thread must not block
// on, a blocking socket read or write. In a debug build it panics when it
// runs on a loop thread, naming what would have waited.
func MayWait(what string) {
	if debug && onLoopThread() {
		panic("netloop: " + what + " can wait, and runs on an event loop's thread: " +
			"every session of that loop would stall; the step must return ErrHandover before it")
	}
}

// OnLoopThread reports whether the caller runs on a loop thread. It is
// known only in a debug build; false otherwise.
func OnLoopThread() bool { return debug && onLoopThread() }

func onLoopThread() bool {
	if loopCount.Load() == 0 {
		return false
	}
	_, ok := loopThreads.Load(threadID())
	return ok
}
