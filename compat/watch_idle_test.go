package compat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// A watch that no session asks for its epochs stops and closes its
// connection: a proxy that had served many databases held a connection to
// each for ever, and could take the server's every slot (regression). The
// next session to ask starts another, whose epochs are none of the first
// one's: sessions compare them for equality, and a cache built at the
// first watch's epochs must not pass for one built at the second's.
func TestCatalogWatchStopsWhenIdle(t *testing.T) {
	t.Parallel()
	url := newDB(t)
	s := newServiceWith(t, Config{ControlURL: url, DatabaseIdle: 1500 * time.Millisecond})
	c := connect(t, url)
	db := dbName(t, c)
	mustExec(t, c, extSQL(t, plan.CreateExtension, nil))
	watchConns := "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'snowflake-proxy catalog watch'"

	seenCatalog, seenPrivs := map[uint64]bool{}, map[uint64]bool{}
	for round := 1; round <= 2; round++ {
		if e, p := s.CatalogEpochs(db); e != 0 || p != 0 {
			t.Fatalf("round %d: a started watch gave epochs %d and %d, want 0 until it is armed", round, e, p)
		}
		e := waitEpoch(t, s, db, "arming", func(e uint64) bool { return e != 0 })
		_, p := s.CatalogEpochs(db)
		if seenCatalog[e] || seenPrivs[p] {
			t.Fatalf("round %d: epochs %d and %d, handed out before: catalog %v, privileges %v", round, e, p, seenCatalog, seenPrivs)
		}
		seenCatalog[e], seenPrivs[p] = true, true
		if n := queryInt(t, c, watchConns); n != 1 {
			t.Fatalf("round %d: %d watch connections while armed, want 1", round, n)
		}
		// Nothing asks now: the watch goes, and its connection with it.
		deadline := time.Now().Add(15 * time.Second)
		for {
			_, inMap := s.watches.Load(db)
			if n := queryInt(t, c, watchConns); n == 0 && !inMap {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the idle watch still runs after 15s (in the map: %v)", round, inMap)
			}
			time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
		}
	}
}

// The watch stops only after a whole DatabaseIdle in which no session asked
// for its epochs; each ask starts the period again.
func TestWatchIdleCountsFromTheLastAsk(t *testing.T) {
	s := &Service{cfg: Config{DatabaseIdle: time.Minute}}
	t0 := time.Unix(1_700_000_000, 0)
	w := &catalogWatch{s: s, db: "d", nudge: make(chan struct{}, 1), use: useMark{last: t0}}
	s.watches.Store("d", w)
	runIdleSteps(t, t0, []idleStep{
		{at: 59 * time.Second},
		{at: 60 * time.Second, idle: true},
		{at: 61 * time.Second, ask: true},
		{at: 61 * time.Second},
		{at: 120 * time.Second},
		{at: 121 * time.Second, idle: true},
	}, func(int) { s.CatalogEpochs("d") }, w.idle)
}

// idleStep is a step of runIdleSteps: at t0+at, after a use when ask, the
// owner must find itself idle or not.
type idleStep struct {
	at        time.Duration
	ask, idle bool
}

// runIdleSteps runs steps against ask (a use, given the step's index) and
// idle (the owner's look at a time).
func runIdleSteps(t *testing.T, t0 time.Time, steps []idleStep, ask func(step int), idle func(time.Time) bool) {
	t.Helper()
	for i, st := range steps {
		if st.ask {
			ask(i)
		}
		if got := idle(t0.Add(st.at)); got != st.idle {
			t.Fatalf("step %d (t0+%s, ask %v): idle = %v, want %v", i, st.at, st.ask, got, st.idle)
		}
	}
}

// A node claim that no fast-path batch uses is released with its
// connection: a proxy kept one to every database it had issued IDs in
// (regression). The next batch claims again, and finds a proxy that took
// the node meanwhile.
func TestNodeClaimReleasedWhenIdle(t *testing.T) {
	t.Parallel()
	url, c, db, oid := shimDB(t)
	a := newServiceWith(t, Config{ControlURL: url, Node: 7, DatabaseIdle: 1500 * time.Millisecond})
	if _, err := nextvalVia(ctxT(t), a, db, oid, 7); err != nil {
		t.Fatal(err)
	}
	claimConns := "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'snowflake-proxy node 7 claim'"
	if n := queryInt(t, c, claimConns); n != 1 {
		t.Fatalf("%d claim connections after a batch, want 1", n)
	}
	waitFor(t, "the idle claim to be released", func() bool {
		a.mu.Lock()
		_, held := a.claims[db]
		a.mu.Unlock()
		return !held && queryInt(t, c, claimConns) == 0
	})
	b := newService(t, url, 7, nil)
	if _, err := nextvalVia(ctxT(t), b, db, oid, 7); err != nil {
		t.Fatalf("a second proxy with node 7 once the first released it: %v", err)
	}
	if _, err := nextvalVia(ctxT(t), a, db, oid, 7); !errors.Is(err, ErrNodeClaimed) {
		t.Fatalf("the first proxy again, with the node taken: %v, want ErrNodeClaimed", err)
	}
}

// A claim is let go only after a whole DatabaseIdle in which no batch asked
// for it; each ask starts the period again. A batch that found it before
// it left the map gets an error (and goes to the shim), at once.
func TestClaimIdleCountsFromTheLastBatch(t *testing.T) {
	s := &Service{cfg: Config{DatabaseIdle: time.Minute}, claims: map[string]*claim{}}
	t0 := time.Unix(1_700_000_000, 0)
	c := newClaim(s, "d")
	c.use.last, c.pending = t0, false
	close(c.ready)
	s.claims["d"] = c
	runIdleSteps(t, t0, []idleStep{
		{at: 59 * time.Second},
		{at: 61 * time.Second, ask: true},
		{at: 61 * time.Second},
		{at: 120 * time.Second},
		{at: 121 * time.Second, idle: true},
	}, func(step int) {
		if done, err := c.settled(); !done || err != nil {
			t.Fatalf("step %d: settled = %v, %v before the release", step, done, err)
		}
	}, c.stopIfIdle)
	if _, inMap := s.claims["d"]; inMap {
		t.Fatal("the released claim is still in the map")
	}
	if done, err := c.settled(); !done || err == nil || !strings.Contains(err.Error(), "released: unused for 1m0s") {
		t.Fatalf("a batch that found the released claim: settled = %v, %v", done, err)
	}
	if err := c.check(context.Background()); err == nil {
		t.Fatal("check of the released claim succeeded")
	}
}
