package compat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// legacyClaimKey is the fixed, public key the claim of node used to have:
// any role could take it and switch that node's fast path off.
func legacyClaimKey(node int) int64 { return 0x534E<<32 | int64(node) }

// keyFromLocksSQL is what any role can learn of a proxy's claim key: the
// advisory lock held by the session named like the claim connection.
const keyFromLocksSQL = `SELECT (l.classid::int8 << 32) | l.objid::int8
	FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND a.application_name = $1
	  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// The log messages of a real conflict and of a squatter moved away from.
const (
	conflictMsg = "two proxies use the same node"
	squatterMsg = "the claim moved to a new key"
)

func logTo(buf *pgtest.SyncBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(buf, nil)) }

// testRole creates a LOGIN role without privileges for the test and
// returns its name and url with that role as user.
func testRole(t *testing.T, c *testConn, url, suffix string) (string, string) {
	t.Helper()
	name := dbName(t, c) + "_" + suffix
	mustExec(t, c, "CREATE ROLE "+name+" LOGIN")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if sc, err := pgx.Connect(ctx, url); err == nil {
			_, _ = sc.Exec(ctx, "DROP OWNED BY "+name)
			_, _ = sc.Exec(ctx, "DROP ROLE "+name)
			_ = sc.Close(ctx)
		}
	})
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.User(name)
	return name, u.String()
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func closeService(t *testing.T, s *Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func claimOf(t *testing.T, s *Service, db string) *claim {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.claims[db]
	if c == nil {
		t.Fatalf("no claim of %q", db)
	}
	return c
}

// beats returns the heartbeats and attempts c made so far.
func (c *claim) counts() (beats, attempts int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.beats, c.attempts
}

// tableKey reads node's claim key from the table (as a superuser).
func tableKey(t *testing.T, c *testConn, node int) int64 {
	t.Helper()
	return queryInt(t, c, "SELECT lock_key FROM snowflake._claims WHERE node = $1", node)
}

// holderPID returns the backend holding advisory lock key in c's database,
// 0 when none.
func holderPID(t *testing.T, c *testConn, key int64) int64 {
	t.Helper()
	return queryInt(t, c, `SELECT coalesce(max(pid), 0) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND granted
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND classid = (($1::int8 >> 32) & 4294967295)::oid AND objid = ($1::int8 & 4294967295)::oid`, key)
}

// isClaimSession reports whether backend pid is a claim connection of node.
func isClaimSession(t *testing.T, c *testConn, pid int64, node int) bool {
	t.Helper()
	return queryInt(t, c, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND application_name = $2",
		pid, fmt.Sprintf("snowflake-proxy node %d claim", node)) == 1
}

func tryLock(t *testing.T, c *testConn, fn string, key int64) bool {
	t.Helper()
	var ok bool
	if err := c.QueryRow(ctxT(t), "SELECT "+fn+"($1)", key).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// Regression: the claim was a session advisory lock on the fixed key
// 0x534E<<32 | node, so any role without privileges could take it and
// switch the node's fast path off with a conflict that did not exist. Now a
// squatter on the old key, or on the current key read from pg_locks and
// taken while no proxy held it, only makes the next proxy move its claim to
// a new key.
func TestClaimSquatterCannotBlockNode(t *testing.T) {
	for _, mode := range []struct{ name, fn string }{
		{"exclusive", "pg_try_advisory_lock"},
		{"shared", "pg_try_advisory_lock_shared"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			url, c, db, oid := shimDB(t)
			squatter, squatURL := testRole(t, c, url, "squat")
			sq := connect(t, squatURL)

			// The old fixed key, before any proxy claims: no effect.
			if !tryLock(t, sq, mode.fn, legacyClaimKey(3)) {
				t.Fatal("squatter cannot take the old fixed key")
			}
			a := newService(t, url, 3, nil)
			if _, err := nextvalVia(ctxT(t), a, db, oid, 3); err != nil {
				t.Fatalf("claim with the old key squatted: %v", err)
			}
			// The squatter cannot read the table, but it reads the key
			// from pg_locks while a holds it, and takes it once a stops.
			wantErr(t, pgErr(t, sq, "SELECT lock_key FROM snowflake._claims"), "42501", "permission denied for table _claims")
			old := queryInt(t, sq, keyFromLocksSQL, "snowflake-proxy node 3 claim")
			if old != tableKey(t, c, 3) {
				t.Fatalf("key %d from pg_locks, %d in the table", old, tableKey(t, c, 3))
			}
			closeService(t, a)
			waitFor(t, "the squatter to get the key", func() bool { return tryLock(t, sq, mode.fn, old) })
			sqPID := queryInt(t, sq, "SELECT pg_backend_pid()")
			if holderPID(t, c, old) != sqPID {
				t.Fatal("the squatter does not hold the key")
			}

			var logBuf pgtest.SyncBuffer
			b := newService(t, url, 3, logTo(&logBuf))
			if _, err := nextvalVia(ctxT(t), b, db, oid, 3); err != nil {
				t.Fatalf("claim with the current key squatted: %v", err)
			}
			logs := logBuf.String()
			if strings.Contains(logs, conflictMsg) || strings.Contains(logs, "level=ERROR") {
				t.Fatalf("squatter reported as a conflict:\n%s", logs)
			}
			if !strings.Contains(logs, squatterMsg) || !strings.Contains(logs, fmt.Sprintf(`role \"%s\"`, squatter)) ||
				!strings.Contains(logs, fmt.Sprintf("backend pid %d ", sqPID)) {
				t.Fatalf("squatter not named in a warning:\n%s", logs)
			}
			moved := tableKey(t, c, 3)
			if moved == old {
				t.Fatal("claim key not moved")
			}
			if !isClaimSession(t, c, holderPID(t, c, moved), 3) {
				t.Fatal("b does not hold the new key")
			}
			if holderPID(t, c, old) != sqPID {
				t.Fatal("the squatter's lock changed")
			}
			// The new key is seen in pg_locks, but it is taken.
			if got := queryInt(t, sq, keyFromLocksSQL, "snowflake-proxy node 3 claim"); got != moved {
				t.Fatalf("pg_locks shows %d, want %d", got, moved)
			}
			if tryLock(t, sq, mode.fn, moved) {
				t.Fatal("squatter took the key b holds")
			}
			// Heartbeats keep the claim without attempting again.
			cl := claimOf(t, b, db)
			waitFor(t, "three heartbeats", func() bool { n, _ := cl.counts(); return n >= 4 })
			if _, n := cl.counts(); n != 1 {
				t.Fatalf("%d attempts: the claim was lost", n)
			}
			if _, err := nextvalVia(ctxT(t), b, db, oid, 3); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A squatter beside a proxy that holds the claim changes nothing: the key
// stays, the proxy keeps it, and a second proxy with the same node still
// sees the first one, not the squatter.
func TestClaimSquatterBesideRealProxy(t *testing.T) {
	t.Parallel()
	url, c, db, oid := shimDB(t)
	_, squatURL := testRole(t, c, url, "squat")
	sq := connect(t, squatURL)

	var logA pgtest.SyncBuffer
	a := newService(t, url, 5, logTo(&logA))
	if _, err := nextvalVia(ctxT(t), a, db, oid, 5); err != nil {
		t.Fatal(err)
	}
	key := tableKey(t, c, 5)
	aPID := holderPID(t, c, key)
	if got := queryInt(t, sq, keyFromLocksSQL, "snowflake-proxy node 5 claim"); got != key {
		t.Fatalf("pg_locks shows %d, want %d", got, key)
	}
	for _, fn := range []string{"pg_try_advisory_lock", "pg_try_advisory_lock_shared"} {
		if tryLock(t, sq, fn, key) {
			t.Fatalf("%s took the key a holds", fn)
		}
	}
	if !tryLock(t, sq, "pg_try_advisory_lock", legacyClaimKey(5)) {
		t.Fatal("squatter cannot take the old fixed key")
	}

	var logB pgtest.SyncBuffer
	b := newService(t, url, 5, logTo(&logB))
	if _, err := nextvalVia(ctxT(t), b, db, oid, 5); !errors.Is(err, ErrNodeClaimed) {
		t.Fatalf("second proxy with node 5: %v", err)
	}
	if !strings.Contains(logB.String(), fmt.Sprintf("backend pid %d ", aPID)) {
		t.Fatalf("conflict does not name a's claim session %d:\n%s", aPID, logB.String())
	}
	if strings.Contains(logB.String(), squatterMsg) {
		t.Fatalf("b moved or warned:\n%s", logB.String())
	}
	cl := claimOf(t, a, db)
	waitFor(t, "three heartbeats of a", func() bool { n, _ := cl.counts(); return n >= 4 })
	if _, n := cl.counts(); n != 1 {
		t.Fatalf("a attempted %d times: its claim was lost", n)
	}
	if tableKey(t, c, 5) != key || holderPID(t, c, key) != aPID {
		t.Fatal("the claim changed")
	}
	if _, err := nextvalVia(ctxT(t), a, db, oid, 5); err != nil {
		t.Fatal(err)
	}
	if s := logA.String(); strings.Contains(s, squatterMsg) || strings.Contains(s, "claiming again") || strings.Contains(s, "level=ERROR") {
		t.Fatalf("a logged:\n%s", s)
	}
}

// Two proxies with one node on one database: the second reports the first,
// named, once; when the first stops, the second takes the claim over.
func TestNodeClaimConflict(t *testing.T) {
	t.Parallel()
	url, c, db, oid := shimDB(t)

	a := newService(t, url, 6, nil)
	if _, err := nextvalVia(ctxT(t), a, db, oid, 6); err != nil {
		t.Fatal(err)
	}
	aPID := holderPID(t, c, tableKey(t, c, 6))
	var logBuf pgtest.SyncBuffer
	b := newService(t, url, 6, logTo(&logBuf))
	_, err := nextvalVia(ctxT(t), b, db, oid, 6)
	if !errors.Is(err, ErrNodeClaimed) {
		t.Fatalf("second proxy with node 6: %v", err)
	}
	_, err = nextvalVia(ctxT(t), b, db, oid, 6)
	if !errors.Is(err, ErrNodeClaimed) {
		t.Fatalf("second call: %v", err)
	}
	// Another node on b is not affected (a session's SET snowflake.node).
	if _, err := nextvalVia(ctxT(t), b, db, oid, 8); err != nil {
		t.Fatal(err)
	}
	cl := claimOf(t, b, db)
	waitFor(t, "three more attempts of b", func() bool { _, n := cl.counts(); return n >= 4 })
	logs := logBuf.String()
	if n := strings.Count(logs, conflictMsg); n != 1 {
		t.Fatalf("conflict logged %d times:\n%s", n, logs)
	}
	for _, want := range []string{"node=6", "database=" + db, fmt.Sprintf("backend pid %d ", aPID),
		fmt.Sprintf(`role \"%s\"`, pgtest.Shared(t).Superuser()), `application_name \"snowflake-proxy node 6 claim\"`} {
		if !strings.Contains(logs, want) {
			t.Fatalf("log lacks %s:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, squatterMsg) {
		t.Fatalf("a real proxy taken for a squatter:\n%s", logs)
	}
	// When a goes away, b takes the claim over at a heartbeat.
	closeService(t, a)
	waitFor(t, "b to take the claim over", func() bool {
		_, err := nextvalVia(ctxT(t), b, db, oid, 6)
		return err == nil
	})
	if pid := holderPID(t, c, tableKey(t, c, 6)); pid == aPID || !isClaimSession(t, c, pid, 6) {
		t.Fatal("b does not hold the claim")
	}
	if !strings.Contains(logBuf.String(), "node claim acquired after the other proxy went away") {
		t.Fatalf("take-over not logged:\n%s", logBuf.String())
	}
}

// Two proxies with one node starting at once on a database without the
// claim table: both create it, one claims, the other reports it; no error
// of the concurrent CREATE TABLE leaks (the other committing between its
// two checks gives 42710 for the row type: the rounds give that narrow race
// chances to happen).
func TestClaimConcurrentStart(t *testing.T) {
	for round := range 8 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			t.Parallel()
			url, c, db, oid := shimDB(t)
			svcs := []*Service{newService(t, url, 9, nil), newService(t, url, 9, nil)}
			errs := make([]error, 2)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i, s := range svcs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[i] = nextvalVia(ctxT(t), s, db, oid, 9)
				}()
			}
			close(start)
			wg.Wait()
			won := 0
			for _, err := range errs {
				switch {
				case err == nil:
					won++
				case !errors.Is(err, ErrNodeClaimed):
					t.Fatalf("claim failed: %v", err)
				}
			}
			if won != 1 {
				t.Fatalf("%d claims held: %v", won, errs)
			}
			if queryInt(t, c, "SELECT count(*) FROM snowflake._claims") != 1 {
				t.Fatal("want one row")
			}
			if queryInt(t, c, "SELECT count(*) FROM information_schema.role_table_grants WHERE table_name = '_claims' AND grantee = 'PUBLIC'") != 0 {
				t.Fatal("PUBLIC has privileges on the claim table")
			}
		})
	}
}

// Another session's CREATE TABLE of the claim table, still open, makes the
// claim's own CREATE TABLE wait: once that session commits, the claim's
// fails (unique_violation on a catalog index) and the claim goes on with
// the committed table; once it rolls back, the claim's succeeds.
func TestClaimTableCreatedConcurrently(t *testing.T) {
	for _, end := range []string{"COMMIT", "ROLLBACK"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			url, c, db, oid := shimDB(t)
			other := connect(t, url)
			mustExec(t, other, "BEGIN")
			mustExec(t, other, claimTableSQL)
			a := newService(t, url, 9, nil)
			errc := make(chan error, 1)
			go func() {
				_, err := nextvalVia(ctxT(t), a, db, oid, 9)
				errc <- err
			}()
			waitFor(t, "the claim's CREATE TABLE to wait", func() bool {
				return queryInt(t, c, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
					WHERE NOT l.granted AND a.application_name = 'snowflake-proxy node 9 claim'`) > 0
			})
			mustExec(t, other, end)
			select {
			case err := <-errc:
				if err != nil {
					t.Fatalf("claim: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("claim did not finish")
			}
			if queryInt(t, c, "SELECT count(*) FROM snowflake._claims WHERE node = 9") != 1 {
				t.Fatal("no claim row")
			}
		})
	}
}

// A control role that is no superuser but owns schema snowflake (it
// installed the shim) creates the table and is recognised as a proxy by
// others through its privileges.
func TestClaimControlRoleOwnsSchema(t *testing.T) {
	t.Parallel()
	url := newDB(t)
	c := connect(t, url)
	db := dbName(t, c)
	ctl, ctlURL := testRole(t, c, url, "ctl")
	mustExec(t, c, "GRANT CREATE ON DATABASE "+db+" TO "+ctl)
	cc := connect(t, ctlURL)
	install(t, cc)
	mustExec(t, cc, "CREATE SCHEMA app")
	mustExec(t, cc, "CREATE SEQUENCE app.s")
	oid := seqOID(t, cc, "app.s")

	a := newService(t, ctlURL, 2, nil)
	if _, err := nextvalVia(ctxT(t), a, db, oid, 2); err != nil {
		t.Fatal(err)
	}
	if owner := queryText(t, c, "SELECT tableowner::text FROM pg_tables WHERE schemaname = 'snowflake' AND tablename = '_claims'"); owner != ctl {
		t.Fatalf("table owned by %q", owner)
	}
	var logBuf pgtest.SyncBuffer
	b := newService(t, url, 2, logTo(&logBuf))
	if _, err := nextvalVia(ctxT(t), b, db, oid, 2); !errors.Is(err, ErrNodeClaimed) {
		t.Fatalf("second proxy with node 2: %v", err)
	}
	if !strings.Contains(logBuf.String(), fmt.Sprintf(`role \"%s\"`, ctl)) {
		t.Fatalf("conflict does not name %s:\n%s", ctl, logBuf.String())
	}
}

// A control role that may neither create nor use the table cannot claim:
// the fast path stays off there, logged once, until it is granted CREATE on
// the schema.
func TestClaimWithoutTablePrivilege(t *testing.T) {
	t.Parallel()
	url, c, db, oid := shimDB(t)
	weak, weakURL := testRole(t, c, url, "weak")
	mustExec(t, c, "GRANT USAGE, UPDATE ON SEQUENCE s TO "+weak)
	mustExec(t, c, "GRANT EXECUTE ON FUNCTION snowflake._lease(regclass, integer, bigint, bigint, bigint), snowflake._release(regclass, integer, bigint, bigint) TO "+weak)

	var logBuf pgtest.SyncBuffer
	a := newService(t, weakURL, 7, logTo(&logBuf))
	if _, err := nextvalVia(ctxT(t), a, db, oid, 7); !errors.Is(err, errClaimTable) || errors.Is(err, ErrNodeClaimed) {
		t.Fatalf("claim without privileges: %v", err)
	}
	cl := claimOf(t, a, db)
	waitFor(t, "three more attempts", func() bool { _, n := cl.counts(); return n >= 4 })
	if n := strings.Count(logBuf.String(), "level=ERROR"); n != 1 || !strings.Contains(logBuf.String(), "CREATE on schema snowflake") {
		t.Fatalf("want one error naming the grant:\n%s", logBuf.String())
	}
	mustExec(t, c, "GRANT CREATE ON SCHEMA snowflake TO "+weak)
	waitFor(t, "the claim after the grant", func() bool {
		_, err := nextvalVia(ctxT(t), a, db, oid, 7)
		return err == nil
	})
}

// Without the shim there is no claim and nothing is created; the claim
// follows the shim being installed, dropped with its table and installed
// again, and still sees another proxy afterwards.
func TestClaimFollowsShim(t *testing.T) {
	t.Parallel()
	url := newDB(t)
	c := connect(t, url)
	mustExec(t, c, "CREATE SEQUENCE s")
	db, oid := dbName(t, c), seqOID(t, c, "s")
	a := newService(t, url, 4, nil)
	if _, err := nextvalVia(ctxT(t), a, db, oid, 4); !errors.Is(err, ErrNoShim) || errors.Is(err, ErrNodeClaimed) {
		t.Fatalf("no shim: %v", err)
	}
	if queryInt(t, c, "SELECT count(*) FROM pg_namespace WHERE nspname = 'snowflake'") != 0 {
		t.Fatal("the claim created schema snowflake")
	}
	install(t, c)
	a.ExtensionChanged(db)
	if _, err := nextvalVia(ctxT(t), a, db, oid, 4); err != nil {
		t.Fatalf("after CREATE EXTENSION: %v", err)
	}

	// DROP EXTENSION drops the table with the shim's schema; no object
	// of the claim stands in its way.
	mustExec(t, c, extSQL(t, plan.DropExtension, nil))
	wantNotices(t, c)
	cl := claimOf(t, a, db)
	waitFor(t, "the claim to notice", func() bool { return errors.Is(cl.result(), ErrNoShim) })
	install(t, c)
	waitFor(t, "the claim after the shim is back", func() bool {
		_, err := nextvalVia(ctxT(t), a, db, oid, 4)
		return err == nil
	})
	b := newService(t, url, 4, nil)
	if _, err := nextvalVia(ctxT(t), b, db, oid, 4); !errors.Is(err, ErrNodeClaimed) {
		t.Fatalf("second proxy after reinstall: %v", err)
	}
}

// DROP EXTENSION in a schema snowflake that existed before the shim drops
// the claim table (owned by the control role) with the shim's objects, also
// when the installer is the schema's owner and no superuser.
func TestClaimTableInPreexistingSchema(t *testing.T) {
	for _, tc := range []struct {
		name  string
		owner bool // a role of its own owns the schema and installs
	}{
		{"superuser installs", false},
		{"schema owner installs", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := newDB(t)
			c := connect(t, url)
			db := dbName(t, c)
			mustExec(t, c, "CREATE SCHEMA snowflake")
			mustExec(t, c, "CREATE TABLE snowflake.keep (x int)")
			ic := c
			if tc.owner {
				inst, instURL := testRole(t, c, url, "inst")
				mustExec(t, c, "ALTER SCHEMA snowflake OWNER TO "+inst)
				mustExec(t, c, "GRANT USAGE, CREATE ON SCHEMA public TO "+inst)
				ic = connect(t, instURL)
			}
			install(t, ic)
			mustExec(t, ic, "CREATE SEQUENCE public.s")
			oid := seqOID(t, c, "public.s")
			a := newService(t, url, 1, nil)
			if _, err := nextvalVia(ctxT(t), a, db, oid, 1); err != nil {
				t.Fatal(err)
			}
			if queryInt(t, c, "SELECT count(*) FROM pg_tables WHERE schemaname = 'snowflake' AND tablename = '_claims'") != 1 {
				t.Fatal("no claim table")
			}
			mustExec(t, ic, extSQL(t, plan.DropExtension, nil))
			wantNotices(t, ic)
			if queryInt(t, c, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'snowflake'::regnamespace") != 0 {
				t.Fatal("shim functions left")
			}
			if queryInt(t, c, "SELECT count(*) FROM pg_class WHERE relnamespace = 'snowflake'::regnamespace") != 1 {
				t.Fatal("want only snowflake.keep left")
			}
			// Installed again, the claim works in the same schema.
			install(t, ic)
			a.ExtensionChanged(db)
			waitFor(t, "the claim after reinstall", func() bool {
				_, err := nextvalVia(ctxT(t), a, db, oid, 1)
				return err == nil
			})
		})
	}
}

// The claim tables the control role creates keep none of the grants its
// default privileges would give: a role that may UPDATE snowflake._claims
// counts as a proxy, and one that may write snowflake_proxy.node_claims
// could free a node a live proxy holds (regression).
func TestClaimTablesIgnoreDefaultPrivileges(t *testing.T) {
	t.Parallel()
	url, c, db, oid := shimDB(t)
	role, _ := testRole(t, c, url, "clmdef")
	mustExec(t, c, "ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO "+role)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.Exec(ctx, "ALTER DEFAULT PRIVILEGES REVOKE ALL ON TABLES FROM "+role)
	})
	a := newService(t, url, 4, nil)
	if _, err := nextvalVia(ctxT(t), a, db, oid, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := claimNode(t, AutoNodeConfig{ControlURL: url, Min: 9, Max: 9}); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"snowflake._claims", "snowflake_proxy.node_claims"} {
		if queryInt(t, c, "SELECT has_table_privilege($1, $2, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE')::int", role, table) != 0 {
			t.Errorf("%s holds privileges on %s: %s", role, table,
				queryText(t, c, fmt.Sprintf("SELECT relacl::text FROM pg_class WHERE oid = '%s'::regclass", table)))
		}
	}
}
