package compat

import (
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// A database's control pool closes, with its connections, once no lease
// has used it for DatabaseIdle: a proxy kept a pool and its goroutine for
// every database it ever served (regression). The next lease makes
// another, and the IDs go on from the last.
func TestControlPoolClosedWhenIdle(t *testing.T) {
	t.Parallel()
	url := newDB(t)
	c := connect(t, url)
	db := dbName(t, c)
	mustExec(t, c, extSQL(t, plan.CreateExtension, nil))
	mustExec(t, c, "CREATE SEQUENCE s")
	seq := seqOID(t, c, "s")
	s := newServiceWith(t, Config{ControlURL: url, Node: 1, DatabaseIdle: 1500 * time.Millisecond})
	controlConns := "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'snowflake-proxy control'"
	var last int64
	for round := 1; round <= 2; round++ {
		id, err := nextvalVia(ctxT(t), s, db, seq, 1)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if id <= last {
			t.Fatalf("round %d: ID %d after %d", round, id, last)
		}
		last = id
		if !hasPool(s, db) {
			t.Fatalf("round %d: no control pool after a lease", round)
		}
		deadline := time.Now().Add(15 * time.Second)
		for hasPool(s, db) || queryInt(t, c, controlConns) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the idle control pool is still open after 15s (in the map: %v, connections: %d)",
					round, hasPool(s, db), queryInt(t, c, controlConns))
			}
			time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
		}
	}
}

func hasPool(s *Service, db string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pools[db] != nil
}

// A pool is closed only after a whole DatabaseIdle since its last use
// ended, never while a use runs, and not while the Service closes.
func TestIdlePoolsCountFromTheLastUse(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	s := &Service{cfg: Config{DatabaseIdle: time.Minute}, pools: map[string]*controlPool{}}
	busy := &controlPool{users: 1, lastUse: t0.Add(-time.Hour)}
	quiet := &controlPool{lastUse: t0}
	s.pools["busy"], s.pools["quiet"] = busy, quiet
	steps := []struct {
		at      time.Duration
		closing bool
		want    []string // left in the map
	}{
		{at: 59 * time.Second, want: []string{"busy", "quiet"}},
		{at: 60 * time.Second, closing: true, want: []string{"busy", "quiet"}},
		{at: 60 * time.Second, want: []string{"busy"}},
		{at: time.Hour, want: []string{"busy"}},
	}
	for i, st := range steps {
		s.closing = st.closing
		before := len(s.pools)
		closed := s.idlePools(t0.Add(st.at))
		if len(closed) != before-len(s.pools) {
			t.Fatalf("step %d: %d pools returned to close, %d left the map", i, len(closed), before-len(s.pools))
		}
		if len(s.pools) != len(st.want) {
			t.Fatalf("step %d: %d pools left, want %v", i, len(s.pools), st.want)
		}
		for _, db := range st.want {
			if s.pools[db] == nil {
				t.Fatalf("step %d: pool %q closed, want it kept", i, db)
			}
		}
	}
}
