package generator

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// batch returns n requests for seq with INCREMENT inc.
func batch(seq uint32, inc int64, n int) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Seq: seq, Inc: inc}
	}
	return reqs
}

// withTicket makes every request of reqs carry ticket (Request.After).
func withTicket(reqs []Request, ticket uint64) []Request {
	for i := range reqs {
		reqs[i].After = ticket
	}
	return reqs
}

func mustBatch(t *testing.T, g *Generator, reqs []Request) {
	t.Helper()
	if err := g.NextBatch(context.Background(), testKey.Database, testKey.Node, reqs); err != nil {
		t.Fatalf("NextBatch: %v", err)
	}
}

// singleNode is what one C-extension node gives for calls at clock now
// after last: the pgEdge rule applied call after call, with the counts
// the generator keeps to (NextFast: the same as Next for every INCREMENT
// up to 1536 and from 4096 on).
func singleNode(last, now, inc int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		last = NextFast(last, now, inc)
		out[i] = last
	}
	return out
}

func posString(p int64) string { return fmt.Sprintf("%d:%d", p>>CountBits, p&MaxCount) }

// Regression (ALTER SEQUENCE s INCREMENT 100 through the proxy, then three
// calls in one UNION ALL): the allocator kept the INCREMENT it had read
// with its first lease, and each call read the clock on its own, so the
// counts came out 2, 3, 4 (the old INCREMENT) or 0, 0, 100 (a ms boundary
// between two calls). The calls of one statement now share one clock
// reading and each carries the INCREMENT its session sees, so they follow
// the pgEdge rule exactly as one C-extension node gives it, for every
// INCREMENT: the ms advances only when the count would pass 4095.
func TestBatchIncrementWithinStatement(t *testing.T) {
	for _, inc := range []int64{1, 100, 2048, 4095, 4096, 9999} {
		t.Run(fmt.Sprint(inc), func(t *testing.T) {
			g, clock := newTestGen(t, NewMemStore())
			var last int64
			for stmt := range 3 {
				if stmt == 2 {
					clock.Advance(time.Millisecond) // a fresh ms: the count restarts at 0
				}
				reqs := batch(testKey.Seq, inc, 3)
				mustBatch(t, g, reqs)
				want := singleNode(last, clock.NowMs(), inc, 3)
				for i, r := range reqs {
					if _, node, _ := Decompose(r.ID); node != testKey.Node {
						t.Fatalf("statement %d call %d: node %d", stmt, i, node)
					}
					if got := PositionOf(r.ID); got != want[i] {
						t.Fatalf("statement %d call %d: %s, want %s", stmt, i, posString(got), posString(want[i]))
					}
				}
				last = want[2]
			}
		})
	}
	// The figures of the report, spelt out.
	g, _ := newTestGen(t, NewMemStore())
	for _, tc := range []struct {
		inc  int64
		want []int64
	}{
		{100, []int64{Position(100, 0), Position(100, 100), Position(100, 200)}},
		{9999, []int64{Position(101, 0), Position(102, 0), Position(103, 0)}},
	} {
		reqs := batch(testKey.Seq, tc.inc, 3)
		mustBatch(t, g, reqs)
		for i, r := range reqs {
			if got := PositionOf(r.ID); got != tc.want[i] {
				t.Fatalf("INCREMENT %d call %d: %s, want %s", tc.inc, i, posString(got), posString(tc.want[i]))
			}
		}
	}
}

// The INCREMENT is the caller's, call by call: an ALTER SEQUENCE applies
// from the next call on, with no lease renewal needed (regression: it was
// read once per allocator and kept for its lifetime).
func TestIncrementTakenPerCall(t *testing.T) {
	s := NewMemStore()
	g, _ := newTestGen(t, s)
	for i, tc := range []struct {
		inc   int64
		count int
		ms    int64
	}{{1, 0, 100}, {1, 1, 100}, {100, 101, 100}, {100, 201, 100}, {7, 208, 100}, {3072, 0, 101}, {3, 3, 101}} {
		id, err := g.Next(context.Background(), testKey, tc.inc)
		if err != nil {
			t.Fatal(err)
		}
		if got := PositionOf(id); got != Position(tc.ms, tc.count) {
			t.Fatalf("call %d (INCREMENT %d): %s, want %d:%d", i, tc.inc, posString(got), tc.ms, tc.count)
		}
	}
	// One more: the INCREMENT 3072 ran ahead of the clock (uncovered).
	if s.Leases() != 2 {
		t.Fatalf("leases %d, want 2: a new INCREMENT must not need a lease", s.Leases())
	}
}

// A batch that needs more positions than the lease holds waits for the
// renewal in the middle and still gives the sequence a single node would:
// INCREMENT 4096 past the end of a 10 ms lease.
func TestBatchAcrossLeaseEnd(t *testing.T) {
	s := NewMemStore()
	g, _ := newTestGen(t, s)
	wantPos(t, mustNext(t, g, testKey), 100, 0) // lease up to 110:4095
	reqs := batch(testKey.Seq, 4096, 15)
	mustBatch(t, g, reqs)
	for i, r := range reqs {
		wantPos(t, r.ID, 101+int64(i), 0)
	}
	// The batch outran its first lease once, and ran ahead of the clock
	// once (uncovered).
	if s.Leases() != 3 {
		t.Fatalf("leases %d, want 3: the batch outran its first lease once", s.Leases())
	}
}

// Requests of several sequences in one batch: each sequence gets its own
// consecutive positions in request order.
func TestBatchSeveralSequences(t *testing.T) {
	g, _ := newTestGen(t, NewMemStore())
	a, b := testKey.Seq, testKey.Seq+1
	reqs := []Request{{Seq: a, Inc: 100}, {Seq: b, Inc: 1}, {Seq: a, Inc: 100}, {Seq: b, Inc: 1}, {Seq: a, Inc: 100}}
	mustBatch(t, g, reqs)
	want := []int64{Position(100, 0), Position(100, 0), Position(100, 100), Position(100, 1), Position(100, 200)}
	for i, r := range reqs {
		if got := PositionOf(r.ID); got != want[i] {
			t.Fatalf("request %d (seq %d): %s, want %s", i, r.Seq, posString(got), posString(want[i]))
		}
	}
}

// TryNextBatch does not spend the positions of one sequence when another
// of the batch must wait for a lease (regression: an event loop that gave
// up on the second call of a statement and retried on the session's
// goroutine had already issued the first, so the client saw counts 1, 2, 3
// instead of 0, 1, 2).
func TestTryNextBatchIssuesAllOrNothing(t *testing.T) {
	g, _ := newTestGen(t, NewMemStore())
	a, b := testKey.Seq, testKey.Seq+1
	warm := testKey
	warm.Seq = a
	wantPos(t, mustNext(t, g, warm), 100, 0) // a has a lease, b none yet

	reqs := []Request{{Seq: a, Inc: 1}, {Seq: b, Inc: 1}, {Seq: a, Inc: 1}}
	if ok, err := g.TryNextBatch(testKey.Database, testKey.Node, reqs); ok || err != nil {
		t.Fatalf("TryNextBatch with b's first lease missing: %v, %v; want !ok", ok, err)
	}
	settle(g) // b's first lease, started by TryNextBatch
	if ok, err := g.TryNextBatch(testKey.Database, testKey.Node, reqs); !ok || err != nil {
		t.Fatalf("TryNextBatch after the lease: %v, %v", ok, err)
	}
	want := []int64{Position(100, 1), Position(100, 0), Position(100, 2)}
	for i, r := range reqs {
		if got := PositionOf(r.ID); got != want[i] {
			t.Fatalf("request %d: %s, want %s", i, posString(got), posString(want[i]))
		}
	}

	// One sequence whose lease is used up: nothing issued either.
	g2, clock := newTestGen(t, NewMemStore())
	single := batch(testKey.Seq, 4096, 3)
	mustBatch(t, g2, single) // 100:0 101:0 102:0, lease up to 110
	settle(g2)
	clock.Set(109)
	big := batch(testKey.Seq, 4096, 30) // needs 109..138: past any lease
	if ok, err := g2.TryNextBatch(testKey.Database, testKey.Node, big); ok || err != nil {
		t.Fatalf("TryNextBatch past the lease: %v, %v; want !ok", ok, err)
	}
	settle(g2)
	mustBatch(t, g2, single[:1])
	wantPos(t, single[0].ID, 109, 0)
}

// A pending fence (a ticket the batch carries) makes a batch wait for the
// renewal, which puts it above what other issuers gave meanwhile.
func TestBatchWaitsForFence(t *testing.T) {
	s := NewMemStore()
	g, _ := newTestGen(t, s)
	mustNext(t, g, testKey)
	foreign := s.IssueForeign(testKey)
	reqs := withTicket(batch(testKey.Seq, 1, 2), g.FenceTicket())
	if ok, _ := g.TryNextBatch(testKey.Database, testKey.Node, reqs); ok {
		t.Fatal("TryNextBatch issued with a fence pending")
	}
	mustBatch(t, g, reqs)
	if got := PositionOf(reqs[0].ID); got != foreign+1 {
		t.Fatalf("after the fence: %s, want %s", posString(got), posString(foreign+1))
	}
}

// Concurrent batches on one key with the clock moving: every ID unique,
// and inside each batch consecutive positions follow the rule at one
// instant (same ms and count + INCREMENT, or count 0 and ms + 1): no
// other caller's ID falls between the calls of one statement.
func TestConcurrentBatches(t *testing.T) {
	g, clock := newTestGen(t, NewMemStore())
	const workers, perWorker, size, inc = 6, 400, 3, 700
	got := make([][]Request, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				if w == 0 && i%40 == 0 {
					clock.Advance(time.Millisecond)
				}
				reqs := batch(testKey.Seq, inc, size)
				if err := g.NextBatch(context.Background(), testKey.Database, testKey.Node, reqs); err != nil {
					t.Error(err)
					return
				}
				got[w] = append(got[w], reqs...)
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, list := range got {
		for i, r := range list {
			if seen[r.ID] {
				t.Fatalf("duplicate %d", r.ID)
			}
			seen[r.ID] = true
			if i%size == 0 {
				continue
			}
			prev, cur := PositionOf(list[i-1].ID), PositionOf(r.ID)
			if cur != NextFast(prev, prev>>CountBits, inc) {
				t.Fatalf("inside a batch: %s after %s", posString(cur), posString(prev))
			}
		}
	}
}
