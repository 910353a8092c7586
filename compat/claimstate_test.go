package compat

import (
	"errors"
	"testing"
)

// TestClaimsReportsHeldAndConflict: Claims shows the claim held by the
// first proxy of a node, the conflict seen by a second one with the same
// node, and nothing for a database no claim was started on.
func TestClaimsReportsHeldAndConflict(t *testing.T) {
	t.Parallel()
	url, _, db, oid := shimDB(t)

	a := newService(t, url, 9, nil)
	if got := a.Claims(); len(got) != 0 {
		t.Fatalf("claims before any ID: %+v", got)
	}
	if _, err := nextvalVia(ctxT(t), a, db, oid, 9); err != nil {
		t.Fatal(err)
	}
	if st := a.Claims()[db]; !st.Held || st.Conflict || st.Pending || st.Err != "" {
		t.Fatalf("first proxy's claim: %+v", st)
	}
	b := newService(t, url, 9, nil)
	if _, err := nextvalVia(ctxT(t), b, db, oid, 9); !errors.Is(err, ErrNodeClaimed) {
		t.Fatalf("second proxy with node 9: %v", err)
	}
	st := b.Claims()[db]
	if st.Held || !st.Conflict || st.Err == "" {
		t.Fatalf("second proxy's claim: %+v", st)
	}
	if len(b.Claims()) != 1 {
		t.Fatalf("claims of b: %+v", b.Claims())
	}
}
