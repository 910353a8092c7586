package rewrite

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// cacheShards is the number of independently locked parts of the cache, so
// that sessions on many cores do not all contend on one lock.
const cacheShards = 32

// planCache maps SQL text to its plan. It is bounded: each shard holds at
// most its share of the capacity and evicts with the CLOCK algorithm (an
// entry hit since the hand last passed survives one more round). Lookups
// take a shared lock and do not allocate.
type planCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

type cacheShard struct {
	mu      sync.RWMutex
	index   map[string]int32 // sql -> position in ring
	ring    []cacheEntry
	hand    int
	maxSize int
	_       [64]byte // keep shards' locks on separate cache lines
}

type cacheEntry struct {
	sql  string
	plan *plan.Plan
	ref  atomic.Bool
}

func newPlanCache(size int) *planCache {
	c := &planCache{seed: maphash.MakeSeed()}
	per := (size + cacheShards - 1) / cacheShards
	if per < 1 {
		per = 1
	}
	for i := range c.shards {
		c.shards[i].index = make(map[string]int32)
		c.shards[i].maxSize = per
	}
	return c
}

func (c *planCache) shard(sql string) *cacheShard {
	return &c.shards[maphash.String(c.seed, sql)%cacheShards]
}

// get returns the cached plan for sql.
func (c *planCache) get(sql string) (*plan.Plan, bool) {
	s := c.shard(sql)
	s.mu.RLock()
	i, ok := s.index[sql]
	var p *plan.Plan
	if ok {
		e := &s.ring[i]
		p = e.plan
		if !e.ref.Load() {
			e.ref.Store(true)
		}
	}
	s.mu.RUnlock()
	return p, ok
}

// put stores p for sql, which the cache keeps: the caller must not pass a
// string whose bytes may change. When sql is already cached (another
// session won the race) the earlier plan is kept and returned.
func (c *planCache) put(sql string, p *plan.Plan) *plan.Plan {
	s := c.shard(sql)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.index[sql]; ok {
		return s.ring[i].plan
	}
	if len(s.ring) < s.maxSize {
		s.ring = append(s.ring, cacheEntry{sql: sql, plan: p})
		s.index[sql] = int32(len(s.ring) - 1)
		return p
	}
	for {
		e := &s.ring[s.hand]
		if e.ref.Load() {
			e.ref.Store(false)
			s.hand = (s.hand + 1) % len(s.ring)
			continue
		}
		delete(s.index, e.sql)
		e.sql, e.plan = sql, p
		s.index[sql] = int32(s.hand)
		s.hand = (s.hand + 1) % len(s.ring)
		return p
	}
}

// len returns the number of cached plans.
func (c *planCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.index)
		s.mu.RUnlock()
	}
	return n
}
