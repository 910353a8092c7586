package generator

import (
	"context"
	"fmt"
	"sync"
	"testing"
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
		tab = tab.with(&allocator{key: k})
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
