//go:build linux

package wire

import (
	"fmt"
	"strings"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

// What a pump may wait for panics when a step runs it on a loop thread
// (test binaries check the loop-thread rule): the generator's
// NextvalBatch, which may wait for a lease, and a hidden query's
// response. A step that reached either there would stall every session
// of the loop; the steps hand the session over first instead.
func TestWaitingOnLoopThreadPanics(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		call       func(p *clientPump)
	}{
		{"generator", "NextvalBatch", func(p *clientPump) {
			_, _ = p.nextvals([]generator.Request{{Seq: 16384, Inc: 1}}, 5)
		}},
		{"hidden query", "hidden query", func(p *clientPump) { p.refresh([]string{"s"}, nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSnowflakes{}
			p, _ := idSession(f) // its relay is not in a loop: the pump's way, which waits
			got, err := netloop.CallOnLoopThread(func() { tc.call(p) })
			if err != nil {
				t.Fatal(err)
			}
			if msg := fmt.Sprint(got); got == nil || !strings.Contains(msg, tc.want) || !strings.Contains(msg, "event loop's thread") {
				t.Fatalf("panic %v, want one naming %q and the loop thread", got, tc.want)
			}
			if n := f.calls.Load(); n != 0 {
				t.Fatalf("%d IDs issued on the loop thread", n)
			}
		})
	}
}
