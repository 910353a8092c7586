package generator

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// TryNext never waits: with no lease yet or an exhausted lease (and
// TryNextBatch with a pending fence) it reports !ok and has started the
// renewal Next would wait for; once that renewal is in, it issues exactly
// what Next would.
func TestTryNextNeverWaits(t *testing.T) {
	s := newBlockingStore()
	g, clock := newTestGen(t, s)
	tryNot := func(when string) {
		t.Helper()
		if id, ok, err := g.TryNext(testKey, 1); ok || err != nil {
			t.Fatalf("%s: TryNext = %d, %v, %v; want !ok without waiting", when, id, ok, err)
		}
	}
	tryNot("no lease yet")
	settle(g) // the first lease (the store holds only later ones)
	id, ok, err := g.TryNext(testKey, 1)
	if !ok || err != nil {
		t.Fatalf("inside the lease: %d, %v, %v", id, ok, err)
	}
	wantPos(t, id, 100, 0)
	if id2, ok, _ := g.TryNext(testKey, 1); !ok || PositionOf(id2) != Position(100, 1) {
		t.Fatalf("second ID: %d, %v; want 100:1", id2, ok)
	}

	clock.Set(200) // past the lease
	tryNot("lease used up")
	<-s.entered // the renewal TryNext started is held in the store
	tryNot("renewal in flight")
	close(s.release)
	settle(g)
	id, ok, _ = g.TryNext(testKey, 1)
	if !ok {
		t.Fatal("after the renewal: !ok")
	}
	wantPos(t, id, 200, 0)

	foreign := s.IssueForeign(testKey)
	held := []Request{{Seq: testKey.Seq, Inc: 1, After: g.FenceTicket()}}
	if ok, err := g.TryNextBatch(testKey.Database, testKey.Node, held); ok || err != nil {
		t.Fatalf("fence pending: TryNextBatch = %v, %v; want !ok without waiting", ok, err)
	}
	settle(g)
	if ok, _ := g.TryNextBatch(testKey.Database, testKey.Node, held); !ok || PositionOf(held[0].ID) <= foreign {
		t.Fatalf("after the fence: position %d (%v), want above foreign %d", PositionOf(held[0].ID), ok, foreign)
	}
}

// A renewal that fails slowly (compat's store waits up to 2 s while a
// lease is pending, then fails) puts the key in fail-fast mode for as long
// again: callers get the error at once instead of each waiting for a new
// attempt. Regression: every INSERT of a transaction older than a new
// lease state waited 2 s before the shim served it.
func TestSlowFailureFailsFast(t *testing.T) {
	s := NewMemStore()
	g, clock := newTestGen(t, s)
	mustNext(t, g, testKey) // lease up to 110
	boom := errors.New("pending")
	var attempts atomic.Int32
	s.BeforeLease = func(context.Context, Key, int64, int64) error {
		attempts.Add(1)
		clock.Set(clock.NowMs() + 2000) // the store waited 2 s
		return boom
	}
	clock.Set(200)
	if _, err := g.Next(context.Background(), testKey, 1); !errors.Is(err, boom) {
		t.Fatalf("slow failure: %v", err)
	}
	for i := 0; i < 3; i++ {
		if _, err := g.Next(context.Background(), testKey, 1); !errors.Is(err, boom) {
			t.Fatalf("Next during fail-fast: %v", err)
		}
		if _, ok, err := g.TryNext(testKey, 1); ok || !errors.Is(err, boom) {
			t.Fatalf("TryNext during fail-fast: %v, %v", ok, err)
		}
	}
	settle(g)
	if n := attempts.Load(); n != 1 {
		t.Fatalf("%d lease attempts during fail-fast, want 1", n)
	}
	s.BeforeLease = nil
	clock.Set(clock.NowMs() + 2001) // past the fail-fast window
	wantPos(t, mustNext(t, g, testKey), clock.NowMs(), 0)
}
