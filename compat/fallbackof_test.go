package compat

import (
	"errors"
	"fmt"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

// FallbackOf names why NextvalBatch refused, through the wrapping its
// callers and the generator add.
func TestFallbackOf(t *testing.T) {
	s := &Service{}
	for _, c := range []struct {
		name string
		err  error
		want wire.Fallback
	}{
		{"node held by another proxy", claimError{fmt.Errorf("%w: node 5 on database %q is held by x", ErrNodeClaimed, "db")}, wire.FallbackNodeConflict},
		{"claim without the shim", claimError{fmt.Errorf("%w (database %q): no node claim without the shim", ErrNoShim, "db")}, wire.FallbackNoShim},
		{"claim table refused", claimError{fmt.Errorf("compat: node claim on %q: %w", "db", errClaimTable)}, wire.FallbackNodeClaim},
		{"lease without the shim", fmt.Errorf("compat: nextval db node 5: generator: lease for k: %w", ErrNoShim), wire.FallbackNoShim},
		{"lease failed", fmt.Errorf("compat: nextval db node 5: %w", errors.New("connection refused")), wire.FallbackLeaseFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := s.FallbackOf(c.err); got != c.want {
				t.Fatalf("FallbackOf(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}
