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

// planCache maps SQL text to its plan. It is bounded in entries and in
// bytes: each shard holds at most its share of both and evicts with the
// CLOCK algorithm (an entry hit since the hand last passed survives one
// more round). Lookups take a shared lock and do not allocate. Without the
// byte bound a client sending long distinct texts made the cache hold its
// whole entry bound of them (regression).
type planCache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
}

type cacheShard struct {
	mu       sync.RWMutex
	index    map[string]int32 // sql -> position in ring
	ring     []cacheEntry     // entries with a nil plan are free
	free     []int32          // free positions in ring
	hand     int
	maxSize  int
	bytes    int // entryCost of the entries held
	maxBytes int
	_        [64]byte // keep shards' locks on separate cache lines
}

type cacheEntry struct {
	sql  string
	plan *plan.Plan
	cost int // entryCost when it was put
	ref  atomic.Bool
}

// entryCost is what an entry is counted for against the byte bound: the
// text and about as much again for the template's parts, a share for
// every piece of the plan (slot, part, INSERT row and edit: a plan of a
// long multi-row INSERT holds far more than its text, regression), and
// the map's and ring's own share.
func entryCost(sql string, p *plan.Plan) int {
	pieces := 0
	if t := p.Template; t != nil {
		pieces += len(t.Slots) + len(t.Parts)
	}
	if in := p.Inserts; in != nil {
		pieces += len(in.Base)
		for i := range in.Targets {
			pieces += len(in.Targets[i].Rows) + len(in.Targets[i].Cols)
			for j := range in.Targets[i].Rows {
				pieces += len(in.Targets[i].Rows[j].Defaults)
			}
		}
	}
	pieces += len(p.Statements)
	return 2*len(sql) + 256 + pieceCost*pieces
}

// pieceCost is the bytes counted per piece of a plan: what a slot of a
// template, its source records and an INSERT row's records take.
const pieceCost = 128

func newPlanCache(size, bytes int) *planCache {
	c := &planCache{seed: maphash.MakeSeed()}
	per := max((size+cacheShards-1)/cacheShards, 1)
	perBytes := max((bytes+cacheShards-1)/cacheShards, 1)
	for i := range c.shards {
		c.shards[i].index = make(map[string]int32)
		c.shards[i].maxSize = per
		c.shards[i].maxBytes = perBytes
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
// session won the race) the earlier plan is kept and returned. A text
// whose entry alone exceeds the shard's byte bound is not cached.
func (c *planCache) put(sql string, p *plan.Plan) *plan.Plan {
	s := c.shard(sql)
	cost := entryCost(sql, p)
	if cost > s.maxBytes {
		return p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.index[sql]; ok {
		return s.ring[i].plan
	}
	for len(s.index) > 0 && (len(s.index) >= s.maxSize || s.bytes+cost > s.maxBytes) {
		s.evict()
	}
	var i int32
	if n := len(s.free); n > 0 {
		i = s.free[n-1]
		s.free = s.free[:n-1]
		s.ring[i].sql, s.ring[i].plan, s.ring[i].cost = sql, p, cost
		s.ring[i].ref.Store(false)
	} else {
		s.ring = append(s.ring, cacheEntry{sql: sql, plan: p, cost: cost})
		i = int32(len(s.ring) - 1)
	}
	s.index[sql] = i
	s.bytes += cost
	return p
}

// evict frees the entry the hand stops at: the first one not hit since
// the hand last passed. The shard holds at least one entry.
func (s *cacheShard) evict() {
	for {
		e := &s.ring[s.hand]
		i := int32(s.hand)
		s.hand = (s.hand + 1) % len(s.ring)
		if e.plan == nil {
			continue
		}
		if e.ref.Load() {
			e.ref.Store(false)
			continue
		}
		delete(s.index, e.sql)
		s.bytes -= e.cost
		e.sql, e.plan, e.cost = "", nil, 0
		s.free = append(s.free, i)
		return
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

// size returns the bytes the cached plans are counted for (entryCost).
func (c *planCache) size() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += s.bytes
		s.mu.RUnlock()
	}
	return n
}
