package generator

import "sync/atomic"

// LeaseStats are the Generator's lease counters since New, for metrics.
type LeaseStats struct {
	// Renewals counts the leases asked of the store; Failures those that
	// failed among them.
	Renewals, Failures uint64
	// Waits counts the callers that waited for a lease (a Key's first
	// lease, a lease used up, a fence), the others being served from the
	// lease in force.
	Waits uint64
}

// leaseCounters are LeaseStats' atomics: renew and await count, never
// the path that issues from the lease in force.
type leaseCounters struct {
	renewals, failures, waits atomic.Uint64
}

// LeaseStats returns a snapshot of the lease counters.
func (g *Generator) LeaseStats() LeaseStats {
	return LeaseStats{Renewals: g.stats.renewals.Load(), Failures: g.stats.failures.Load(), Waits: g.stats.waits.Load()}
}
