package compat

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// waitEpoch polls CatalogEpoch until ok accepts it.
func waitEpoch(t *testing.T, s *Service, db string, what string, ok func(uint64) bool) uint64 {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if e := s.CatalogEpoch(db); ok(e) {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("catalog epoch of %s: %s did not happen within 15s (now %d)", db, what, s.CatalogEpoch(db))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitChecks waits until the watch of db has completed n looks for the
// event triggers since after (a value of watchChecks), nudging it as a
// session that sees epoch 0 does.
func waitChecks(t *testing.T, s *Service, db string, after uint64, n uint64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for watchChecks(s, db) < after+n {
		s.CatalogEpoch(db)
		if time.Now().After(deadline) {
			t.Fatalf("the catalog watch of %s made %d checks in 15s, want %d", db, watchChecks(s, db)-after, n)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

func watchChecks(s *Service, db string) uint64 {
	v, ok := s.watches.Load(db)
	if !ok {
		return 0
	}
	return v.(*catalogWatch).checks.Load()
}

// The epoch is 0 until the shim's event triggers exist, then moves on every
// DDL made by any connection, and goes back to 0 when a trigger is dropped
// (DROP EVENT TRIGGER fires no event trigger: the periodic check sees it).
func TestCatalogEpochFollowsDDLMadeElsewhere(t *testing.T) {
	url := newDB(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db := cfg.Database
	s := newService(t, url, 0, nil)
	if e := s.CatalogEpoch(db); e != 0 {
		t.Fatalf("first CatalogEpoch = %d, want 0 (not armed yet)", e)
	}
	c := connect(t, url)
	ctx := ctxT(t)
	// Once the watch has looked (connected, LISTENing), a database without
	// the shim still has no epoch.
	waitChecks(t, s, db, 0, 1)
	if e := s.CatalogEpoch(db); e != 0 {
		t.Fatalf("without the shim CatalogEpoch = %d, want 0", e)
	}
	if _, err := c.Exec(ctx, extSQL(t, plan.CreateExtension, nil)); err != nil {
		t.Fatal(err)
	}
	e1 := waitEpoch(t, s, db, "arming after CREATE EXTENSION", func(e uint64) bool { return e != 0 })
	if _, err := c.Exec(ctx, "CREATE TABLE t (id bigint DEFAULT snowflake.nextval())"); err != nil {
		t.Fatal(err)
	}
	e2 := waitEpoch(t, s, db, "a move after CREATE TABLE", func(e uint64) bool { return e != e1 && e != 0 })
	if _, err := c.Exec(ctx, "ALTER TABLE t ALTER COLUMN id SET DEFAULT 0"); err != nil {
		t.Fatal(err)
	}
	e3 := waitEpoch(t, s, db, "a move after ALTER TABLE", func(e uint64) bool { return e != e2 && e != 0 })
	if _, err := c.Exec(ctx, "DROP TABLE t"); err != nil {
		t.Fatal(err)
	}
	waitEpoch(t, s, db, "a move after DROP TABLE", func(e uint64) bool { return e != e3 && e != 0 })
	if testing.Short() {
		return
	}
	if _, err := c.Exec(ctx, "DROP EVENT TRIGGER snowflake_ddl_notify"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitEpoch(t, s, db, "disarming after DROP EVENT TRIGGER", func(e uint64) bool { return e == 0 })
	if d := time.Since(start); d > epochRecheck+5*time.Second {
		t.Errorf("disarming took %s", d)
	}
}

// A shim installed by a non-superuser has no event triggers: the epoch stays
// 0 there (column defaults stay with the server).
func TestCatalogEpochStaysZeroWithoutEventTriggers(t *testing.T) {
	url := newDB(t)
	cfg, _ := pgx.ParseConfig(url)
	s := newService(t, url, 0, nil)
	c := connect(t, url)
	ctx := ctxT(t)
	// The install without its superuser-only part, as a non-superuser gets it.
	install := strings.Replace(extSQL(t, plan.CreateExtension, nil), "IF v_super THEN", "IF false THEN", 1)
	if _, err := c.Exec(ctx, install); err != nil {
		t.Fatal(err)
	}
	s.CatalogEpoch(cfg.Database)
	// Two looks after the install, each of which would have armed it.
	waitChecks(t, s, cfg.Database, watchChecks(s, cfg.Database), 2)
	if e := s.CatalogEpoch(cfg.Database); e != 0 {
		t.Errorf("CatalogEpoch = %d without event triggers, want 0", e)
	}
}

// The watch makes the per-row blocks (docs/state-model.md, "Blocks") of a
// sequence named in a snowflake default that DDL made elsewhere added,
// with the event triggers of a superuser's install and without them.
func TestCatalogWatchMakesBlocks(t *testing.T) {
	for _, triggers := range []bool{true, false} {
		t.Run(fmt.Sprintf("triggers=%v", triggers), func(t *testing.T) {
			t.Parallel()
			url := newDB(t)
			cfg, _ := pgx.ParseConfig(url)
			db := cfg.Database
			s := newService(t, url, 4, nil)
			c := connect(t, url)
			install := extSQL(t, plan.CreateExtension, nil)
			if !triggers {
				install = strings.Replace(install, "IF v_super THEN", "IF false THEN", 1)
			}
			mustExec(t, c, install)
			// Blocks are made for the proxy's node (4) and for those the
			// database's settings name (7).
			mustExec(t, c, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" SET snowflake.node = 7")
			var e0 uint64
			if triggers {
				e0 = waitEpoch(t, s, db, "arming", func(e uint64) bool { return e != 0 })
			}
			// Each statement's move awaited before the next: notifications
			// close together move the epoch once (epochMinGap).
			mustExec(t, c, "CREATE SEQUENCE s2")
			e1 := e0
			if triggers {
				e1 = waitEpoch(t, s, db, "a move after CREATE SEQUENCE", func(e uint64) bool { return e > e0 })
			}
			mustExec(t, c, "CREATE TABLE t (id bigint DEFAULT snowflake.nextval('s2'), v int)")
			if triggers {
				waitEpoch(t, s, db, "a move after CREATE TABLE", func(e uint64) bool { return e > e1 })
			}
			// Without the triggers the DDL is not announced, and a check
			// under way may have begun before it: the one after. With them
			// the awaited move ended a wait, and the check that follows it
			// comes after the DDL: two would take until the next periodic
			// check, up to epochRecheck later, when the one following the
			// move was done before the count was read (it failed in 15 s).
			checks := uint64(2)
			if triggers {
				checks = 1
			}
			s.CatalogEpoch(db)
			waitChecks(t, s, db, watchChecks(s, db), checks)
			oid := seqOID(t, c, "s2")
			for _, name := range []string{"_blk_", "_blkd_"} {
				for _, node := range []int{4, 7} {
					if queryInt(t, c, "SELECT count(*) FROM pg_class WHERE oid = to_regclass($1)",
						fmt.Sprintf("snowflake.%s%d_%d", name, oid, node)) != 1 {
						t.Fatalf("no snowflake.%s%d_%d after two checks", name, oid, node)
					}
				}
			}
			if triggers {
				// Making the blocks notifies nobody (sessions would drop
				// their caches): after two DDL statements and a third one
				// made once the blocks exist (whose notification comes
				// after any of theirs), three moves. A notification of the
				// blocks' would have moved it before the third.
				mustExec(t, c, "CREATE TABLE barrier ()")
				e := waitEpoch(t, s, db, "three moves", func(e uint64) bool { return e >= e0+3 })
				waitChecks(t, s, db, watchChecks(s, db), 1)
				if e = s.CatalogEpoch(db); e != e0+3 {
					t.Fatalf("epoch %d after three DDL statements from %d, want %d", e, e0, e0+3)
				}
			}
			// Direct INSERT ... SELECT: the plan draws from the block.
			mustExec(t, c, "SET snowflake.node = 1")
			mustExec(t, c, "INSERT INTO t (v) SELECT g FROM generate_series(1, 1000) g")
			if n := queryInt(t, c, "SELECT count(DISTINCT id) FROM t"); n != 1000 {
				t.Fatalf("%d distinct ids", n)
			}
		})
	}
}

// Any role may NOTIFY the catalog channel. Notifications that arrive
// together move the epoch once, at most every epochMinGap: 20,000 from one
// statement of a role without privileges moved it 20,000 times before,
// each move making every session read its caches again and the watch run
// its two queries, which stalled other roles' sessions (regression). DDL
// made after them still moves it.
func TestCatalogEpochCoalescesNotifications(t *testing.T) {
	t.Parallel()
	url, c, db, _ := shimDB(t)
	s := newService(t, url, 0, nil)
	s.CatalogEpoch(db)
	e0 := waitEpoch(t, s, db, "arming", func(e uint64) bool { return e != 0 })
	_, roleURL := testRole(t, c, url, "notifier")
	r := connect(t, roleURL)
	const sent = 20000
	queryInt(t, r, fmt.Sprintf("SELECT count(pg_notify('%s', g::text)) FROM generate_series(1, %d) g", NotifyChannel, sent))
	// Until the epoch has stayed put for four polls in a row: the watch
	// has taken them all.
	deadline := time.Now().Add(30 * time.Second)
	last, still := s.CatalogEpoch(db), 0
	for still < 4 || last == e0 {
		time.Sleep(50 * time.Millisecond) // polling a condition with a deadline
		e := s.CatalogEpoch(db)
		if e-e0 >= sent/20 {
			t.Fatalf("%d notifications moved the epoch %d times so far", sent, e-e0)
		}
		if e == last {
			still++
		} else {
			last, still = e, 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("the epoch did not settle in 30s (moved %d times)", e-e0)
		}
	}
	t.Logf("%d notifications moved the epoch %d times", sent, last-e0)
	mustExec(t, c, "CREATE TABLE after_flood ()")
	waitEpoch(t, s, db, "a move after DDL", func(e uint64) bool { return e > last })
}

// GRANT and REVOKE of a role and ALTER ROLE ... SUPERUSER fire no event
// trigger, and sessions kept their cached "may use the sequence" after a
// revoked membership, getting fast-path IDs the server would refuse them
// (regression). The watch reads the privileges' fingerprint and moves the
// privilege epoch when it changes, with the event triggers and without
// them; without them also for grants on sequences and schemas, which are
// announced otherwise. Not parallel: other tests' roles would move it too.
func TestPrivilegeEpochFollowsRoleChanges(t *testing.T) {
	for _, triggers := range []bool{true, false} {
		t.Run(fmt.Sprintf("triggers=%v", triggers), func(t *testing.T) {
			url := newDB(t)
			c := connect(t, url)
			if triggers {
				install(t, c)
			} else {
				mustExec(t, c, strings.Replace(extSQL(t, plan.CreateExtension, nil), "IF v_super THEN", "IF false THEN", 1))
			}
			db := dbName(t, c)
			// Set up before the watch starts: a notification of this DDL
			// arriving late would move the epoch while a statement below
			// waits for its own move, which it would take for one.
			suffix := fmt.Sprint(triggers)
			grp, mem := "grp_"+suffix, "mem_"+suffix
			t.Cleanup(func() {
				_, _ = c.Exec(ctxT(t), "DROP OWNED BY "+mem+", "+grp+" CASCADE")
				_, _ = c.Exec(ctxT(t), "DROP ROLE IF EXISTS "+mem)
				_, _ = c.Exec(ctxT(t), "DROP ROLE IF EXISTS "+grp)
			})
			// Roles created plainly change nobody's privileges: not read.
			mustExec(t, c, "CREATE ROLE "+grp+" NOLOGIN")
			mustExec(t, c, "CREATE ROLE "+mem+" NOLOGIN")
			mustExec(t, c, "CREATE SEQUENCE ps")
			s := newService(t, url, 0, nil)
			s.CatalogEpochs(db)
			e := waitPrivs(t, s, db, "a first epoch", func(e uint64) bool { return e != 0 })
			if triggers {
				waitEpoch(t, s, db, "arming", func(e uint64) bool { return e != 0 })
				_, e = s.CatalogEpochs(db)
			}
			stmts := []string{
				"GRANT " + grp + " TO " + mem,
				"REVOKE " + grp + " FROM " + mem,
				"ALTER ROLE " + mem + " SUPERUSER",
				"ALTER ROLE " + mem + " NOSUPERUSER",
				"ALTER ROLE " + mem + " NOINHERIT",
			}
			// REASSIGN OWNED is announced by no event trigger either, and
			// here it undoes the change made just before it, which was
			// announced (where the triggers exist): sessions may have
			// cached that state, so it must move the epoch again. The rest
			// is DDL, announced where the triggers exist.
			stmts = append(stmts,
				"ALTER SEQUENCE ps OWNER TO "+mem,
				"REASSIGN OWNED BY "+mem+" TO CURRENT_USER",
				"GRANT USAGE ON SEQUENCE ps TO "+mem,
				"REVOKE USAGE ON SEQUENCE ps FROM "+mem,
				"GRANT USAGE ON SCHEMA snowflake TO "+mem,
				"ALTER SEQUENCE ps INCREMENT 2",
				"CREATE SEQUENCE ps2",
				"DROP SEQUENCE ps2")
			for _, stmt := range stmts {
				mustExec(t, c, stmt)
				prev := e
				e = waitPrivs(t, s, db, "a move after "+stmt, func(e uint64) bool { return e != prev && e != 0 })
			}
		})
	}
}

// waitPrivs polls the privilege epoch of CatalogEpochs until ok accepts
// it. As a session's INSERT, the call nudges a watch without the event
// triggers every time, which must not keep it from reading the privileges
// (regression: the reading was put off at every nudge).
func waitPrivs(t *testing.T, s *Service, db string, what string, ok func(uint64) bool) uint64 {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, e := s.CatalogEpochs(db); ok(e) {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("privilege epoch of %s: %s did not happen within 15s", db, what)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}
