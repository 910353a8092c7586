// Package generator produces pgEdge snowflake IDs in memory for the proxy's
// fast path.
//
// It owns four things and nothing else:
//
//   - the bit layout of an ID (layout.go): id = ms<<22 | node<<12 | count,
//     ms counted from 2023-01-01 UTC, exactly as the pgEdge extension 2.x;
//   - the pgEdge generation rule on positions (rule.go), the same rule the
//     extension and the SQL shim apply to a sequence's last_value;
//   - one allocator per Key (database, sequence, node) that applies the rule
//     inside a leased window of positions (allocator.go, generator.go), to
//     single calls or to the calls of one statement at one clock reading
//     (batch.go), with the INCREMENT BY the caller's session sees, call by
//     call, as the extension reads it; allocators are found through a
//     lock-free table (table.go);
//   - the lease protocol against a LeaseStore (api.go), with an in-memory
//     store for tests and benchmarks (memstore.go), and its counters for
//     metrics (stats.go: renewals, failures, callers that waited).
//
// The package does no I/O of its own: durability lives behind LeaseStore,
// which package compat implements against PostgreSQL. Time comes from a
// Clock (clock.go) so tests drive it deterministically with a FakeClock.
//
// Uniqueness rests on the lease: an allocator issues a position only when it
// lies inside the lease it currently holds, so every ID that leaves the
// proxy is covered by durable state in the server (see docs/state-model.md).
package generator
