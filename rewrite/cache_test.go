package rewrite

import (
	"fmt"
	"sync"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

func TestCacheBounded(t *testing.T) {
	c := newPlanCache(64)
	p := &plan.Plan{}
	for i := 0; i < 10000; i++ {
		c.put(fmt.Sprint("SELECT snowflake.nextval() + ", i), p)
	}
	if n := c.len(); n > 64 {
		t.Fatalf("cache holds %d plans, bound 64", n)
	}
}

func TestCacheKeepsHotEntries(t *testing.T) {
	c := newPlanCache(cacheShards * 4)
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
