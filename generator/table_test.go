package generator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

// Keys that differ only inside the database name (same length, same first
// and last byte) collide in the hash and must still be told apart.
func TestAllocTable(t *testing.T) {
	var keys []Key
	for db := range 20 {
		for node := 1; node <= 5; node++ {
			keys = append(keys, Key{Database: fmt.Sprintf("a%02db", db), Seq: 16384, Node: node})
		}
	}
	keys = append(keys, Key{Seq: 1, Node: 1}) // empty database name
	tab := newAllocTable(nil)
	for i, k := range keys {
		tab = tab.with(&allocator{key: k}, math.MinInt64)
		for _, k2 := range keys[:i+1] {
			if a := tab.get(k2); a == nil || a.key != k2 {
				t.Fatalf("after %d inserts: get(%v) = %v", i+1, k2, a)
			}
		}
		if a := tab.get(Key{Database: "missing", Seq: 16384, Node: 1}); a != nil {
			t.Fatalf("get(missing) = %v", a.key)
		}
	}
}

// Goroutines racing to create the same keys end up with one allocator per
// key, and unique IDs per key.
func TestConcurrentNewKeys(t *testing.T) {
	g, _ := newTestGen(t, NewMemStore())
	const workers, nodes = 8, 40
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for node := 1; node <= nodes; node++ {
				id, err := g.Next(context.Background(), Key{Database: "db", Seq: 1, Node: node}, 1)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate id %d", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n := len(g.allocs.Load().all); n != nodes {
		t.Fatalf("%d allocators, want %d", n, nodes)
	}
}

// Allocators of Keys no longer used leave the table once their lease has
// ended a while ago, the next time a Key is added; a Key used again gets a
// new allocator that continues above everything issued for it. Before,
// every Key ever used stayed, and each new Key copied them all: a session
// making temporary sequences and drawing from each grew the proxy without
// bound (regression).
func TestIdleAllocatorsLeaveTheTable(t *testing.T) {
	s := NewMemStore()
	g, clock := newTestGen(t, s)
	var last []int64
	for i := range 100 {
		k := Key{Database: "db", Seq: uint32(20000 + i), Node: 1}
		last = append(last, mustNext(t, g, k))
	}
	settle(g)
	if n := len(g.allocs.Load().all); n != 100 {
		t.Fatalf("%d allocators, want 100", n)
	}
	held := g.allocs.Load().get(Key{Database: "db", Seq: 20000, Node: 1})
	clock.Advance((idleAllocatorMs + 1000) * time.Millisecond)
	fresh := Key{Database: "db", Seq: 30000, Node: 1}
	mustNext(t, g, fresh)
	settle(g)
	if n := len(g.allocs.Load().all); n != 1 {
		t.Fatalf("%d allocators after the others idled, want 1", n)
	}
	// One that left takes no lease any more, even for a caller that still
	// holds it: Close would neither seal nor release that lease.
	leases := s.Leases()
	if _, err := held.start(0); !errors.Is(err, errRetired) {
		t.Fatalf("a retired allocator's start: %v, want errRetired", err)
	}
	if s.Leases() != leases {
		t.Fatal("a retired allocator took a lease")
	}
	// A Key back after its allocator left continues above its earlier IDs.
	k := Key{Database: "db", Seq: 20000, Node: 1}
	if id := mustNext(t, g, k); PositionOf(id) <= PositionOf(last[0]) {
		t.Fatalf("after its allocator left, %v gave %s, not above its earlier %s", k, posString(PositionOf(id)), posString(PositionOf(last[0])))
	}
	// A recently used Key stays.
	mustNext(t, g, Key{Database: "db", Seq: 30001, Node: 1})
	if g.allocs.Load().get(fresh) == nil {
		t.Fatal("an allocator in use left the table")
	}
}
