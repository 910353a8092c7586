package compat

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// advisoryKey is the advisory lock key the shim used for seq, and still
// takes while the lock window is open (sql/locks.sql).
func advisoryKey(seq uint32) int64 { return 0x5346<<32 | int64(seq) }

// closeLockWindow steps the lock window (sql/locks.sql) until it is closed:
// a fresh install opens it, and it closes once the transactions running at
// the install have ended.
func closeLockWindow(t *testing.T, c *testConn) {
	t.Helper()
	waitFor(t, "the lock window to close", func() bool {
		var open bool
		if err := c.QueryRow(ctxT(t), "SELECT snowflake._lock_window_step()").Scan(&open); err != nil {
			t.Fatal(err)
		}
		return !open
	})
}

// holdSlot locks oid's row of snowflake._locks in an open transaction on a
// connection of its own, as a lease does until its commit; end commits
// (or rolls back) that transaction.
func holdSlot(t *testing.T, url string, oid uint32) (end func(commit bool)) {
	t.Helper()
	h := connect(t, url)
	mustExec(t, h, "BEGIN")
	mustExec(t, h, "SELECT FROM snowflake._locks WHERE slot = $1 FOR UPDATE", int64(oid%1024))
	return func(commit bool) {
		if commit {
			mustExec(t, h, "COMMIT")
		} else {
			mustExec(t, h, "ROLLBACK")
		}
	}
}

// waitBlocked waits until backend pid waits for a lock of the given kind
// (pg_stat_activity.wait_event: "transactionid" for a row lock, "advisory").
func waitBlocked(t *testing.T, c *testConn, pid int64, kind string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("backend %d to wait for a %s lock", pid, kind), func() bool {
		return queryInt(t, c, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock' AND wait_event = $2", pid, kind) == 1
	})
}

// nextvalAsync runs snowflake.nextval(seq) on c in a goroutine.
func nextvalAsync(c *testConn, seq string) <-chan error {
	done := make(chan error, 1)
	go func() {
		var id int64
		done <- c.QueryRow(context.Background(), "SELECT snowflake.nextval($1::regclass)", seq).Scan(&id)
	}()
	return done
}

// wantDone waits for a call started by nextvalAsync, bounded.
func wantDone(t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: still waiting after 30s", what)
	}
}

// Regression: the shim serialised each sequence with a session advisory
// lock whose key (0x5346 << 32 | oid) any role could compute, and hold: a
// role with nothing but CONNECT that held it stopped every other role's
// snowflake.nextval on the sequence (until its statement_timeout) and
// every lease, so the fast path fell back to the shim, which waited too.
// The lock is now a row of a private table, which such a role can neither
// lock nor keep others from locking, whatever it holds.
func TestShimLockSquatter(t *testing.T) {
	for _, usage := range []bool{false, true} {
		t.Run(fmt.Sprintf("usage=%v", usage), func(t *testing.T) {
			t.Parallel()
			url, c, db, oid := shimDB(t)
			closeLockWindow(t, c)
			squatter, squatURL := testRole(t, c, url, "squat")
			user, userURL := testRole(t, c, url, "user")
			mustExec(t, c, "GRANT USAGE ON SEQUENCE s TO "+user)
			if usage {
				mustExec(t, c, "GRANT USAGE ON SEQUENCE s TO "+squatter)
			}
			uc := connect(t, userURL)
			mustExec(t, uc, "SET snowflake.node = 3")
			st := leaseStore(t, url)
			key := generator.Key{Database: db, Seq: oid, Node: 3}
			var prevHi, last int64
			// The other role's nextval and the proxy's lease and release
			// complete, in a bounded time.
			proceeds := func(what string) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				var id int64
				if err := uc.QueryRow(ctx, "SELECT snowflake.nextval('s')").Scan(&id); err != nil {
					t.Fatalf("%s: another role's nextval: %v", what, err)
				}
				if _, node, _ := generator.Decompose(id); node != 3 || id <= last {
					t.Fatalf("%s: id %v after %v", what, generator.Decode(id), generator.Decode(last))
				}
				last = id
				l, err := st.Lease(ctx, key, prevHi, 1, 0)
				if err != nil {
					t.Fatalf("%s: lease: %v", what, err)
				}
				if l.Floor < generator.PositionOf(id) {
					t.Fatalf("%s: lease %+v below the shim's id %v", what, l, generator.Decode(id))
				}
				if err := st.Release(ctx, key, l.Hi, l.Lo); err != nil {
					t.Fatalf("%s: release: %v", what, err)
				}
				prevHi = l.Lo
			}

			sq := connect(t, squatURL)
			sqPID := queryInt(t, sq, "SELECT pg_backend_pid()")
			mustExec(t, sq, "SELECT pg_advisory_lock($1)", advisoryKey(oid))
			proceeds("the squatter holds the advisory key")

			// The lock's table: no privilege for PUBLIC, nothing to lock.
			for _, tab := range []string{"snowflake._locks", "snowflake._lock_window"} {
				var priv bool
				if err := c.QueryRow(ctxT(t), "SELECT has_table_privilege('public', $1, 'SELECT, UPDATE, INSERT, DELETE, TRUNCATE, REFERENCES')", tab).Scan(&priv); err != nil || priv {
					t.Fatalf("PUBLIC has privileges on %s (%v)", tab, err)
				}
			}
			for _, tc := range []struct{ stmt, table string }{
				{"SELECT FROM snowflake._locks FOR UPDATE", "_locks"},
				{"SELECT FROM snowflake._locks WHERE slot = 0 FOR KEY SHARE", "_locks"},
				{"UPDATE snowflake._locks SET slot = slot", "_locks"},
				{"DELETE FROM snowflake._locks", "_locks"},
				{"INSERT INTO snowflake._lock_window VALUES ('{}')", "_lock_window"},
			} {
				wantErr(t, pgErr(t, sq, tc.stmt), "42501", "permission denied for table "+tc.table)
			}
			mustExec(t, sq, "BEGIN")
			wantErr(t, pgErr(t, sq, "LOCK TABLE snowflake._locks IN SHARE UPDATE EXCLUSIVE MODE"), "42501", "permission denied for table _locks")
			mustExec(t, sq, "ROLLBACK")
			// The strongest lock it can hold on the table: PREPARE locks it
			// for the UPDATE, and the privilege is checked only at EXECUTE.
			mustExec(t, sq, "BEGIN")
			mustExec(t, sq, "PREPARE squat AS UPDATE snowflake._locks SET slot = slot")
			if n := queryInt(t, c, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND granted
				AND ((locktype = 'relation' AND relation = 'snowflake._locks'::regclass AND mode = 'RowExclusiveLock')
				  OR (locktype = 'advisory' AND classid = 21318 AND objid = $2 AND objsubid = 1 AND mode = 'ExclusiveLock'))`,
				sqPID, int64(oid)); n != 2 {
				t.Fatalf("the squatter holds %d of its 2 locks", n)
			}
			proceeds("the squatter holds the advisory key and the table")
			mustExec(t, sq, "ROLLBACK")
		})
	}
}

// The shim's lock ends with each call, not with the caller's transaction:
// a transaction that issued an ID and stays open keeps no other session
// and no lease waiting, and what it issued stays in the sequence after it
// rolls back (setval is not transactional).
func TestShimLockEndsWithTheCall(t *testing.T) {
	t.Parallel()
	url, c, db, oid := shimDB(t)
	closeLockWindow(t, c)
	open := connect(t, url)
	mustExec(t, open, "SET snowflake.node = 2")
	mustExec(t, open, "BEGIN")
	id := queryInt(t, open, "SELECT snowflake.nextval('s')")

	other := connect(t, url)
	mustExec(t, other, "SET snowflake.node = 2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var next int64
	if err := other.QueryRow(ctx, "SELECT snowflake.nextval('s')").Scan(&next); err != nil {
		t.Fatalf("nextval beside an open transaction that used the shim: %v", err)
	}
	if next <= id {
		t.Fatalf("nextval %d after %d", next, id)
	}
	if _, err := leaseStore(t, url).Lease(ctx, generator.Key{Database: db, Seq: oid, Node: 2}, 0, 1, 0); err != nil {
		t.Fatalf("lease beside an open transaction that used the shim: %v", err)
	}
	mustExec(t, open, "ROLLBACK")
	if lv := queryInt(t, c, "SELECT last_value FROM s"); lv < next {
		t.Fatalf("last_value %d below the issued %d", lv, next)
	}
}

// A REPEATABLE READ or SERIALIZABLE transaction takes the shim's row after
// other sessions and leases locked it since its snapshot was taken (the
// row's xmax then names an aborted subtransaction or a committed lease,
// and only locks), and after waiting for a lease that holds it: locks are
// no updates, so no serialisation failure.
func TestShimLockInRepeatableReadAndSerializable(t *testing.T) {
	for _, iso := range []string{"REPEATABLE READ", "SERIALIZABLE"} {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			url, c, db, oid := shimDB(t)
			closeLockWindow(t, c)
			st := leaseStore(t, url)
			tx := connect(t, url)
			mustExec(t, tx, "SET snowflake.node = 4")
			pid := queryInt(t, tx, "SELECT pg_backend_pid()")
			mustExec(t, tx, "BEGIN ISOLATION LEVEL "+iso)
			mustExec(t, tx, "SELECT 1") // the snapshot

			other := connect(t, url)
			mustExec(t, other, "SET snowflake.node = 4")
			queryInt(t, other, "SELECT snowflake.nextval('s')")
			key := generator.Key{Database: db, Seq: oid, Node: 4}
			if _, err := st.Lease(ctxT(t), key, 0, 1, 0); err != nil {
				t.Fatal(err)
			}
			queryInt(t, tx, "SELECT snowflake.nextval('s')")

			for _, commit := range []bool{true, false} {
				end := holdSlot(t, url, oid)
				done := nextvalAsync(tx, "s")
				waitBlocked(t, c, pid, "transactionid")
				end(commit)
				wantDone(t, fmt.Sprintf("nextval after the holder's end (commit %v)", commit), done)
			}
			mustExec(t, tx, "COMMIT")
		})
	}
}

// Sessions at every isolation level issuing through the shim on one
// sequence in multi-statement transactions while the fast path renews its
// leases: every ID distinct, each session's increasing, no serialisation
// failure.
func TestShimLockConcurrentIsolationLevels(t *testing.T) {
	t.Parallel()
	url, c, db, oid := shimDB(t)
	closeLockWindow(t, c)
	svc := newService(t, url, 6, nil)

	ids := newIDSet(t)
	var wg sync.WaitGroup
	const fast, fastIDs = 2, 3000
	for g := 0; g < fast; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < fastIDs; i++ {
				id, err := nextvalVia(context.Background(), svc, db, oid, 6)
				if err != nil {
					t.Error(err)
					return
				}
				ids.add(id, "fast path")
			}
		}()
	}
	levels := []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable, pgx.RepeatableRead, pgx.Serializable}
	const txs, perTx = 120, 5
	for _, level := range levels {
		sc := connect(t, url)
		mustExec(t, sc, "SET snowflake.node = 6")
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			var last int64
			for i := 0; i < txs; i++ {
				err := pgx.BeginTxFunc(ctx, sc.Conn, pgx.TxOptions{IsoLevel: level}, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
						return err
					}
					for j := 0; j < perTx; j++ {
						var id int64
						if err := tx.QueryRow(ctx, "SELECT snowflake.nextval('s')").Scan(&id); err != nil {
							return err
						}
						if id <= last {
							return fmt.Errorf("%v after %v in one session", generator.Decode(id), generator.Decode(last))
						}
						last = id
						ids.add(id, string(level))
					}
					return nil
				})
				if err != nil {
					t.Errorf("%s: %v", level, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if want := fast*fastIDs + len(levels)*txs*perTx; len(ids.seen) != want {
		t.Fatalf("%d ids, want %d", len(ids.seen), want)
	}
}

// Each shim call takes its row lock in a subtransaction, which gets an xid
// and is rolled back. An aborted subtransaction leaves the backend's cache
// of running subtransaction ids (64 entries per backend: once it
// overflows, every snapshot taken in the server must look transactions up
// in pg_subtrans), so one transaction may make any number of shim calls.
// PostgreSQL 16 and later report the cache (pg_stat_get_backend_subxact);
// committed subtransactions with xids, which do fill it, show that the
// probe sees an overflow.
func TestShimCallsLeaveNoSubtransactions(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t, pgserver.Options{BinDir: pgtest.BinDirAtLeast(t, 16)})
	url := srv.URL(pgtest.NewDatabase(t, srv))
	c := connect(t, url)
	install(t, c)
	mustExec(t, c, "CREATE SEQUENCE s")
	mustExec(t, c, "CREATE TABLE sub (x int)")
	closeLockWindow(t, c)
	mustExec(t, c, "SET snowflake.node = 1")
	pid := queryInt(t, c, "SELECT pg_backend_pid()")
	probe := connect(t, url)
	subxacts := func() (count int64, overflowed bool) {
		t.Helper()
		err := probe.QueryRow(ctxT(t), `SELECT s.subxact_count, s.subxact_overflowed
			FROM pg_stat_get_backend_idset() b(id), pg_stat_get_backend_subxact(b.id) s
			WHERE pg_stat_get_backend_pid(b.id) = $1`, pid).Scan(&count, &overflowed)
		if err != nil {
			t.Fatal(err)
		}
		return count, overflowed
	}

	mustExec(t, c, "BEGIN")
	xid := queryInt(t, c, "SELECT pg_current_xact_id()::text::int8")
	if n := queryInt(t, c, "SELECT count(DISTINCT snowflake.nextval('s')) FROM generate_series(1, 10000)"); n != 10000 {
		t.Fatalf("%d distinct ids of 10000", n)
	}
	if n, over := subxacts(); n != 0 || over {
		t.Fatalf("after 10000 shim calls in one transaction: %d cached subtransactions, overflowed %v", n, over)
	}
	// The calls' subtransactions did have xids.
	probeXid := queryInt(t, probe, "SELECT pg_current_xact_id()::text::int8")
	if probeXid < xid+10000 {
		t.Fatalf("xid %d after the calls of a transaction with xid %d: the calls took no xids", probeXid, xid)
	}
	mustExec(t, c, "DO $$BEGIN FOR i IN 1..100 LOOP BEGIN INSERT INTO sub VALUES (i); EXCEPTION WHEN OTHERS THEN NULL; END; END LOOP; END$$")
	if n, over := subxacts(); !over {
		t.Fatalf("100 committed subtransactions: %d cached, not overflowed: the probe cannot see an overflow", n)
	}
	mustExec(t, c, "ROLLBACK")
}
