package rewrite

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

func TestCacheBounded(t *testing.T) {
	c := newPlanCache(64, 1<<20)
	p := &plan.Plan{}
	for i := 0; i < 10000; i++ {
		c.put(fmt.Sprint("SELECT snowflake.nextval() + ", i), p)
	}
	if n := c.len(); n > 64 {
		t.Fatalf("cache holds %d plans, bound 64", n)
	}
}

// Long distinct texts are held within the byte bound, however many
// entries the count bound allows; a text longer than a shard's share is
// not cached at all. Before, the cache held its whole entry bound of
// texts of up to 64 KiB each (regression: a client sending distinct long
// statements made the proxy hold hundreds of MB).
func TestCacheBoundedInBytes(t *testing.T) {
	const bound = 4 << 20
	c := newPlanCache(4096, bound)
	p := &plan.Plan{}
	pad := strings.Repeat("x", 60<<10)
	for i := 0; i < 2000; i++ {
		c.put(fmt.Sprintf("SELECT snowflake.nextval() /* %d %s */", i, pad), p)
	}
	if n := c.size(); n > bound {
		t.Fatalf("cache counts %d bytes, bound %d", n, bound)
	}
	if n := c.len(); n == 0 || n > bound/(60<<10) {
		t.Fatalf("cache holds %d long texts, want some and at most %d", n, bound/(60<<10))
	}
	huge := "SELECT snowflake.nextval() /* " + strings.Repeat("y", bound/cacheShards) + " */"
	c.put(huge, p)
	if _, ok := c.get(huge); ok {
		t.Fatal("a text longer than a shard's share was cached")
	}
	// Short texts still find room, and the count bound still holds.
	for i := 0; i < 10000; i++ {
		c.put(fmt.Sprint("SELECT snowflake.nextval() + ", i), p)
	}
	if n := c.len(); n > 4096 {
		t.Fatalf("cache holds %d plans, bound 4096", n)
	}
	if n := c.size(); n > bound {
		t.Fatalf("cache counts %d bytes, bound %d", n, bound)
	}
}

func TestCacheKeepsHotEntries(t *testing.T) {
	c := newPlanCache(cacheShards*4, 1<<20)
	hot := "SELECT snowflake.nextval()"
	hp := &plan.Plan{MaxParam: 1}
	c.put(hot, hp)
	for i := 0; i < 1000; i++ {
		if got, ok := c.get(hot); !ok || got != hp {
			t.Fatalf("hot entry evicted after %d inserts", i)
		}
		c.put(fmt.Sprint("cold ", i), &plan.Plan{})
	}
}

func TestPlanCachedAndStable(t *testing.T) {
	r := New(Config{})
	buf := []byte("SELECT snowflake.nextval()")
	p1 := r.Plan(string(buf))
	buf[7] = 'X' // the caller reuses its buffer: the cached plan must not change
	p2 := r.Plan("SELECT snowflake.nextval()")
	if p1 != p2 || p1.Template.Parts[0] != "SELECT " {
		t.Fatalf("cached plan changed: %+v %+v", p1, p2)
	}
}

func TestPlanConcurrent(t *testing.T) {
	r := New(Config{CacheSize: 100})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				sql := fmt.Sprintf("SELECT snowflake.nextval() + %d", (i*7+g)%150)
				p := r.Plan(sql)
				if p.Template == nil || len(p.Template.Slots) != 1 {
					t.Errorf("Plan(%q) = %+v", sql, p)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

func TestCacheDisabled(t *testing.T) {
	r := New(Config{CacheSize: -1})
	if p := r.Plan("SELECT snowflake.nextval()"); p.Local == nil {
		t.Fatalf("no local plan: %+v", p)
	}
}

func TestCacheHitAllocs(t *testing.T) {
	r := New(Config{})
	sql := "SELECT snowflake.nextval()"
	r.Plan(sql)
	if n := testing.AllocsPerRun(100, func() { r.Plan(sql) }); n != 0 {
		t.Errorf("cache hit allocates %v times", n)
	}
}

// The memory the cache keeps stays near its byte bound for plans much
// larger than their text: long multi-row INSERTs with a call per row.
// They were counted by their text alone, and a bound of 32 MiB held
// four times as much (regression: a reviewer's 64 MiB cache grew the
// heap by 378 MB).
func TestCacheBoundCountsThePlans(t *testing.T) {
	const bound = 16 << 20
	r := New(Config{CacheBytes: bound})
	var rows strings.Builder
	for i := 0; i < 1000; i++ {
		if i > 0 {
			rows.WriteString(", ")
		}
		fmt.Fprintf(&rows, "(snowflake.nextval(), %d)", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < 200; i++ {
		r.Plan(fmt.Sprintf("INSERT INTO t%d (id, v) VALUES %s", i, rows.String()))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := r.cache.size(); n > bound {
		t.Fatalf("cache counts %d bytes, bound %d", n, bound)
	}
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 3*bound/2 {
		t.Fatalf("the heap kept %d MB for a cache bound of %d MB (%d plans cached)", grown>>20, bound>>20, r.cache.len())
	}
	runtime.KeepAlive(r)
}
