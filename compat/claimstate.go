package compat

import "errors"

// ClaimState is what is known of the node claim on one database, for
// health checks and metrics.
type ClaimState struct {
	// Held: this proxy holds its node on the database.
	Held bool
	// Pending: the first attempt (or one a caller waits for) has not
	// ended yet.
	Pending bool
	// Conflict: another live proxy holds the node (ErrNodeClaimed).
	Conflict bool
	// Err is why the claim is not held (no shim, no privilege on the
	// table, a conflict); empty when held or pending.
	Err string
}

// Claims returns the state of the node claim of each database that has one
// (started by a fast-path batch there with Config.Node, stopped after
// DatabaseIdle without one). It takes
// only the claims' locks, never waits for the upstream, so a health probe
// may call it at any rate.
func (s *Service) Claims() map[string]ClaimState {
	s.mu.Lock()
	claims := make(map[string]*claim, len(s.claims))
	for db, c := range s.claims {
		claims[db] = c
	}
	s.mu.Unlock()
	out := make(map[string]ClaimState, len(claims))
	for db, c := range claims {
		out[db] = c.state()
	}
	return out
}

func (c *claim) state() ClaimState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending && c.conn == nil {
		return ClaimState{Pending: true}
	}
	st := ClaimState{Held: c.conn != nil && c.err == nil}
	if c.err != nil {
		st.Err = c.err.Error()
		st.Conflict = errors.Is(c.err, ErrNodeClaimed)
	}
	return st
}
