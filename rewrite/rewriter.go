package rewrite

import (
	"strings"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// Default limits of a Config left at its zero value.
const (
	// DefaultCacheSize is the number of plans cached when Config.CacheSize
	// is 0.
	DefaultCacheSize = 4096
	// DefaultMaxCachedLen is the longest SQL text (in bytes) whose plan is
	// cached when Config.MaxCachedLen is 0: the cache keeps a copy of the
	// text, and very long texts (bulk INSERTs with literal values) are
	// rarely sent twice.
	DefaultMaxCachedLen = 64 << 10
	// DefaultCacheBytes bounds the memory of the cached plans (their texts
	// and about as much again for the plans) when Config.CacheBytes is 0.
	DefaultCacheBytes = 64 << 20
)

// Config configures a Rewriter. The zero value is ready to use.
type Config struct {
	// CacheSize bounds the number of cached plans. 0 means
	// DefaultCacheSize; a negative value disables the cache. The bound is
	// rounded up to a multiple of the number of cache shards (32).
	CacheSize int
	// MaxCachedLen is the longest SQL text whose plan is cached. 0 means
	// DefaultMaxCachedLen; a negative value caches texts of any length
	// the byte bound allows.
	MaxCachedLen int
	// CacheBytes bounds the memory of the cached plans, counted as twice
	// their texts' length and a share per piece of each plan (slots,
	// INSERT rows), across 32 shards: a plan larger than a shard's share
	// is not cached. 0 means DefaultCacheBytes.
	CacheBytes int
}

// Rewriter analyses SQL text into plans. It is safe for concurrent use.
type Rewriter struct {
	cache  *planCache // nil when disabled
	maxLen int        // < 0: no limit
}

// New returns a Rewriter configured by cfg.
func New(cfg Config) *Rewriter {
	r := &Rewriter{maxLen: cfg.MaxCachedLen}
	if r.maxLen == 0 {
		r.maxLen = DefaultMaxCachedLen
	}
	size := cfg.CacheSize
	if size == 0 {
		size = DefaultCacheSize
	}
	bytes := cfg.CacheBytes
	if bytes <= 0 {
		bytes = DefaultCacheBytes
	}
	if size > 0 {
		r.cache = newPlanCache(size, bytes)
	}
	return r
}

// Plan returns the plan for sql. It never returns nil and never panics:
// text that does not parse, or whose analysis fails, gets plan.Unparsed,
// forwarded as written for the server to run or refuse. The plan is shared (cached) and
// must not be modified; it does not retain sql (callers may reuse the
// bytes of sql once Plan returns).
func (r *Rewriter) Plan(sql string) *plan.Plan {
	if !NeedsParse(sql) {
		return plan.Passthrough
	}
	if r.cache != nil {
		if p, ok := r.cache.get(sql); ok {
			return p
		}
	}
	// One private copy serves as the cache key and as the text the
	// template's parts slice: the caller's bytes may be reused.
	own := strings.Clone(sql)
	p := analyze(own)
	if r.cache != nil && (r.maxLen < 0 || len(sql) <= r.maxLen) {
		p = r.cache.put(own, p)
	}
	return p
}
