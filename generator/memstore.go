package generator

import (
	"context"
	"sync"
)

// MemStore is an in-memory LeaseStore with the high-water semantics of the
// real store in package compat: per key a high-water mark hw (every position
// <= hw may have been issued); Lease returns Lo = hw and Hi = max(wantHi,
// hw+1), then sets hw = Hi; it records the highest issued position
// reported (Issued), and hw when it is not where the caller's previous
// lease ended. It is safe for concurrent use. Tests use its
// extra methods to simulate other issuers and failures.
type MemStore struct {
	// BeforeLease, when set, runs at the start of every Lease call, outside
	// the store's lock; a non-nil error is returned from Lease. Tests use it
	// to block a renewal on a channel they control. Set it before the store
	// is used.
	BeforeLease func(ctx context.Context, key Key, prevHi, wantHi int64) error

	mu       sync.Mutex
	hw       map[Key]int64
	issued   map[Key]int64
	floor    map[Key]int64
	leaseErr error
	leases   int
}

// NewMemStore returns an empty store: every key starts at high-water 0.
func NewMemStore() *MemStore {
	return &MemStore{hw: map[Key]int64{}, issued: map[Key]int64{}, floor: map[Key]int64{}}
}

// Lease implements LeaseStore.
func (s *MemStore) Lease(ctx context.Context, key Key, prevHi, wantHi, issued int64) (Lease, error) {
	if s.BeforeLease != nil {
		if err := s.BeforeLease(ctx, key, prevHi, wantHi); err != nil {
			return Lease{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leases++
	if s.leaseErr != nil {
		return Lease{}, s.leaseErr
	}
	s.issued[key] = max(s.issued[key], issued)
	lo := s.hw[key]
	if lo != prevHi {
		// As compat's: positions up to hw may have been issued unreported
		// (another run of this key), and are recorded as issued.
		s.issued[key] = max(s.issued[key], lo)
	}
	hi := max(wantHi, lo+1, s.floor[key]+1)
	s.hw[key] = hi
	return Lease{Lo: lo, Hi: hi, Floor: s.floor[key]}, nil
}

// SetHighWater sets key's high-water mark, as if the store had been
// initialised from a sequence's last_value.
func (s *MemStore) SetHighWater(key Key, pos int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hw[key] = pos
}

// HighWater returns key's high-water mark.
func (s *MemStore) HighWater(key Key) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hw[key]
}

// IssueForeign simulates another issuer for key (the SQL shim, another
// proxy) issuing one position above everything reserved so far, as the shim
// does, and returns that position.
func (s *MemStore) IssueForeign(key Key) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hw[key]++
	return s.hw[key]
}

// SetFloor sets what Lease reports as key's Floor: positions another path
// issued (compat: the sequence's last_value).
func (s *MemStore) SetFloor(key Key, pos int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.floor[key] = pos
}

// Issued returns the highest issued position reported for key.
func (s *MemStore) Issued(key Key) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued[key]
}

// SetLeaseError makes every Lease call fail with err (nil: succeed again).
func (s *MemStore) SetLeaseError(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaseErr = err
}

// Leases returns how many Lease calls reached the store's lock (calls that
// BeforeLease or a done context stopped are not counted).
func (s *MemStore) Leases() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leases
}
