package compat

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Control pools: one small pgx pool per database, for the lease store's
// round trips. A pool that no lease or release has used for DatabaseIdle
// is closed and leaves the Service, as the database's catalog watch and
// node claim stop (a proxy in front of a database per tenant kept a pool,
// and its health-check goroutine, for every database it ever served);
// the next lease makes another. Uses are counted while they run, so that
// a pool is never closed under one. While the Service closes, no pool is
// closed this way: the generator reports its last IDs through them.

// controlPool is a database's pool and its uses, guarded by Service.mu.
type controlPool struct {
	p       *pgxpool.Pool
	users   int       // uses running (acquirePool without releasePool)
	lastUse time.Time // when the last use ended
}

// acquirePool returns the control pool of database, creating it on first
// use; the caller calls releasePool when done with it. While the Service
// closes, pools that exist stay usable and no new one is made.
func (s *Service) acquirePool(database string) (*controlPool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cp := s.pools[database]; cp != nil {
		cp.users++
		return cp, nil
	}
	if s.closing {
		return nil, ErrClosed
	}
	cfg := s.base.Copy()
	cfg.ConnConfig.Database = database
	p, err := pgxpool.NewWithConfig(s.ctx, cfg) // connects lazily
	if err != nil {
		return nil, fmt.Errorf("compat: pool for %q: %w", database, err)
	}
	cp := &controlPool{p: p, users: 1}
	s.pools[database] = cp
	if !s.reaping {
		s.reaping = true
		s.wg.Add(1)
		go s.reapPools()
	}
	return cp, nil
}

// releasePool ends a use of cp.
func (s *Service) releasePool(cp *controlPool) {
	s.mu.Lock()
	cp.users--
	cp.lastUse = time.Now()
	s.mu.Unlock()
}

// reapPools closes idle pools every quarter of DatabaseIdle (at most a
// minute) until the Service closes.
func (s *Service) reapPools() {
	defer s.wg.Done()
	t := time.NewTicker(min(s.cfg.DatabaseIdle/4, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			for _, p := range s.idlePools(time.Now()) {
				p.Close()
			}
		}
	}
}

// idlePools removes from the Service the pools without a use running
// whose last use ended DatabaseIdle before now, and returns them for the
// caller to close (Close waits for connections in use: none).
func (s *Service) idlePools(now time.Time) []*pgxpool.Pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil
	}
	var idle []*pgxpool.Pool
	for db, cp := range s.pools {
		if cp.users == 0 && now.Sub(cp.lastUse) >= s.cfg.DatabaseIdle {
			delete(s.pools, db)
			idle = append(idle, cp.p)
		}
	}
	return idle
}
