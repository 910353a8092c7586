package compat

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

// Tests of the per-row path (docs/state-model.md, "Blocks").

// serverMsSQL is the server's clock in milliseconds since the snowflake
// epoch, as the shim's _issue computes it.
const serverMsSQL = "(floor(date_part('epoch', clock_timestamp()) * 1000)::bigint - 1672531200000)"

// perRow runs one statement that calls snowflake.nextval(seq) for n rows
// and returns the IDs in row order, with the number of calls that ran the
// slow path (_nextval_slow), counted in the statement's transaction.
func perRow(t *testing.T, c *testConn, seq string, n int) (ids []int64, slow int64) {
	t.Helper()
	ctx := ctxT(t)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The counts not yet flushed to the statistics may include earlier
	// transactions': the difference is this statement's.
	const calls = `SELECT coalesce(pg_stat_get_xact_function_calls(
		'snowflake._nextval_slow(regclass)'::regprocedure), 0)`
	var before int64
	if err := tx.QueryRow(ctx, calls).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT array_agg(v ORDER BY g) FROM
		(SELECT g, snowflake.nextval($1::regclass) AS v FROM generate_series(1, $2) g) x`, seq, n).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, calls).Scan(&slow); err != nil {
		t.Fatal(err)
	}
	slow -= before
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return ids, slow
}

// sessionDraws are the IDs one session gets from a goroutine: each
// statement's (an array of IDs) must be above everything the session got
// before and, when node is set, carry its bits; they go into ids as who's.
type sessionDraws struct {
	t    *testing.T
	ids  *idSet
	who  string
	node int
	last int64
}

// take runs sql on c, checks and records its IDs and returns them; nil
// (the test marked failed) when the statement fails.
func (s *sessionDraws) take(c *testConn, sql string) []int64 {
	var got []int64
	if err := c.QueryRow(context.Background(), sql).Scan(&got); err != nil {
		s.t.Error(err)
		return nil
	}
	for _, id := range got {
		if _, n, _ := generator.Decompose(id); (s.node != 0 && n != s.node) || id <= s.last {
			s.t.Errorf("%s: %v after %v", s.who, generator.Decode(id), generator.Decode(s.last))
		}
		s.last = id
		s.ids.add(id, s.who)
	}
	return got
}

// increasing fails the test unless ids increase and carry node's bits.
func increasing(t *testing.T, what string, ids []int64, node int) {
	t.Helper()
	var last int64
	for i, id := range ids {
		if _, n, _ := generator.Decompose(id); n != node {
			t.Fatalf("%s: id %d of %d has node %d, want %d", what, i, len(ids), n, node)
		}
		if id <= last {
			t.Fatalf("%s: id %d %v not above %v", what, i, generator.Decode(id), generator.Decode(last))
		}
		last = id
	}
}

// The per-row path takes its IDs from blocks: the plan holds the block
// sequences, few calls run the slow path, the IDs follow the rule (one
// count apart within a millisecond, dated at the server's clock), and the
// sequence covers every one. Without blocks every call is slow.
func TestBlocksPerRow(t *testing.T) {
	t.Parallel()
	_, c, _, oid := shimDB(t)
	mustExec(t, c, "CREATE SEQUENCE plain")
	if made := queryInt(t, c, "SELECT snowflake._blocks('s', 3)::int"); made != 1 {
		t.Fatalf("_blocks made %d", made)
	}
	if again := queryInt(t, c, "SELECT snowflake._blocks('s', 3)::int"); again != 0 {
		t.Fatalf("_blocks made them twice")
	}
	mustExec(t, c, "SET snowflake.node = 3")

	plan := explainVerbose(t, c, "SELECT snowflake.nextval('s')")
	if want := fmt.Sprintf("nextval('snowflake._blk_%d_3'::regclass)", oid); !strings.Contains(plan, want) {
		t.Fatalf("plan %q does not draw %s", plan, want)
	}

	const n = 20000
	before := queryInt(t, c, "SELECT "+serverMsSQL)
	ids, slow := perRow(t, c, "s", n)
	after := queryInt(t, c, "SELECT "+serverMsSQL)
	if len(ids) != n {
		t.Fatalf("%d ids", len(ids))
	}
	increasing(t, "per-row", ids, 3)
	if slow >= n/2 {
		t.Fatalf("%d of %d calls ran the slow path", slow, n)
	}
	steps := 0
	for i, id := range ids {
		ms, _, cnt := generator.Decompose(id)
		if ms < before || ms > after+int64(n/1024)+1 {
			t.Fatalf("id %d dated %d, the statement ran from %d to %d", i, ms, before, after)
		}
		if i > 0 {
			pms, _, pcnt := generator.Decompose(ids[i-1])
			if ms == pms && cnt == pcnt+1 {
				steps++
			}
		}
	}
	if steps == 0 {
		t.Fatalf("no two IDs one count apart")
	}
	lv := queryInt(t, c, "SELECT last_value FROM s")
	if generator.PositionOf(lv) < generator.PositionOf(ids[n-1]) {
		t.Fatalf("s.last_value %v below the last id %v", generator.Decode(lv), generator.Decode(ids[n-1]))
	}
	if cur := queryInt(t, c, "SELECT snowflake.currval('s')"); cur != ids[n-1] {
		t.Fatalf("currval %v, want the last id %v", generator.Decode(cur), generator.Decode(ids[n-1]))
	}

	plainIDs, plainSlow := perRow(t, c, "plain", 200)
	increasing(t, "without blocks", plainIDs, 3)
	if plainSlow != 200 {
		t.Fatalf("without blocks %d of 200 calls ran the slow path", plainSlow)
	}
}

// Per-row statements of several sessions and nodes, single calls and the
// proxy's fast path (leases) on one sequence: no ID twice, each session's
// IDs increasing across its statements.
func TestBlocksWithLeasesAndOtherNodes(t *testing.T) {
	t.Parallel()
	url, c, db, oid := shimDB(t)
	mustExec(t, c, "SELECT snowflake._blocks('s', 5), snowflake._blocks('s', 6)")
	svc := newService(t, url, 5, nil)
	ids := newIDSet(t)
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last int64
			for i := 0; i < 3000; i++ {
				id, err := nextvalVia(context.Background(), svc, db, oid, 5)
				if err != nil {
					t.Error(err)
					return
				}
				if id <= last {
					t.Errorf("fast path: %v after %v", generator.Decode(id), generator.Decode(last))
				}
				last = id
				ids.add(id, "fast")
			}
		}()
	}
	for g, node := range []int{5, 5, 6} {
		sc := connect(t, url)
		mustExec(t, sc, fmt.Sprintf("SET snowflake.node = %d", node))
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &sessionDraws{t: t, ids: ids, who: fmt.Sprintf("per-row %d", g), node: node}
			for i := 0; i < 8; i++ {
				if d.take(sc, "SELECT array_agg(snowflake.nextval('s') ORDER BY g) FROM generate_series(1, 700) g") == nil ||
					d.take(sc, "SELECT ARRAY[snowflake.nextval('s')]") == nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if want := 2*3000 + 3*8*701; len(ids.seen) != want {
		t.Fatalf("%d ids, want %d", len(ids.seen), want)
	}
	lv := queryInt(t, c, "SELECT last_value FROM s")
	for id := range ids.seen {
		if _, n, _ := generator.Decompose(id); n == 6 && generator.PositionOf(id) > generator.PositionOf(lv) {
			t.Fatalf("s.last_value %v below %v", generator.Decode(lv), generator.Decode(id))
		}
	}
}

// A block made before a lease is not used after it: a session that got a
// fast-path ID from the lease gets a larger ID from its next per-row call,
// however the clocks stand. (A fast-path ID after a shim ID is ordered by
// the proxy's fence, which this test does not take.) The sequence is set
// ten seconds ahead, so that each block stays live for the slow path
// (which takes IDs from a block ahead of the clock) until the test ends.
func TestBlockNotUsedAfterALease(t *testing.T) {
	t.Parallel()
	url, c, db, oid := shimDB(t)
	mustExec(t, c, "SELECT snowflake._blocks('s', 5)")
	mustExec(t, c, "SET snowflake.node = 5")
	svc := newService(t, url, 5, nil)
	// A lease ends the live block: R keeps the block's start (no later
	// block may lie below it) and reads as NULL.
	queryInt(t, c, "SELECT snowflake.nextval('s')")
	r := queryInt(t, c, fmt.Sprintf("SELECT last_value FROM snowflake._blkd_%d_5", oid))
	if _, err := nextvalVia(ctxT(t), svc, db, oid, 5); err != nil {
		t.Fatal(err)
	}
	var after int64
	var called bool
	if err := c.QueryRow(ctxT(t), fmt.Sprintf("SELECT last_value, is_called FROM snowflake._blkd_%d_5", oid)).Scan(&after, &called); err != nil {
		t.Fatal(err)
	}
	if after != r || called || r == 0 {
		t.Fatalf("R after the lease: %v (called %v), want %v uncalled", generator.Decode(after), called, generator.Decode(r))
	}
	for i := 0; i < 50; i++ {
		shim := queryInt(t, c, "SELECT snowflake.nextval('s')")
		fast, err := nextvalVia(ctxT(t), svc, db, oid, 5)
		if err != nil {
			t.Fatal(err)
		}
		next := queryInt(t, c, "SELECT snowflake.nextval('s')")
		if next <= fast || next <= shim {
			t.Fatalf("round %d: shim %v, fast path %v, shim %v", i,
				generator.Decode(shim), generator.Decode(fast), generator.Decode(next))
		}
	}
}

// IDs drawn in transactions that roll back, in subtransactions rolled back
// and in prepared transactions are never issued again.
func TestBlocksAcrossRollbacksAndPreparedTransactions(t *testing.T) {
	t.Parallel()
	url, c, _, oid := shimDB(t)
	mustExec(t, c, "SELECT snowflake._blocks('s', 9)")
	ids := newIDSet(t)
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		sc := connect(t, url)
		mustExec(t, sc, "SET snowflake.node = 9")
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			d := &sessionDraws{t: t, ids: ids, who: fmt.Sprintf("session %d", g)}
			const draw = "SELECT array_agg(snowflake.nextval('s') ORDER BY g) FROM generate_series(1, 300) g"
			for i := 0; i < 6; i++ {
				gid := fmt.Sprintf("blocks_%d_%d_%d", oid, g, i)
				for _, stmt := range []string{"BEGIN", draw, "SAVEPOINT a", draw, "ROLLBACK TO a", draw} {
					if stmt == draw {
						if d.take(sc, draw) == nil {
							return
						}
					} else if _, err := sc.Exec(ctx, stmt); err != nil {
						t.Error(err)
						return
					}
				}
				end := []string{"ROLLBACK", "COMMIT", "PREPARE TRANSACTION '" + gid + "'"}[i%3]
				if _, err := sc.Exec(ctx, end); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 2 {
					fin := []string{"COMMIT PREPARED", "ROLLBACK PREPARED"}[i%2]
					if _, err := sc.Exec(ctx, fin+" '"+gid+"'"); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(ids.seen) != 3*6*3*300 {
		t.Fatalf("%d ids", len(ids.seen))
	}
}

// A role without privileges draws the block sequence by hand and holds
// every lock it can get while other roles' per-row calls run with a short
// lock_timeout: none of them waits or fails, none repeats an ID, and the
// role itself gets no ID from snowflake.nextval.
func TestBlocksDrawnByHandAndSquatted(t *testing.T) {
	t.Parallel()
	url, c, _, oid := shimDB(t)
	closeLockWindow(t, c)
	mustExec(t, c, "SELECT snowflake._blocks('s', 2)")
	_, squatURL := testRole(t, c, url, "bsquat")
	ids := newIDSet(t)

	sq := connect(t, squatURL)
	mustExec(t, sq, "SET snowflake.node = 2")
	blk := fmt.Sprintf("snowflake._blk_%d_2", oid)
	wantErr(t, pgErr(t, sq, "SELECT snowflake.nextval('s')"), "42501", "permission denied for sequence s")
	wantErr(t, pgErr(t, sq, fmt.Sprintf("SELECT setval('%s', 1)", blk)), "42501", fmt.Sprintf("permission denied for sequence _blk_%d_2", oid))
	wantErr(t, pgErr(t, sq, fmt.Sprintf("SELECT setval('snowflake._blkd_%d_2', 1)", oid)), "42501", fmt.Sprintf("permission denied for sequence _blkd_%d_2", oid))
	wantErr(t, pgErr(t, sq, fmt.Sprintf("SELECT nextval('snowflake._blkd_%d_2')", oid)), "42501", fmt.Sprintf("permission denied for sequence _blkd_%d_2", oid))
	mustExec(t, sq, "SELECT pg_advisory_lock($1)", advisoryKey(oid))
	mustExec(t, sq, "BEGIN")
	mustExec(t, sq, fmt.Sprintf("SELECT nextval('%s')", blk))
	mustExec(t, sq, fmt.Sprintf("SELECT last_value FROM snowflake._blkd_%d_2", oid))
	mustExec(t, sq, "PREPARE squat AS UPDATE snowflake._locks SET slot = slot")

	stop := make(chan struct{})
	var drew sync.WaitGroup
	drawer := connect(t, squatURL)
	drew.Add(1)
	go func() {
		defer drew.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := drawer.Exec(context.Background(),
				fmt.Sprintf("SELECT count(nextval('%s')) FROM generate_series(1, 5000)", blk)); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		user, userURL := testRole(t, c, url, fmt.Sprintf("buser%d", g))
		mustExec(t, c, "GRANT USAGE ON SEQUENCE s TO "+user)
		uc := connect(t, userURL)
		mustExec(t, uc, "SET snowflake.node = 2")
		mustExec(t, uc, "SET lock_timeout = '200ms'")
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &sessionDraws{t: t, ids: ids, who: fmt.Sprintf("user %d", g)}
			for i := 0; i < 10; i++ {
				if d.take(uc, "SELECT array_agg(snowflake.nextval('s') ORDER BY g) FROM generate_series(1, 500) g") == nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	drew.Wait()
	mustExec(t, sq, "ROLLBACK")
	if len(ids.seen) != 3*10*500 {
		t.Fatalf("%d ids", len(ids.seen))
	}
}

// The per-row path refuses what the extension refuses, with its errors,
// also while a live block would have IDs to give.
func TestBlocksErrorsAsTheExtension(t *testing.T) {
	t.Parallel()
	url, c, _, oid := shimDB(t)
	mustExec(t, c, "SELECT snowflake._blocks('s', 4)")
	mustExec(t, c, "SET snowflake.node = 4")
	queryInt(t, c, "SELECT snowflake.nextval('s')")
	reader, readerURL := testRole(t, c, url, "breader")
	mustExec(t, c, "GRANT SELECT ON SEQUENCE s TO "+reader)
	rc := connect(t, readerURL)
	mustExec(t, rc, "SET snowflake.node = 4")
	for i := 0; i < 3; i++ {
		wantErr(t, pgErr(t, rc, "SELECT snowflake.nextval('s') FROM generate_series(1, 10)"), "42501", "permission denied for sequence s")
	}
	mustExec(t, c, "BEGIN READ ONLY")
	wantErr(t, pgErr(t, c, "SELECT snowflake.nextval('s')"), "25006", "cannot execute nextval() in a read-only transaction")
	mustExec(t, c, "ROLLBACK")
	mustExec(t, c, "RESET snowflake.node")
	wantErr(t, pgErr(t, c, "SELECT snowflake.nextval('s')"), "F0000", "value for snowflake.node is not set")
	mustExec(t, c, "SET snowflake.node = 'x'")
	wantErr(t, pgErr(t, c, "SELECT snowflake.nextval('s')"), "22P02", `invalid input syntax for type integer: "x"`)
	mustExec(t, c, "SET snowflake.node = 4")
	for _, sql := range []string{"SELECT snowflake.nextval('s')", "SELECT * FROM snowflake.nextval('s')"} {
		if id := queryInt(t, c, sql); id <= 0 {
			t.Fatalf("%s: %d", sql, id)
		}
	}
	// The sequence's drop takes its blocks (the event trigger of a
	// superuser's install).
	mustExec(t, c, "DROP SEQUENCE s")
	if n := queryInt(t, c, fmt.Sprintf(`SELECT count(*) FROM pg_class WHERE relnamespace = 'snowflake'::regnamespace
		AND relname ~ '^_blkd?_%d_'`, oid)); n != 0 {
		t.Fatalf("%d block sequences of s left after the drop", n)
	}
}

// A live block serves a call only while it is the session's node's and
// not behind the server's clock; otherwise the call runs the slow path,
// which issues at the clock. A session whose node is another than the one
// its statement was planned for (here: planned again under it, and a
// prepared statement planned before the change) takes nothing from the
// block of the plan's node.
func TestBlockRefusedBehindTheClockOrOfAnotherNode(t *testing.T) {
	t.Parallel()
	_, c, _, oid := shimDB(t)
	mustExec(t, c, "SELECT snowflake._blocks('s', 5)")
	mustExec(t, c, "SET snowflake.node = 5")
	queryInt(t, c, "SELECT snowflake.nextval('s')")
	// Without parameters its plan is generic, made at the first EXECUTE.
	mustExec(t, c, "PREPARE planned_at_5 AS SELECT snowflake.nextval('s')")
	queryInt(t, c, "EXECUTE planned_at_5")
	// setBlock makes [d, d + 1023] node 5's live block as a jump does (B,
	// then R), with d at the server's clock plus msAhead.
	setBlock := func(msAhead int64) int64 {
		t.Helper()
		d := queryInt(t, c, fmt.Sprintf("SELECT ((%s + %d) << 22) | (5 << 12)", serverMsSQL, msAhead))
		mustExec(t, c, fmt.Sprintf("SELECT setval('snowflake._blk_%d_5', %d, false), setval('snowflake._blkd_%d_5', %d)", oid, d, oid, d))
		return d
	}
	for _, tc := range []struct {
		name      string
		msAhead   int64
		node      int
		prepared  bool
		fromBlock bool
	}{
		{"behind the clock", -50, 5, false, false},
		{"another node's", 60_000, 7, false, false},
		{"another node's, planned at node 5", 60_000, 7, true, false},
		{"ahead of the clock", 60_000, 5, false, true},
		{"ahead of the clock, prepared", 60_000, 5, true, true},
	} {
		d := setBlock(tc.msAhead)
		mustExec(t, c, fmt.Sprintf("SET snowflake.node = %d", tc.node))
		before := queryInt(t, c, "SELECT "+serverMsSQL)
		var ids []int64
		var slow int64
		if tc.prepared {
			const calls = "SELECT coalesce(pg_stat_get_xact_function_calls('snowflake._nextval_slow(regclass)'::regprocedure), 0)"
			mustExec(t, c, "BEGIN")
			was := queryInt(t, c, calls)
			ids = []int64{queryInt(t, c, "EXECUTE planned_at_5")}
			slow = queryInt(t, c, calls) - was
			mustExec(t, c, "COMMIT")
		} else {
			ids, slow = perRow(t, c, "s", 1)
		}
		id := ids[0]
		inBlock := id >= d && id <= d+1023
		if tc.fromBlock {
			if id != d || slow != 0 {
				t.Errorf("%s: got %v (slow path %d), want %v from the block", tc.name, generator.Decode(id), slow, generator.Decode(d))
			}
			continue
		}
		ms, node, _ := generator.Decompose(id)
		if inBlock || slow != 1 || node != tc.node || ms < before {
			t.Errorf("%s: got %v (slow path %d), want the slow path's ID of node %d at or after ms %d, not from the block at %v",
				tc.name, generator.Decode(id), slow, tc.node, before, generator.Decode(d))
		}
	}
}

// The clock test of nextval: to_timestamp((ms + epoch + 1) / 1000) is the
// exact start of the millisecond after ms, for every millisecond a
// snowflake can carry, so that now < it holds exactly when floor(now in
// ms) <= ms.
func TestBlockClockTestIsExact(t *testing.T) {
	t.Parallel()
	_, c, _, _ := shimDB(t)
	const maxMs = 1<<41 - 1
	bad := queryInt(t, c, fmt.Sprintf(`SELECT count(*) FROM (
		SELECT m FROM unnest(ARRAY[0, 1, 999, 1000, 1001, 123259469176, %d]::bigint[]) m
		UNION ALL SELECT (random() * %d)::bigint FROM generate_series(1, 100000)) x
		WHERE pg_catalog.to_timestamp(((m) + 1672531200001)::pg_catalog.float8 / 1000)
		   <> '2023-01-01 00:00:00+00'::timestamptz + (m + 1) * interval '1 millisecond'`, maxMs, maxMs))
	if bad != 0 {
		t.Fatalf("%d milliseconds whose next one to_timestamp does not give exactly", bad)
	}
}

// Regression: with one B for every node, a lower node's block made in the
// same millisecond as a higher node's live block lay below it, and the
// jump took B down to it. B, drawn on past the new block's end (by hand,
// or by callers the slow path had not yet served), then handed out the
// live block's IDs a second time, and a call of the higher node that had
// read R before the jump accepted them. Each node now has its own B: the
// lower node's block in the same millisecond leaves the higher node's
// alone, live or ended by a lease, and the lower node's B drawn by hand
// into the higher node's counts gives no call an ID twice.
func TestBlockOfALowerNodeNeverTakesBBackIntoALiveBlock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ended bool
	}{{"live block", false}, {"block a lease ended", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, c, _, _ := shimDB(t)
			high := connect(t, url)
			mustExec(t, high, "SET snowflake.node = 3")
			low := connect(t, url)
			mustExec(t, low, "SET snowflake.node = 2")
			draws := func(seq string, n int) string {
				return fmt.Sprintf("SELECT array_agg(snowflake.nextval('%s') ORDER BY g) FROM generate_series(1, %d) g", seq, n)
			}
			// Node 2's call must come in the millisecond of node 3's block,
			// which lies 5 ms ahead of the clock (as far as a block may):
			// a sequence of its own for each try, until one does.
			for try := 0; ; try++ {
				if try == 50 {
					t.Fatal("node 2's call never came in the millisecond of node 3's block")
				}
				seq := fmt.Sprintf("s%d", try)
				mustExec(t, c, "CREATE SEQUENCE "+seq)
				oid := seqOID(t, c, seq)
				mustExec(t, c, fmt.Sprintf("SELECT snowflake._blocks('%s', 2), snowflake._blocks('%s', 3)", seq, seq))
				mustExec(t, high, fmt.Sprintf("SELECT setval('%s', (%s + 5) << 22)", seq, serverMsSQL))
				ids := newIDSet(t)
				highDraws := &sessionDraws{t: t, ids: ids, who: "node 3", node: 3}
				lowDraws := &sessionDraws{t: t, ids: ids, who: "node 2", node: 2}
				highIDs := highDraws.take(high, draws(seq, 10))
				if highIDs == nil {
					t.FailNow()
				}
				if tc.ended {
					// As _lease ends a block (TestBlockNotUsedAfterALease):
					// R keeps its value and reads as NULL.
					mustExec(t, high, fmt.Sprintf("SELECT setval('snowflake._blkd_%d_3', last_value, false) FROM snowflake._blkd_%d_3", oid, oid))
				}
				lowIDs := lowDraws.take(low, draws(seq, 3))
				if lowIDs == nil {
					t.FailNow()
				}
				if lowIDs[0] > highIDs[0] {
					continue // the clock passed the block's millisecond first
				}
				// From anywhere in node 2's counts of that millisecond,
				// 5,000 draws of node 2's B reach node 3's; the calls of
				// both nodes that follow issue no ID twice (ids).
				mustExec(t, c, fmt.Sprintf("SELECT count(nextval('snowflake._blk_%d_2')) FROM generate_series(1, 5000)", oid))
				if highDraws.take(high, draws(seq, 10)) == nil || lowDraws.take(low, draws(seq, 10)) == nil {
					t.FailNow()
				}
				return
			}
		})
	}
}

// Regression: a block takes the rest of its millisecond's counts (in the
// zone, while a lease reaches past the clock, all of them), so two nodes
// taking per-row calls in turn each made a block a millisecond after the
// other's and dated their IDs further and further ahead of the clock
// (over a second in 15,000 calls). No block starts more than 5 ms after
// the server's clock; past that a call issues one ID.
func TestBlocksOfTwoNodesInTurnStayNearTheClock(t *testing.T) {
	t.Parallel()
	url, c, db, oid := shimDB(t)
	mustExec(t, c, "SELECT snowflake._blocks('s', 1), snowflake._blocks('s', 2)")
	conns := map[int]*testConn{}
	for _, node := range []int{1, 2} {
		// Each node's lease reaches past the clock: its calls are in the
		// zone.
		if _, err := nextvalVia(ctxT(t), newService(t, url, node, nil), db, oid, node); err != nil {
			t.Fatal(err)
		}
		conns[node] = connect(t, url)
		mustExec(t, conns[node], fmt.Sprintf("SET snowflake.node = %d", node))
	}
	ids := newIDSet(t)
	last := map[int]int64{}
	for i := 0; i < 2000; i++ {
		node := 1 + i%2
		var id, idAhead, blockAhead int64
		if err := conns[node].QueryRow(ctxT(t), fmt.Sprintf(`SELECT id, (id >> 22) - now_ms,
				(pg_sequence_last_value('snowflake._blkd_%d_%d') >> 22) - now_ms
			FROM (SELECT snowflake.nextval('s') AS id) x, LATERAL (SELECT %s AS now_ms) y`, oid, node, serverMsSQL)).Scan(&id, &idAhead, &blockAhead); err != nil {
			t.Fatal(err)
		}
		ids.add(id, fmt.Sprintf("node %d", node))
		if id <= last[node] {
			t.Fatalf("node %d: %v after %v", node, generator.Decode(id), generator.Decode(last[node]))
		}
		last[node] = id
		if blockAhead > 5 || idAhead > 100 {
			t.Fatalf("call %d: block %d ms, ID %v %d ms ahead of the clock", i, blockAhead, generator.Decode(id), idAhead)
		}
	}
}

// currval is the ID the session's last call returned. A call that finds
// its node's live block used up, and cannot make the next block because
// it would lie below that one (S set into the past below a block dated
// ahead; here the block is placed a minute ahead of S), issues one ID
// below the block and leaves B alone. currval took the larger of that ID
// and B's session value, the draw the call had refused: an ID nobody was
// given (regression).
func TestCurrvalAfterASingleIDBelowALiveBlock(t *testing.T) {
	t.Parallel()
	_, c, _, oid := shimDB(t)
	mustExec(t, c, "SELECT snowflake._blocks('s', 5)")
	mustExec(t, c, "SET snowflake.node = 5")
	queryInt(t, c, "SELECT snowflake.nextval('s')")
	d := queryInt(t, c, fmt.Sprintf("SELECT ((%s + 60000) << 22) | (5 << 12)", serverMsSQL))
	mustExec(t, c, fmt.Sprintf("SELECT setval('snowflake._blk_%d_5', %d, false), setval('snowflake._blkd_%d_5', %d)", oid, d, oid, d))
	if id := queryInt(t, c, "SELECT snowflake.nextval('s')"); id != d {
		t.Fatalf("got %v, want %v from the block", generator.Decode(id), generator.Decode(d))
	}
	mustExec(t, c, fmt.Sprintf("SELECT count(nextval('snowflake._blk_%d_5')) FROM generate_series(1, 1100)", oid))
	for i := 0; i < 3; i++ {
		id := queryInt(t, c, "SELECT snowflake.nextval('s')")
		if id >= d {
			t.Fatalf("got %v, want an ID below the used-up block at %v", generator.Decode(id), generator.Decode(d))
		}
		for _, q := range []string{"SELECT snowflake.currval('s')", "SELECT snowflake._currval('s', NULL)"} {
			if cur := queryInt(t, c, q); cur != id {
				t.Fatalf("%s: %v, want %v, the ID the last call returned", q, generator.Decode(cur), generator.Decode(id))
			}
		}
	}
}

// A sequence's owner who is no superuser may drop it with its blocks and
// leases: the drop trigger, which runs as that role, removes the block and
// H sequences the installer owns through a function that drops them only
// for a relation that no longer exists. Before, the drop failed with "must
// be owner of sequence _blk_..." (regression). Called by another role for
// a live sequence, that function drops nothing.
func TestDropSequenceByItsOwnerWithBlocks(t *testing.T) {
	t.Parallel()
	url, c, _, _ := shimDB(t)
	owner, ownerURL := testRole(t, c, url, "seqowner")
	mustExec(t, c, "CREATE SCHEMA "+owner+" AUTHORIZATION "+owner)
	o := connect(t, ownerURL)
	mustExec(t, o, "CREATE SEQUENCE "+owner+".os")
	mustExec(t, o, "CREATE TABLE "+owner+".ot (id bigint DEFAULT snowflake.nextval('"+owner+".os'), v int)")
	oid := seqOID(t, c, owner+".os")
	mustExec(t, c, fmt.Sprintf("SELECT snowflake._blocks(%d, 3)", oid))
	mustExec(t, c, fmt.Sprintf("SELECT * FROM snowflake._lease(%d, 3, 0, 0, 0)", oid))
	leftovers := fmt.Sprintf(`SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'snowflake'::regnamespace
		AND (c.relname IN ('_blk_%d_3', '_blkd_%d_3') OR c.relname LIKE '\_hw\_%d\_%%')`, oid, oid, oid)
	if n := queryInt(t, c, leftovers); n != 3 {
		t.Fatalf("%d block and H sequences, want 3", n)
	}

	_, otherURL := testRole(t, c, url, "dropother")
	other := connect(t, otherURL)
	mustExec(t, other, fmt.Sprintf("SELECT snowflake._drop_leftovers(%d)", oid))
	if n := queryInt(t, c, leftovers); n != 3 {
		t.Fatalf("another role's call for a live sequence left %d of 3", n)
	}

	mustExec(t, o, "DROP TABLE "+owner+".ot")
	mustExec(t, o, "DROP SEQUENCE "+owner+".os")
	if n := queryInt(t, c, leftovers); n != 0 {
		t.Fatalf("%d block and H sequences left after the drop", n)
	}
}

// The blocks _blocks_all makes for a session's temporary sequence (a
// default of a temporary table) go when the session ends and takes the
// sequence with it, which fires no drop trigger: the next _blocks_all
// drops them, as it drops those of any sequence that is gone. Before,
// they stayed, two installer-owned sequences per temporary table and
// session (regression).
func TestBlocksOfGoneSequencesDropped(t *testing.T) {
	t.Parallel()
	url, c, _, _ := shimDB(t)
	tmp := connect(t, url)
	mustExec(t, tmp, "CREATE TEMP SEQUENCE ts")
	mustExec(t, tmp, "CREATE TEMP TABLE tt (id bigint DEFAULT snowflake.nextval('ts'), v int)")
	oid := queryInt(t, tmp, "SELECT 'ts'::regclass::oid::bigint")
	blocks := fmt.Sprintf("SELECT count(*) FROM pg_class WHERE relname IN ('_blk_%d_1', '_blkd_%d_1')", oid, oid)
	queryInt(t, c, "SELECT snowflake._blocks_all(1)")
	if n := queryInt(t, c, blocks); n != 2 {
		t.Fatalf("%d block sequences for the temporary sequence, want 2", n)
	}
	if err := tmp.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the temporary sequence to go with its session", func() bool {
		return queryInt(t, c, "SELECT count(*) FROM pg_class WHERE oid = $1", oid) == 0
	})
	queryInt(t, c, "SELECT snowflake._blocks_all(1)")
	if n := queryInt(t, c, blocks); n != 0 {
		t.Fatalf("%d block sequences left after the temporary sequence went", n)
	}
	// Those of live sequences stay.
	if n := queryInt(t, c, fmt.Sprintf("SELECT count(*) FROM pg_class WHERE relname IN ('_blk_%d_1', '_blkd_%d_1')", seqOID(t, c, "snowflake.id_seq"), seqOID(t, c, "snowflake.id_seq"))); n != 2 {
		t.Fatalf("id_seq has %d block sequences, want 2", n)
	}
}

// The per-row expression is planned with B and R looked up one after the
// other; a plan that found B but not R (R made, or dropped, between the
// two lookups, or dropped by hand) folded the strict arithmetic on R to
// NULL, which removed the draw of B with it, and the AND then ran
// currval(B) without a draw: "currval of sequence _blk_... is not yet
// defined" in a session that had not drawn B (regression; seen once from
// a COPY writer of TestMultiMasterOnStockPostgres). Such a plan now takes
// the slow path, as a plan without B does.
func TestPerRowPlanWithBlockButNoBound(t *testing.T) {
	t.Parallel()
	url, c, _, oid := shimDB(t)
	mustExec(t, c, "SELECT snowflake._blocks('s', 5)")
	mustExec(t, c, fmt.Sprintf("DROP SEQUENCE snowflake._blkd_%d_5", oid))
	fresh := connect(t, url)
	mustExec(t, fresh, "SET snowflake.node = 5")
	ids, slow := perRow(t, fresh, "s", 20)
	increasing(t, "per-row calls without R", ids, 5)
	if slow != 20 {
		t.Fatalf("%d of 20 calls ran the slow path, want all", slow)
	}
	if cur := queryInt(t, fresh, "SELECT snowflake.currval('s')"); cur != ids[len(ids)-1] {
		t.Fatalf("currval %v, want %v", generator.Decode(cur), generator.Decode(ids[len(ids)-1]))
	}
}

// Regression (TestSequenceShapes under load, one run in about 8 with two
// CPU burners): the proxy's catalog watch and a lease made the blocks of
// one sequence at once, and the second CREATE SEQUENCE failed with 42710
// (type "_blk_..." already exists: its catalog cache did not show the
// relation the other had committed, and the row type was found), which
// _blocks did not catch; the lease failed, and the statement waiting for
// it went to the shim. Here a type of B's name stands for that state.
func TestBlocksWhoseTypeExistsAlready(t *testing.T) {
	t.Parallel()
	url, c, db, oid := shimDB(t)
	mustExec(t, c, fmt.Sprintf("CREATE DOMAIN snowflake._blk_%d_5 AS int", oid))
	if made := queryInt(t, c, "SELECT snowflake._blocks('s', 5)::int"); made != 0 {
		t.Fatalf("_blocks made blocks over the type (%d)", made)
	}
	svc := newService(t, url, 5, nil)
	if _, err := nextvalVia(ctxT(t), svc, db, oid, 5); err != nil {
		t.Fatalf("the lease failed: %v", err)
	}
}

// An update from a shim that kept one pair of block sequences per sequence
// (_blk_<oid>, _blkd_<oid>): R of each node starts at the pair's last block
// start, so its blocks lie above that one; the pair's block ends at once (a
// plan that still holds the pair calls the slow path); the pair is dropped
// once no transaction holds it, and an open one that drew from it does not
// make the update wait.
func TestSharedBlocksOfEarlierShimsEnded(t *testing.T) {
	t.Parallel()
	url, c, _, oid := shimDB(t)
	// The earlier shim's pair with a live block of node 5 at the clock, S
	// at its top as that shim left it.
	d := queryInt(t, c, fmt.Sprintf("SELECT (%s << 22) | (5 << 12)", serverMsSQL))
	mustExec(t, c, fmt.Sprintf("CREATE SEQUENCE snowflake._blk_%d AS bigint MINVALUE 0 START 0 CYCLE", oid))
	mustExec(t, c, fmt.Sprintf("CREATE SEQUENCE snowflake._blkd_%d AS bigint MINVALUE 0 START 0 NO CYCLE", oid))
	mustExec(t, c, fmt.Sprintf("SELECT setval('snowflake._blk_%d', %d), setval('snowflake._blkd_%d', %d), setval('s', %d)",
		oid, d, oid, d, d+1023))
	mustExec(t, c, "CREATE TABLE t (id bigint DEFAULT snowflake.nextval('s'), v int)")
	holder := connect(t, url)
	mustExec(t, holder, "BEGIN")
	mustExec(t, holder, fmt.Sprintf("SELECT nextval('snowflake._blk_%d')", oid))

	queryInt(t, c, "SELECT snowflake._blocks_all(5)")
	var r int64
	var called bool
	if err := c.QueryRow(ctxT(t), fmt.Sprintf("SELECT last_value, is_called FROM snowflake._blkd_%d_5", oid)).Scan(&r, &called); err != nil {
		t.Fatal(err)
	}
	if r != d || called {
		t.Fatalf("node 5's R starts at %v (called %v), want %v uncalled", generator.Decode(r), called, generator.Decode(d))
	}
	if err := c.QueryRow(ctxT(t), fmt.Sprintf("SELECT is_called FROM snowflake._blkd_%d", oid)).Scan(&called); err != nil {
		t.Fatalf("the pair a transaction holds was dropped: %v", err)
	}
	if called {
		t.Fatal("the pair's block is still live")
	}
	pair := fmt.Sprintf("SELECT count(*) FROM pg_class WHERE relnamespace = 'snowflake'::regnamespace AND relname IN ('_blk_%d', '_blkd_%d')", oid, oid)
	mustExec(t, holder, "COMMIT")
	queryInt(t, c, "SELECT snowflake._blocks_all(5)")
	if n := queryInt(t, c, pair); n != 0 {
		t.Fatalf("%d of the pair left once no transaction held it", n)
	}
	mustExec(t, c, "SET snowflake.node = 5")
	ids, _ := perRow(t, c, "s", 50)
	increasing(t, "after the update", ids, 5)
	if err := c.QueryRow(ctxT(t), fmt.Sprintf("SELECT last_value, is_called FROM snowflake._blkd_%d_5", oid)).Scan(&r, &called); err != nil {
		t.Fatal(err)
	}
	if ids[0] <= d+1023 || r <= d || !called {
		t.Fatalf("first ID %v, node 5's block at %v (live %v), want both above the earlier block's top %v",
			generator.Decode(ids[0]), generator.Decode(r), called, generator.Decode(d+1023))
	}
}

// Regression (TestUniquenessUnderConcurrencyAcrossARestart, once in a
// full CI run: a direct client's per-row ID below the one before it, in
// one statement): _blocks made B and R without the lock. Its commit is
// visible to others before its catalog invalidations are sent; in that
// window a session whose caches held B's name as missing did not find B
// (nor, looking again by name, the pending messages) while another
// session's call had already made the first block, and issued one ID
// above that live block, which its next call then drew from. _blocks now
// holds the lock until its commit: a slow-path call waits, here until its
// lock_timeout, and goes on only after the invalidations are out.
func TestBlocksMadeUnderTheLock(t *testing.T) {
	t.Parallel()
	url, c, _, oid := shimDB(t)
	q := connect(t, url)
	mustExec(t, q, "SET snowflake.node = 5")
	// Planned before the blocks exist: its calls always run the slow path.
	mustExec(t, q, "PREPARE before_blocks AS SELECT snowflake.nextval('s')")
	ids := []int64{queryInt(t, q, "EXECUTE before_blocks")}

	maker := connect(t, url)
	mustExec(t, maker, "BEGIN")
	mustExec(t, maker, "SELECT snowflake._blocks('s', 5)")
	mustExec(t, q, "SET lock_timeout = '200ms'")
	wantErr(t, pgErr(t, q, "EXECUTE before_blocks"), "55P03", "canceling statement due to lock timeout")
	mustExec(t, maker, "COMMIT")
	mustExec(t, q, "RESET lock_timeout")

	// A live block a minute ahead, S at its top, as a call of another
	// session leaves them; the session's calls, with the slow path and
	// planned with the blocks, take their IDs from it.
	d := queryInt(t, c, fmt.Sprintf("SELECT ((%s + 60000) << 22) | (5 << 12)", serverMsSQL))
	mustExec(t, c, fmt.Sprintf("SELECT setval('snowflake._blk_%d_5', %d), setval('snowflake._blkd_%d_5', %d), setval('s', %d)",
		oid, d, oid, d, d+1023))
	ids = append(ids, queryInt(t, q, "EXECUTE before_blocks"), queryInt(t, q, "SELECT snowflake.nextval('s')"))
	increasing(t, "one session's calls", ids, 5)
	if ids[1] <= d || ids[2] > d+1023 {
		t.Fatalf("IDs %v and %v, want both from the block at %v", generator.Decode(ids[1]), generator.Decode(ids[2]), generator.Decode(d))
	}
}
