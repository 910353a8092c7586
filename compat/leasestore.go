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

// DefaultLeaseTimeout is LeaseStore.Timeout's default.
const DefaultLeaseTimeout = 10 * time.Second

// ErrNoShim is returned (wrapped) when the database has no shim installed,
// or one older than this proxy (without the _lease it calls).
var ErrNoShim = errors.New("compat: the snowflake shim is not installed in this database, or predates this proxy (ALTER EXTENSION snowflake UPDATE)")

// poolSource gives the control pool of a database for one use
// (Service: pools.go).
type poolSource interface {
	acquirePool(database string) (*controlPool, error)
	releasePool(cp *controlPool)
}

// LeaseStore implements generator.LeaseStore on PostgreSQL through the
// shim's snowflake._lease, one round trip per lease, on control pools whose
// sessions run with synchronous_commit on (the lease is durable when Lease
// returns).
type LeaseStore struct {
	pools poolSource
	// Timeout bounds each lease and release: a sequence locked by another
	// transaction (ALTER SEQUENCE in an open transaction block) makes
	// _lease wait, and the renewal must fail, not hang the sessions
	// waiting for it. 0: DefaultLeaseTimeout.
	Timeout time.Duration
	// serverClock, when set, receives the server's clock as read by each
	// lease (see serverBoundClock).
	serverClock func(serverMs int64)

	mu     sync.Mutex
	noShim map[string]time.Time // database -> retry after
}

// NewLeaseStore returns a LeaseStore that uses pool to reach each database.
// pool must return pools whose sessions run with synchronous_commit on.
func NewLeaseStore(pool func(database string) (*pgxpool.Pool, error)) *LeaseStore {
	return &LeaseStore{pools: poolFunc(pool)}
}

type poolFunc func(database string) (*pgxpool.Pool, error)

func (f poolFunc) acquirePool(database string) (*controlPool, error) {
	p, err := f(database)
	if err != nil {
		return nil, err
	}
	return &controlPool{p: p}, nil
}

func (f poolFunc) releasePool(*controlPool) {}

// leaseQuery calls _lease once, yielding to DDL (ddlyield.go): the inner
// query calls it after the setting, OFFSET 0 keeps it there, and the outer
// one takes the fields of its one result.
const leaseQuery = `SELECT (l).lo_pos, (l).hi_pos, (l).floor_pos, (l).server_ms
FROM (SELECT snowflake._lease($1::pg_catalog.oid::pg_catalog.regclass, $2::pg_catalog.int4, $3::pg_catalog.int8,
	$4::pg_catalog.int8, $5::pg_catalog.int8) AS l FROM ` + yieldToDDL + ` OFFSET 0) AS lease`

// Lease implements generator.LeaseStore. The per-(sequence, node)
// high-water sequence in the server is the truth; when it is not prevHi,
// the sequence is raised to it (positions up to it may have been issued
// unreported), as it is to issued. Floor is the sequence's last_value,
// which the shim and setval move.
func (l *LeaseStore) Lease(ctx context.Context, key generator.Key, prevHi, wantHi, issued int64) (generator.Lease, error) {
	if err := l.shimKnownMissing(key.Database); err != nil {
		return generator.Lease{}, err
	}
	cp, err := l.pools.acquirePool(key.Database)
	if err != nil {
		return generator.Lease{}, err
	}
	defer l.pools.releasePool(cp)
	ctx, cancel := context.WithTimeout(ctx, l.timeout())
	defer cancel()
	var lease generator.Lease
	var serverMs int64
	if err := cp.p.QueryRow(ctx, leaseQuery, key.Seq, int32(key.Node), prevHi, wantHi, issued).Scan(&lease.Lo, &lease.Hi, &lease.Floor, &serverMs); err != nil {
		return generator.Lease{}, l.wrap(key, "lease", err)
	}
	if l.serverClock != nil {
		l.serverClock(serverMs)
	}
	return lease, nil
}

// releaseQuery calls _release, yielding to DDL (ddlyield.go).
const releaseQuery = `SELECT snowflake._release($1::pg_catalog.oid::pg_catalog.regclass, $2::pg_catalog.int4,
	$3::pg_catalog.int8, $4::pg_catalog.int8) FROM ` + yieldToDDL

// Release implements generator.Releaser through the shim's
// snowflake._release.
func (l *LeaseStore) Release(ctx context.Context, key generator.Key, hi, issued int64) error {
	if err := l.shimKnownMissing(key.Database); err != nil {
		return err
	}
	cp, err := l.pools.acquirePool(key.Database)
	if err != nil {
		return err
	}
	defer l.pools.releasePool(cp)
	ctx, cancel := context.WithTimeout(ctx, l.timeout())
	defer cancel()
	if _, err := cp.p.Exec(ctx, releaseQuery, key.Seq, int32(key.Node), hi, issued); err != nil {
		return l.wrap(key, "release", err)
	}
	return nil
}

func (l *LeaseStore) timeout() time.Duration {
	if l.Timeout > 0 {
		return l.Timeout
	}
	return DefaultLeaseTimeout
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
