package compat

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

// noShimBackoff is how long a database whose shim is missing is not asked
// again: without it every fast-path call would cost a failing round trip.
// The shim answers those calls meanwhile, so the delay is harmless.
const noShimBackoff = time.Second

// DefaultPendingWait bounds how long Lease waits for a new high-water sequence to
// settle, that is for the transactions that were running when it was created
// to end. Usually a few ms; a session idle in a transaction holds it up, and
// the fast path then fails (the shim serves) until that transaction ends.
const DefaultPendingWait = 2 * time.Second

// ErrPending is returned (wrapped) by Lease when a new per-(sequence, node)
// high-water sequence has not settled within PendingWait.
var ErrPending = errors.New("compat: lease state pending: a transaction older than it is still running")

// ErrNoShim is returned (wrapped) when the database has no shim installed.
var ErrNoShim = errors.New("compat: the snowflake shim is not installed in this database")

// poolSource gives the control pool of a database.
type poolSource interface {
	pool(database string) (*pgxpool.Pool, error)
}

// LeaseStore implements generator.LeaseStore on PostgreSQL through the
// shim's snowflake._lease, one round trip per lease, on control pools whose
// sessions run with synchronous_commit on (the lease is durable when Lease
// returns).
type LeaseStore struct {
	pools poolSource
	// PendingWait bounds how long Lease waits for a new high-water
	// sequence to settle. 0: DefaultPendingWait. Set before first use.
	PendingWait time.Duration

	mu     sync.Mutex
	noShim map[string]time.Time // database -> retry after
	// external counts, per database, the statements that may have set
	// sequences from outside the snowflake paths (see HonorSequences);
	// honored records, per key, the count its last lease took in.
	external map[string]uint64
	honored  map[generator.Key]uint64
}

// HonorSequences makes the next lease of every key of database start above
// its sequence's own last_value too (not only above the key's high-water):
// a setval, ALTER SEQUENCE or restore through some session moved it, and
// the pgEdge rule continues from there. Pair it with generator.Fence so the
// next ID waits for that lease.
func (l *LeaseStore) HonorSequences(database string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.external == nil {
		l.external = map[string]uint64{}
		l.honored = map[generator.Key]uint64{}
	}
	l.external[database]++
}

// honor reports whether key's next lease must take in its sequence's
// last_value, and the count to record once that lease succeeded.
func (l *LeaseStore) honor(key generator.Key) (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.external[key.Database]
	return n != l.honored[key], n
}

func (l *LeaseStore) honoredUpTo(key generator.Key, n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n > l.honored[key] {
		l.honored[key] = n
	}
}

// NewLeaseStore returns a LeaseStore that uses pool to reach each database.
// pool must return pools whose sessions run with synchronous_commit on.
func NewLeaseStore(pool func(database string) (*pgxpool.Pool, error)) *LeaseStore {
	return &LeaseStore{pools: poolFunc(pool)}
}

type poolFunc func(database string) (*pgxpool.Pool, error)

func (f poolFunc) pool(database string) (*pgxpool.Pool, error) { return f(database) }

const leaseQuery = `SELECT lo_pos, hi_pos FROM snowflake._lease($1::pg_catalog.oid::pg_catalog.regclass, $2::pg_catalog.int4, $3::pg_catalog.int8, $4::pg_catalog.bool)`

// Lease implements generator.LeaseStore. prevHi is not needed: the
// per-(sequence, node) high-water sequence in the server is the truth.
func (l *LeaseStore) Lease(ctx context.Context, key generator.Key, prevHi, wantHi int64) (generator.Lease, error) {
	if err := l.shimKnownMissing(key.Database); err != nil {
		return generator.Lease{}, err
	}
	p, err := l.pools.pool(key.Database)
	if err != nil {
		return generator.Lease{}, err
	}
	wait := l.PendingWait
	if wait == 0 {
		wait = DefaultPendingWait
	}
	deadline := time.Now().Add(wait)
	pause := time.Millisecond
	honor, external := l.honor(key)
	for {
		var lo, hi *int64
		err = p.QueryRow(ctx, leaseQuery, key.Seq, int32(key.Node), wantHi, honor).Scan(&lo, &hi)
		if err != nil {
			return generator.Lease{}, l.wrap(key, "lease", err)
		}
		if lo != nil && hi != nil {
			if honor {
				l.honoredUpTo(key, external)
			}
			return generator.Lease{Lo: *lo, Hi: *hi}, nil
		}
		// The key's high-water sequence is new and some transaction older
		// than it may still issue blind to it (sql/functions.sql): wait.
		if time.Now().Add(pause).After(deadline) {
			return generator.Lease{}, fmt.Errorf("%w: %s/%d node %d", ErrPending, key.Database, key.Seq, key.Node)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return generator.Lease{}, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

func (l *LeaseStore) shimKnownMissing(database string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.noShim[database]; ok {
		if time.Now().Before(t) {
			return fmt.Errorf("%w (database %q)", ErrNoShim, database)
		}
		delete(l.noShim, database)
	}
	return nil
}

// wrap adds context to err and remembers a missing shim.
func (l *LeaseStore) wrap(key generator.Key, what string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42883" || pe.Code == "3F000") { // undefined function, schema
		l.mu.Lock()
		if l.noShim == nil {
			l.noShim = map[string]time.Time{}
		}
		l.noShim[key.Database] = time.Now().Add(noShimBackoff)
		l.mu.Unlock()
		return fmt.Errorf("%w (database %q): %w", ErrNoShim, key.Database, err)
	}
	return fmt.Errorf("compat: %s %s/%d node %d: %w", what, key.Database, key.Seq, key.Node, err)
}

// ForgetMissingShim clears the memory of a missing shim in database (call
// it after CREATE EXTENSION went through).
func (l *LeaseStore) ForgetMissingShim(database string) {
	l.mu.Lock()
	delete(l.noShim, database)
	l.mu.Unlock()
}
