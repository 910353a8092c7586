//go:build linux

package netloop

import (
	"bytes"
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// A loop kept busy passes through the Go scheduler: without it the
// runtime's monitor thread, 10 ms after the loop goroutine's last pass,
// starts taking the loop's P back at every wait and wakes every 20 µs
// (schedPass).
func TestLoopPassesThroughTheScheduler(t *testing.T) {
	loopIOs(t, func(t *testing.T, lp *Loop) {
		var passes atomic.Int64
		hook := func(l *Loop) {
			if l == lp {
				passes.Add(1)
			}
		}
		testHookSchedPass.Store(&hook)
		defer testHookSchedPass.Store(nil)

		s := enterSession(t, lp)
		ping, pong := message('Q', "ping"), message('D', "pong")
		got := make([]byte, len(ping))
		// The first pass may come before any traffic; two more need the
		// loop busy across two intervals.
		deadline := time.Now().Add(10 * time.Second)
		rounds := 0
		for passes.Load() < 3 {
			if time.Now().After(deadline) {
				t.Fatalf("%d passes through the scheduler in %d round trips over 10 s", passes.Load(), rounds)
			}
			relayOnce(t, s.client, s.server, ping, got)
			relayOnce(t, s.server, s.client, pong, got[:len(pong)])
			rounds++
		}
		s.client.Close()
		s.leave(t)
	})
}

// relayOnce writes msg at from and reads it back, whole, at to.
func relayOnce(t *testing.T, from, to io.ReadWriter, msg, buf []byte) {
	t.Helper()
	if _, err := from.Write(msg); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(to, buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, msg) {
		t.Fatalf("relayed %q, want %q", buf, msg)
	}
}
