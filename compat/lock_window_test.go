package compat

import (
	"context"
	"os"
	"testing"
	"time"
)

// installAdvisoryShim turns c's shim into the one an update to the row
// lock starts from: the lock's objects gone, and _issue, _lease and
// _release as they were, taking the advisory lock
// (testdata/advisory_lock_functions.sql).
func installAdvisoryShim(t *testing.T, c *testConn) {
	t.Helper()
	old, err := os.ReadFile("testdata/advisory_lock_functions.sql")
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, c, `DROP FUNCTION snowflake._lock_window_step();
		DROP TABLE snowflake._locks, snowflake._lock_window;
		DROP SEQUENCE snowflake._lock_window_open`)
	mustExec(t, c, string(old))
}

// lockWindowStep runs one step of the lock window and reports whether it
// is still open.
func lockWindowStep(t *testing.T, c *testConn) bool {
	t.Helper()
	var open bool
	if err := c.QueryRow(ctxT(t), "SELECT snowflake._lock_window_step()").Scan(&open); err != nil {
		t.Fatal(err)
	}
	return open
}

// waitWindowClosed steps the window until it closes, with a deadline. Once
// the transactions a test holds have ended it closes at the next step that
// sees no transaction of an observation still running; that may take a few
// steps, since an observation also names every transaction of a backend
// the step cannot place (regression: a parallel test's backend on its way
// out holds its virtual transaction id after leaving pg_stat_activity, and
// a single step after the test's last transaction ended found the window
// still open).
func waitWindowClosed(t *testing.T, c *testConn, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for lockWindowStep(t, c) {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// withAdvisoryKey runs call while another session holds the advisory key
// of oid, and reports whether call had to wait for it: call must then
// complete once the key is released.
func withAdvisoryKey(t *testing.T, url string, c *testConn, oid uint32, pid int64, call func() <-chan error) (waited bool) {
	t.Helper()
	h := connect(t, url)
	mustExec(t, h, "SELECT pg_advisory_lock($1)", advisoryKey(oid))
	done := call()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			mustExec(t, h, "SELECT pg_advisory_unlock_all()")
			return false
		default:
		}
		if queryInt(t, c, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory'", pid) == 1 {
			mustExec(t, h, "SELECT pg_advisory_unlock_all()")
			wantDone(t, "the call once the advisory key was released", done)
			return true
		}
		if time.Now().After(deadline) {
			t.Fatal("the call neither completed nor waited for the advisory key in 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// After an update from the shim whose lock was the advisory lock, a
// transaction that was running may still execute that shim's code from
// its caches, which takes only the advisory lock: until every such
// transaction has ended, the new code takes the advisory lock too (or the
// two would issue from S at once), and afterwards it no longer does (or a
// role holding the key would still stop it).
func TestLockWindowAfterUpdate(t *testing.T) {
	t.Parallel()
	url, c, _, oid := shimDB(t)
	installAdvisoryShim(t, c)
	old := connect(t, url)
	mustExec(t, old, "SET snowflake.node = 2")
	mustExec(t, old, "BEGIN")
	first := queryInt(t, old, "SELECT snowflake.nextval('s')")

	mustExec(t, c, updateTo(t, ""))
	c.takeNotices()
	if !lockWindowStep(t, c) {
		t.Fatal("the update did not open the lock window")
	}

	// old still runs the earlier code: it does not take the row.
	end := holdSlot(t, url, oid)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var id int64
	if err := old.QueryRow(ctx, "SELECT snowflake.nextval('s')").Scan(&id); err != nil {
		t.Fatalf("the earlier code in the transaction from before the update: %v", err)
	}
	if id <= first {
		t.Fatalf("%d after %d", id, first)
	}
	// A new session runs the new code: it waits for the row, and for the
	// advisory key the earlier code takes.
	n := connect(t, url)
	mustExec(t, n, "SET snowflake.node = 2")
	npid := queryInt(t, n, "SELECT pg_backend_pid()")
	done := nextvalAsync(n, "s")
	waitBlocked(t, c, npid, "transactionid")
	end(false)
	wantDone(t, "the new code once the row was free", done)
	if !withAdvisoryKey(t, url, c, oid, npid, func() <-chan error { return nextvalAsync(n, "s") }) {
		t.Fatal("in the window, the new code did not wait for the earlier code's advisory key")
	}

	// The window stays open while old runs, and closes after.
	for i := 0; i < 3; i++ {
		if !lockWindowStep(t, c) {
			t.Fatal("the lock window closed while a transaction from before the update runs")
		}
	}
	mustExec(t, old, "COMMIT")
	waitWindowClosed(t, c, "the lock window stayed open after the last transaction from before the update ended")
	if withAdvisoryKey(t, url, c, oid, npid, func() <-chan error { return nextvalAsync(n, "s") }) {
		t.Fatal("after the window, the new code still waits for the advisory key")
	}
	// The earlier code is gone from every session.
	end = holdSlot(t, url, oid)
	opid := queryInt(t, old, "SELECT pg_backend_pid()")
	done = nextvalAsync(old, "s")
	waitBlocked(t, c, opid, "transactionid")
	end(true)
	wantDone(t, "nextval after the window", done)
}

// A REPEATABLE READ transaction whose snapshot was taken before CREATE
// EXTENSION cannot see the lock's rows: its call is refused with 40001, to
// be retried, and its next transaction is served. A first install leaves
// the lock window closed, so no call waits for the advisory key
// (regression: the window opened at every install, calls took the
// advisory key any role may hold, and a transaction begun before the
// install kept the window open for as long as it ran, holding the key).
func TestSnapshotBeforeInstallRetries(t *testing.T) {
	t.Parallel()
	url := newDB(t)
	c := connect(t, url)
	rr := connect(t, url)
	mustExec(t, rr, "SET snowflake.node = 5")
	mustExec(t, rr, "BEGIN ISOLATION LEVEL REPEATABLE READ")
	mustExec(t, rr, "SELECT 1")
	install(t, c)
	mustExec(t, c, "CREATE SEQUENCE s")
	oid := seqOID(t, c, "s")
	if n := queryInt(t, rr, "SELECT count(*) FROM snowflake._locks"); n != 0 {
		t.Fatalf("the transaction sees %d rows of the lock's table: the test proves nothing", n)
	}
	if lockWindowStep(t, c) {
		t.Fatal("the lock window is open after a first install")
	}
	n := connect(t, url)
	mustExec(t, n, "SET snowflake.node = 6")
	npid := queryInt(t, n, "SELECT pg_backend_pid()")
	if withAdvisoryKey(t, url, c, oid, npid, func() <-chan error { return nextvalAsync(n, "s") }) {
		t.Fatal("a call waited for the advisory key after a first install")
	}
	wantErr(t, pgErr(t, rr, "SELECT snowflake.nextval('s')"), "40001",
		"could not serialize access: this transaction's snapshot predates the snowflake shim")
	mustExec(t, rr, "ROLLBACK")
	mustExec(t, rr, "BEGIN ISOLATION LEVEL REPEATABLE READ")
	queryInt(t, rr, "SELECT snowflake.nextval('s')")
	mustExec(t, rr, "COMMIT")
}

// A restore of the schema without its data leaves snowflake._locks
// without rows: the shim then refuses to issue without its lock (an
// internal error whose hint names the repair), makes no blocks without it
// either (regression: _blocks went on unlocked), the window does not close
// while rows are missing, and ALTER EXTENSION snowflake UPDATE makes them
// again and opens the window, as running transactions may not see them.
func TestLockRowsRemadeByUpdate(t *testing.T) {
	t.Parallel()
	url, c, _, _ := shimDB(t)
	closeLockWindow(t, c)
	mustExec(t, c, "SET snowflake.node = 1")
	mustExec(t, c, "DELETE FROM snowflake._locks")
	pe := pgErr(t, c, "SELECT snowflake.nextval('s')")
	if pe.Code != "XX000" || pe.Hint != "ALTER EXTENSION snowflake UPDATE makes the rows." {
		t.Fatalf("nextval without the lock's rows: %s %q hint %q", pe.Code, pe.Message, pe.Hint)
	}
	pe = pgErr(t, c, "SELECT snowflake._blocks('s', 1)")
	if pe.Code != "XX000" || pe.Hint != "ALTER EXTENSION snowflake UPDATE makes the rows." {
		t.Fatalf("_blocks without the lock's rows: %s %q hint %q", pe.Code, pe.Message, pe.Hint)
	}
	mustExec(t, c, "SELECT setval('snowflake._lock_window_open', 1)")
	other := connect(t, url)
	for i := 0; i < 3; i++ {
		if !lockWindowStep(t, c) || !lockWindowStep(t, other) {
			t.Fatal("the lock window closed while the lock's rows are missing")
		}
	}

	mustExec(t, c, updateTo(t, ""))
	c.takeNotices()
	if n := queryInt(t, c, "SELECT count(*) FROM snowflake._locks"); n != 1024 {
		t.Fatalf("%d rows after the update", n)
	}
	if n := queryInt(t, c, "SELECT count(*) FROM snowflake._lock_window"); n != 0 {
		t.Fatalf("%d observations from before the rows kept", n)
	}
	first := queryInt(t, c, "SELECT snowflake.nextval('s')")
	closeLockWindow(t, c)
	if next := queryInt(t, c, "SELECT snowflake.nextval('s')"); next <= first {
		t.Fatalf("%d after %d", next, first)
	}
}
