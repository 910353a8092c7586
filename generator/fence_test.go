package generator

import "testing"

// Regression (equivalence suite, currval.sql/increment.sql): after the SQL
// shim issued for a key in the middle of a lease, the fast path kept
// issuing below the shim's ID until the next renewal, so IDs of one
// session went backwards and currval followed the wrong path. A fence (a
// ticket the request carries) makes the next ID come from a renewal that
// sees the shim's high-water.
func TestFenceJumpsAboveForeignIssuanceAtOnce(t *testing.T) {
	s := NewMemStore()
	g, _ := newTestGen(t, s)
	mustNext(t, g, testKey)
	foreign := s.IssueForeign(testKey)
	if got := PositionOf(mustNextAfter(t, g, testKey, g.FenceTicket())); got <= foreign {
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

// A ticket fences its holder alone: a batch that carries it waits for a
// lease taken after it and continues above what other issuers gave
// before, while a batch without it goes on from the current lease, with
// no wait and no renewal started for it. Before, every session fenced
// every allocator of its database, so any session could make all others
// wait for a lease renewal at will (a DO block, then a nextval).
func TestTicketFencesItsHolderAlone(t *testing.T) {
	s := NewMemStore()
	g, _ := newTestGen(t, s)
	mustNext(t, g, testKey)
	settle(g)
	foreign := s.IssueForeign(testKey)
	ticket := g.FenceTicket()
	before := s.Leases()

	other := batch(testKey.Seq, 1, 2)
	if ok, err := g.TryNextBatch(testKey.Database, testKey.Node, other); !ok || err != nil {
		t.Fatalf("a batch without the ticket waited (ok %v, err %v)", ok, err)
	}
	if got := PositionOf(other[1].ID); got >= foreign {
		t.Fatalf("a batch without the ticket: %s, want inside the old lease (below %s)", posString(got), posString(foreign))
	}
	settle(g)
	if after := s.Leases(); after != before {
		t.Fatalf("leases %d -> %d: a batch without the ticket renewed the lease", before, after)
	}

	held := withTicket(batch(testKey.Seq, 1, 2), ticket)
	if ok, _ := g.TryNextBatch(testKey.Database, testKey.Node, held); ok {
		t.Fatal("TryNextBatch issued for a ticket no lease satisfied")
	}
	mustBatch(t, g, held)
	if got := PositionOf(held[0].ID); got <= foreign {
		t.Fatalf("with the ticket: %s, want above %s", posString(got), posString(foreign))
	}
	// Satisfied once: the next batch with it needs no other lease for it.
	if g.allocs.Load().get(testKey).ticketPending(ticket) {
		t.Fatal("the ticket is still pending after a lease satisfied it")
	}
}

// A renewal that started before its holder recorded a ticket does not
// satisfy it, even when the ticket was handed out before that renewal
// started: only a fenced lease does, and that one was not fenced.
func TestTicketNotSatisfiedByAnUnfencedRenewal(t *testing.T) {
	s := NewMemStore()
	g, _ := newTestGen(t, s)
	mustNext(t, g, testKey)
	settle(g)
	foreign := s.IssueForeign(testKey)
	ticket := g.FenceTicket()
	// A renewal without a waiting ticket: the lease used up by a batch
	// that needs more room than it has.
	a := g.allocs.Load().get(testKey)
	r, err := a.start(a.hi.Load() + 1)
	if err != nil {
		t.Fatal(err)
	}
	<-r.done
	if a.ticketDone.Load() >= ticket {
		t.Fatalf("an unfenced renewal satisfied ticket %d (done %d)", ticket, a.ticketDone.Load())
	}
	held := batch(testKey.Seq, 1, 1)
	held[0].After = ticket
	mustBatch(t, g, held)
	if got := PositionOf(held[0].ID); got <= foreign {
		t.Fatalf("with the ticket: %s, want above %s", posString(got), posString(foreign))
	}
}
