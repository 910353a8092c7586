package generator

import "testing"

// TryNext never waits: with no lease yet, an exhausted lease or a pending
// fence it reports !ok and has started the renewal Next would wait for;
// once that renewal is in, it issues exactly what Next would.
func TestTryNextNeverWaits(t *testing.T) {
	s := newBlockingStore()
	g, clock := newTestGen(t, s)
	tryNot := func(when string) {
		t.Helper()
		if id, ok, err := g.TryNext(testKey); ok || err != nil {
			t.Fatalf("%s: TryNext = %d, %v, %v; want !ok without waiting", when, id, ok, err)
		}
	}
	tryNot("no lease yet")
	settle(g) // the first lease (the store holds only later ones)
	id, ok, err := g.TryNext(testKey)
	if !ok || err != nil {
		t.Fatalf("inside the lease: %d, %v, %v", id, ok, err)
	}
	wantPos(t, id, 100, 0)
	if id2, ok, _ := g.TryNext(testKey); !ok || PositionOf(id2) != Position(100, 1) {
		t.Fatalf("second ID: %d, %v; want 100:1", id2, ok)
	}

	clock.Set(200) // past the lease
	tryNot("lease used up")
	<-s.entered // the renewal TryNext started is held in the store
	tryNot("renewal in flight")
	close(s.release)
	settle(g)
	id, ok, _ = g.TryNext(testKey)
	if !ok {
		t.Fatal("after the renewal: !ok")
	}
	wantPos(t, id, 200, 0)

	foreign := s.IssueForeign(testKey)
	g.Fence(testKey.Database, 0)
	tryNot("fence pending")
	settle(g)
	id, ok, _ = g.TryNext(testKey)
	if !ok || PositionOf(id) <= foreign {
		t.Fatalf("after the fence: position %d (%v), want above foreign %d", PositionOf(id), ok, foreign)
	}
}
