package generator

import "context"

// Key names one ID stream: a sequence (by OID) in one database, for one
// node. IDs are unique per Key; the allocator of a Key is the only issuer
// inside its lease.
type Key struct {
	Database string
	Seq      uint32 // pg_class OID of the sequence
	Node     int    // 1..1023
}

// Lease is a window of positions reserved durably in the server for a Key.
// Positions are ms<<12 | count (see Position). The allocator may issue any
// position p with Lo < p <= Hi.
//
// Lo is the store's high-water mark for the key before this lease was
// granted: every position <= Lo may already have been issued by someone. When
// a renewal's Lo equals the previous lease's Hi nobody else issued in
// between, and the allocator continues where it was; otherwise it jumps
// above Lo.
//
// Floor is the highest position the store knows other paths issued (the
// sequence's last_value, below Hi; 0 when none): the allocator continues
// above it too, so that IDs it issues after a statement that went through
// another path are larger, as a single issuer's would be.
type Lease struct {
	Lo, Hi int64
	Floor  int64
}

// LeaseStore reserves windows of positions durably. compat implements it
// against PostgreSQL; tests use an in-memory store.
type LeaseStore interface {
	// Lease reserves positions for key up to at least wantHi and returns the
	// granted window. prevHi is the Hi of the key's previous lease (0 for
	// the first); issued is the highest position issued from it (0 when
	// none), which the store may record as issued (compat raises the
	// sequence to it). The returned lease must be durable before Lease
	// returns.
	Lease(ctx context.Context, key Key, prevHi, wantHi, issued int64) (Lease, error)
}

// Releaser is a LeaseStore that can take back the unused end of a Key's
// lease when the generator closes: hi is the lease's top, issued the last
// position issued from it (or jumped to); nothing above issued was issued.
// The store may lower its high-water mark to issued if it is still hi.
type Releaser interface {
	Release(ctx context.Context, key Key, hi, issued int64) error
}
