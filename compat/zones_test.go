package compat

import (
	"fmt"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

// serverPos is the position of the server's clock now, count 0.
func serverPos(t *testing.T, c *testConn) int64 {
	t.Helper()
	ms := queryInt(t, c, "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::int8 - $1", generator.EpochUnixMs)
	return generator.Position(ms, 0)
}

// shimCalls returns count and the distance in ms of the ID ahead of
// clock_timestamp() (negative: behind) for n per-row shim calls on seq.
func shimCalls(t *testing.T, c *testConn, seq string, n int) (counts []int, aheadMs []int64) {
	t.Helper()
	rows, err := c.Query(ctxT(t), fmt.Sprintf(`SELECT snowflake.get_count(x.id),
		((snowflake.get_epoch(x.id) - extract(epoch FROM x.at)) * 1000)::int8
		FROM (SELECT snowflake.nextval('%s') AS id, clock_timestamp() AS at FROM generate_series(1, %d)) x`, seq, n))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var cnt int
		var ahead int64
		if err := rows.Scan(&cnt, &ahead); err != nil {
			t.Fatal(err)
		}
		counts, aheadMs = append(counts, cnt), append(aheadMs, ahead)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return counts, aheadMs
}

// While a lease of its node reaches past the server's clock, the shim
// issues the counts the generator never uses, dated at the clock (issue:
// shim IDs were dated up to two seconds ahead while a lease was live);
// once every lease of the node has ended it follows the pgEdge rule.
func TestShimZones(t *testing.T) {
	url := newDB(t)
	c := connect(t, url)
	install(t, c)
	mustExec(t, c, "CREATE SEQUENCE live")
	mustExec(t, c, "CREATE SEQUENCE ended INCREMENT 100")
	mustExec(t, c, "SET snowflake.node = 4")
	st := leaseStore(t, url)
	db := dbName(t, c)

	hour := generator.Position(3_600_000, 0)
	if _, err := st.Lease(ctxT(t), generator.Key{Database: db, Seq: seqOID(t, c, "live"), Node: 4}, 0, serverPos(t, c)+hour, 0); err != nil {
		t.Fatal(err)
	}
	counts, ahead := shimCalls(t, c, "live", 50)
	for i := range counts {
		if counts[i] < generator.FastPathCounts {
			t.Fatalf("call %d: count %d during a live lease, inside the generator's counts", i, counts[i])
		}
		if ahead[i] > 1 {
			t.Fatalf("call %d: id dated %d ms after the clock during a live lease", i, ahead[i])
		}
	}

	// A lease that ends now; once the server's clock has passed it, the
	// shim is the extension again.
	endKey := generator.Key{Database: db, Seq: seqOID(t, c, "ended"), Node: 4}
	l, err := st.Lease(ctxT(t), endKey, 0, serverPos(t, c), 0)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for serverPos(t, c) <= l.Hi {
		if time.Now().After(deadline) {
			t.Fatal("the server's clock did not pass the lease's end")
		}
	}
	counts, ahead = shimCalls(t, c, "ended", 3)
	if counts[0] != 0 {
		t.Fatalf("first count after the lease ended %d, want 0 (the pgEdge rule at a fresh ms)", counts[0])
	}
	for i := range counts {
		if counts[i] >= generator.FastPathCounts || ahead[i] > 1 {
			t.Fatalf("call %d: count %d, %d ms ahead, after every lease ended", i, counts[i], ahead[i])
		}
	}
}

// Regression (issue: an open transaction turned the fast path off): a
// transaction that used the sequence before the lease created its
// high-water sequence H holds its locks, so its catalog caches keep
// answering "no H". The shim must still find H and keep to its own counts;
// the lease must not wait for that transaction.
func TestShimFindsHighWaterCreatedDuringItsTransaction(t *testing.T) {
	for _, iso := range []string{"READ COMMITTED", "REPEATABLE READ"} {
		t.Run(iso, func(t *testing.T) {
			url := newDB(t)
			c := connect(t, url)
			install(t, c)
			mustExec(t, c, "CREATE SEQUENCE s")
			st := leaseStore(t, url)
			// Another H exists already: the shim has looked for one of s
			// before, with _hw_count moved, and remembered none.
			mustExec(t, c, "CREATE SEQUENCE other")
			otherKey := generator.Key{Database: dbName(t, c), Seq: seqOID(t, c, "other"), Node: 4}
			if _, err := st.Lease(ctxT(t), otherKey, 0, 1, 0); err != nil {
				t.Fatal(err)
			}

			old := connect(t, url)
			mustExec(t, old, "SET snowflake.node = 4")
			mustExec(t, old, "BEGIN ISOLATION LEVEL "+iso)
			first := queryInt(t, old, "SELECT snowflake.nextval('s')")
			if _, _, cnt := generator.Decompose(first); cnt >= generator.FastPathCounts {
				t.Fatalf("count %d with no lease", cnt)
			}

			key := generator.Key{Database: dbName(t, c), Seq: seqOID(t, c, "s"), Node: 4}
			l, err := st.Lease(ctxT(t), key, 0, serverPos(t, c)+generator.Position(3_600_000, 0), 0)
			if err != nil {
				t.Fatalf("lease with an older transaction open: %v", err)
			}
			if l.Floor != generator.PositionOf(first) {
				t.Fatalf("lease %+v does not start at the transaction's id (position %d)", l, generator.PositionOf(first))
			}
			for i := 0; i < 3; i++ {
				id := queryInt(t, old, "SELECT snowflake.nextval('s')")
				if _, _, cnt := generator.Decompose(id); cnt < generator.FastPathCounts {
					t.Fatalf("call %d in the older transaction: count %d inside the live lease's counts", i, cnt)
				}
			}
			mustExec(t, old, "COMMIT")
		})
	}
}

// After an update from a shim whose leases raised the sequence to their
// top, a transaction that was running may still execute that shim's code
// from its caches, which relies on it: until such transactions have ended
// leases keep raising the sequence; afterwards they no longer do.
func TestLeaseRaisesSequenceWhileEarlierShimMayRun(t *testing.T) {
	url := newDB(t)
	c := connect(t, url)
	install(t, c)
	mustExec(t, c, "CREATE SEQUENCE s")
	// What update.sql leaves behind when it adds _hw_count.
	mustExec(t, c, "COMMENT ON SEQUENCE snowflake._hw_count IS NULL")
	old := connect(t, url)
	mustExec(t, old, "BEGIN")
	mustExec(t, old, "SELECT 1")

	st := leaseStore(t, url)
	key := generator.Key{Database: dbName(t, c), Seq: seqOID(t, c, "s"), Node: 2}
	sPos := func() int64 {
		return generator.PositionOf(queryInt(t, c, "SELECT coalesce(pg_sequence_last_value('s'), 0)"))
	}
	comment := func() string {
		var s string
		if err := c.QueryRow(ctxT(t), "SELECT coalesce(obj_description('snowflake._hw_count'::regclass, 'pg_class'), '')").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	l, err := st.Lease(ctxT(t), key, 0, serverPos(t, c)+1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sPos() != l.Hi {
		t.Fatalf("S at %d, want the lease's top %d while an older transaction runs", sPos(), l.Hi)
	}
	if got := comment(); len(got) < 8 || got[:8] != "waiting " {
		t.Fatalf("_hw_count comment %q", got)
	}
	l2, err := st.Lease(ctxT(t), key, l.Hi, l.Hi+1000, 0)
	if err != nil || sPos() != l2.Hi {
		t.Fatalf("second lease %+v (%v): S at %d, still want its top", l2, err, sPos())
	}

	mustExec(t, old, "COMMIT")
	l3, err := st.Lease(ctxT(t), key, l2.Hi, l2.Hi+1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sPos() != l2.Hi || comment() != "settled" {
		t.Fatalf("after the older transaction ended: S at %d (lease %+v), comment %q", sPos(), l3, comment())
	}
	// A fresh install starts settled.
	c2 := connect(t, newDB(t))
	install(t, c2)
	var cmt string
	if err := c2.QueryRow(ctxT(t), "SELECT obj_description('snowflake._hw_count'::regclass, 'pg_class')").Scan(&cmt); err != nil || cmt != "settled" {
		t.Fatalf("fresh install: comment %q (%v)", cmt, err)
	}
}

// Order across the paths in one session: a shim ID that follows a
// fast-path ID is larger, even when the proxy's clock runs ahead of the
// server's (the generator's clock is held back to the server's).
func TestShimAfterFastPathWithProxyClockAhead(t *testing.T) {
	url, c, db, oid := shimDB(t)
	mustExec(t, c, "SET snowflake.node = 5")
	svc, err := New(Config{ControlURL: url, Node: 5, Clock: clockAhead(10_000), Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(ctxT(t)) })
	for i := 0; i < 20; i++ {
		fast, err := nextvalVia(ctxT(t), svc, db, oid, 5)
		if err != nil {
			t.Fatal(err)
		}
		shim := queryInt(t, c, "SELECT snowflake.nextval('s')")
		if shim <= fast {
			t.Fatalf("round %d: shim %d not above the fast path's %d", i, shim, fast)
		}
	}
}

// clockAhead is the system clock moved ms ahead.
type clockAhead int64

func (c clockAhead) NowMs() int64 { return generator.SystemClock{}.NowMs() + int64(c) }

// Regression (state model, before it was released): once a node's lease
// has ended, the shim issues with every count above its top; the next
// lease must make the fast path continue above that, fence or no fence,
// or both paths give the millisecond's count 0.
func TestFastPathAfterShimIDAboveAnEndedLease(t *testing.T) {
	url, c, db, oid := shimDB(t)
	mustExec(t, c, "SET snowflake.node = 5")
	clock := generator.NewFakeClock(serverPos(t, c) >> generator.CountBits)
	svc, err := New(Config{ControlURL: url, Node: 5, Clock: clock, Heartbeat: 100 * time.Millisecond,
		LeaseDuration: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(ctxT(t)) })
	if _, err := nextvalVia(ctxT(t), svc, db, oid, 5); err != nil {
		t.Fatal(err)
	}
	top := generator.PositionOf(queryInt(t, c, fmt.Sprintf("SELECT last_value FROM snowflake._hw_%d_5", oid)))
	deadline := time.Now().Add(10 * time.Second)
	for serverPos(t, c) <= top+generator.Position(6, 0) {
		if time.Now().After(deadline) {
			t.Fatal("the server's clock did not pass the lease")
		}
	}
	shim := queryInt(t, c, "SELECT snowflake.nextval('s')")
	if _, _, cnt := generator.Decompose(shim); cnt != 0 {
		t.Fatalf("shim count %d after the lease ended, want 0", cnt)
	}
	ms, _, _ := generator.Decompose(shim)
	clock.Set(ms) // the fast path at the shim's millisecond
	fast, err := nextvalVia(ctxT(t), svc, db, oid, 5)
	if err != nil {
		t.Fatal(err)
	}
	if fast <= shim {
		t.Fatalf("fast path %v after the shim's %v", generator.Decode(fast), generator.Decode(shim))
	}
}

// A proxy that stops gives back the unused end of its lease, so the next
// run continues from its last ID, at the clock, where it used to start
// above the lease's top, up to two seconds ahead (and a session's shim ID
// after such a fast-path ID could be smaller).
func TestStoppedProxyReleasesItsLease(t *testing.T) {
	url, c, db, oid := shimDB(t)
	svc, err := New(Config{ControlURL: url, Node: 5, Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for range 5 {
		if last, err = nextvalVia(ctxT(t), svc, db, oid, 5); err != nil {
			t.Fatal(err)
		}
	}
	hw := fmt.Sprintf("SELECT last_value FROM snowflake._hw_%d_5", oid)
	if top := generator.PositionOf(queryInt(t, c, hw)); top <= generator.PositionOf(last)+generator.Position(500, 0) {
		t.Fatalf("lease top %d not well above the last ID %d: the check would prove nothing", top, generator.PositionOf(last))
	}
	if err := svc.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if top := queryInt(t, c, hw); generator.PositionOf(top) != generator.PositionOf(last) {
		t.Fatalf("after Close H is %v, want the last ID's position %v", generator.Decode(top), generator.Decode(last))
	}
	if s := queryInt(t, c, "SELECT last_value FROM s"); s < last {
		t.Fatalf("after Close S %d is below the last ID %d", s, last)
	}

	again, err := New(Config{ControlURL: url, Node: 5, Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = again.Close(ctxT(t)) })
	next, err := nextvalVia(ctxT(t), again, db, oid, 5)
	if err != nil {
		t.Fatal(err)
	}
	ahead := (generator.PositionOf(next) - serverPos(t, c)) >> generator.CountBits
	if next <= last || ahead > 100 {
		t.Fatalf("the next run's first ID %v (%d ms ahead of the server) after %v", generator.Decode(next), ahead, generator.Decode(last))
	}
}

// A failover to a standby that had not received the latest leases: the
// promoted server's H and S are older than what the running proxy issued.
// Its next lease raises both above everything it issued, so neither its
// fast path nor (after that lease) the shim gives those IDs again. (A shim
// call before that lease reads the older S: docs/state-model.md asks for a
// synchronous standby.)
func TestLeaseAfterTheServerLostItsRecord(t *testing.T) {
	url, c, db, oid := shimDB(t)
	mustExec(t, c, "ALTER SEQUENCE s INCREMENT 4096") // one ms per ID: IDs run ahead of the clock
	mustExec(t, c, "SET snowflake.node = 5")
	svc, err := New(Config{ControlURL: url, Node: 5, Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(ctxT(t)) })
	issueAfter := func(ticket uint64) int64 {
		reqs := []generator.Request{{Seq: oid, Inc: 4096, After: ticket}}
		if err := svc.NextvalBatch(ctxT(t), db, 5, reqs); err != nil {
			t.Fatal(err)
		}
		return reqs[0].ID
	}
	issue := func() int64 { return issueAfter(0) }
	first := issue()
	var last int64
	for range 3000 {
		last = issue()
	}
	// What the promoted standby holds: the state from before those IDs.
	mustExec(t, c, fmt.Sprintf("SELECT setval('snowflake._hw_%d_5', $1), setval('s', $1)", oid), first)
	// A statement through the shim fences, so the next ID waits for a
	// renewal that asks for no particular position.
	next := issueAfter(svc.FenceTicket())
	if next <= last {
		t.Fatalf("after the server lost its record the fast path gave %v, not above %v", generator.Decode(next), generator.Decode(last))
	}
	// The lease that next came from raised S above what was issued.
	for range 3000 {
		next = issue() // until a renewal has reported them
		if queryInt(t, c, "SELECT last_value FROM s") >= last {
			break
		}
	}
	if shim := queryInt(t, c, "SELECT snowflake.nextval('s')"); shim <= last {
		t.Fatalf("the shim gave %v after the fast path's %v", generator.Decode(shim), generator.Decode(last))
	}
}
