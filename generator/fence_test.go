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
