package generator

import "testing"

// Regression (equivalence suite, currval.sql/increment.sql): after the SQL
// shim issued for a key in the middle of a lease, the fast path kept
// issuing below the shim's ID until the next renewal, so IDs of one
// session went backwards and currval followed the wrong path. Fence makes
// the next ID come from a renewal that sees the shim's high-water.
func TestFenceJumpsAboveForeignIssuanceAtOnce(t *testing.T) {
	s := NewMemStore()
	g, _ := newTestGen(t, s)
	mustNext(t, g, testKey)
	foreign := s.IssueForeign(testKey)
	g.Fence(testKey.Database, 0)
	if got := PositionOf(mustNext(t, g, testKey)); got <= foreign {
		t.Fatalf("after fence: position %d, want above foreign %d", got, foreign)
	}
}

// Without a fence the allocator stays inside its lease: the control case
// for the test above, showing the fence is what moved it.
func TestNoFenceStaysInsideLease(t *testing.T) {
	s := NewMemStore()
	g, _ := newTestGen(t, s)
	mustNext(t, g, testKey)
	foreign := s.IssueForeign(testKey)
	if got := PositionOf(mustNext(t, g, testKey)); got >= foreign {
		t.Fatalf("without fence: position %d, want inside the old lease (below %d)", got, foreign)
	}
}

// A fence on another database or sequence leaves the key alone: no lease
// round trip is spent on it.
func TestFenceIsScoped(t *testing.T) {
	s := NewMemStore()
	g, _ := newTestGen(t, s)
	mustNext(t, g, testKey)
	settle(g)
	before := s.Leases()
	g.Fence("other", 0)
	g.Fence(testKey.Database, testKey.Seq+1)
	mustNext(t, g, testKey)
	settle(g)
	if after := s.Leases(); after != before {
		t.Fatalf("leases %d -> %d: an unrelated fence renewed the lease", before, after)
	}
	g.Fence(testKey.Database, testKey.Seq)
	mustNext(t, g, testKey)
	if after := s.Leases(); after != before+1 {
		t.Fatalf("leases %d -> %d: the key's own fence did not renew", before, after)
	}
}

// Regression (state model, before it was released): the shim issues with
// every count once a node's leases have ended, above the last lease's top;
// a renewal without a fence continued from the allocator's own last
// position and could issue the shim's ID again. A Floor above the previous
// lease's top is always jumped over.
func TestFloorAboveThePreviousLeaseIsAlwaysHonored(t *testing.T) {
	s := NewMemStore()
	g, clock := newTestGen(t, s)
	first := mustNext(t, g, testKey)
	hw := s.HighWater(testKey)
	// The lease has ended; the shim issued at the clock, count 0, above it.
	clock.Set(hw>>CountBits + 10)
	shim := Position(clock.NowMs(), 0)
	s.SetFloor(testKey, shim)
	next := PositionOf(mustNext(t, g, testKey))
	if next <= shim {
		t.Fatalf("after the shim's %s the fast path gave %s (first %s)", posString(shim), posString(next), posString(PositionOf(first)))
	}
	// A floor below the lease's top (the shim kept to its own counts) does
	// not move an allocator that did not fence.
	s.SetFloor(testKey, s.HighWater(testKey)-1)
	clock.Set(s.HighWater(testKey)>>CountBits + 1)
	if got := PositionOf(mustNext(t, g, testKey)); got != Position(clock.NowMs(), 0) {
		t.Fatalf("fast path at %s, want the clock's %s", posString(got), posString(Position(clock.NowMs(), 0)))
	}
}
