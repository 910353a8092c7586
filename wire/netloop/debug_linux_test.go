//go:build linux

package netloop

import (
	"fmt"
	"strings"
	"testing"
)

// The loop-thread rule is checked, not only stated: something that can
// wait, reached from a step on a loop thread, panics in a test binary and
// says what would have waited; the same call elsewhere does not.
func TestMayWaitPanicsOnLoopThread(t *testing.T) {
	got, err := CallOnLoopThread(func() { MayWait("a test's lease") })
	if err != nil {
		t.Fatal(err)
	}
	msg := fmt.Sprint(got)
	if got == nil || !strings.Contains(msg, "a test's lease") || !strings.Contains(msg, "event loop's thread") {
		t.Fatalf("MayWait on a loop thread: panic %v, want one naming the wait and the loop thread", got)
	}
	MayWait("a test's lease, on the test's goroutine") // must not panic
	if OnLoopThread() {
		t.Fatal("the test's goroutine taken for a loop thread")
	}
	got, err = CallOnLoopThread(func() {
		if !OnLoopThread() {
			panic("a step not seen to run on a loop thread")
		}
	})
	if err != nil || got != nil {
		t.Fatal(got, err)
	}
}
