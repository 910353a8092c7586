package generator

import (
	"context"
	"errors"
	"testing"
)

// LeaseStats counts each lease asked of the store, the failed ones, and
// the callers that had to wait for one; IDs served from the lease in
// force count nothing.
func TestLeaseStats(t *testing.T) {
	s := NewMemStore()
	g, clock := newTestGen(t, s)
	if st := g.LeaseStats(); st != (LeaseStats{}) {
		t.Fatalf("before any Next: %+v", st)
	}
	mustNext(t, g, testKey) // the first lease: one wait, one renewal
	mustNext(t, g, testKey) // from the lease
	if st := g.LeaseStats(); st != (LeaseStats{Renewals: 1, Waits: 1}) {
		t.Fatalf("after the first lease: %+v, want 1 renewal, 1 wait", st)
	}
	boom := errors.New("boom")
	s.SetLeaseError(boom)
	clock.Set(500) // the lease is used up: the caller waits, and the renewal fails
	if _, err := g.Next(context.Background(), testKey, 1); !errors.Is(err, boom) {
		t.Fatalf("Next with a failing store: %v", err)
	}
	settle(g)
	if st := g.LeaseStats(); st != (LeaseStats{Renewals: 2, Failures: 1, Waits: 2}) {
		t.Fatalf("after a failed renewal: %+v, want 2 renewals, 1 failure, 2 waits", st)
	}
	if st := g.LeaseStats(); st.Renewals != uint64(s.Leases()) {
		t.Fatalf("renewals %d, store leases %d", st.Renewals, s.Leases())
	}
}
