package compat

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

// Two sequences narrower than a snowflake, used at once by shim sessions
// (some of their transactions rolled back) and, on one of them, by the
// fast path, whose first lease widens it while the shim calls run. The
// narrow store (docs/state-model.md, "Narrow sequences") keeps what the
// sequences cannot hold: no ID repeats within a sequence, each session's
// IDs of a sequence increase, a rollback gives nothing back, the leased
// sequence ends up AS bigint and the other stays as it was, recorded for
// the 2.5.0 repair.
func TestNarrowSequencesConcurrent(t *testing.T) {
	t.Parallel()
	url, c, db, _ := shimDB(t)
	closeLockWindow(t, c)
	mustExec(t, c, "CREATE SEQUENCE n1 MAXVALUE 1000")
	mustExec(t, c, "CREATE SEQUENCE n2 AS smallint INCREMENT -1")
	leased := seqOID(t, c, "n1")
	svc := newService(t, url, 6, nil)

	ids := map[string]*idSet{"n1": newIDSet(t), "n2": newIDSet(t)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 2000; i++ {
			id, err := nextvalVia(context.Background(), svc, db, leased, 6)
			if err != nil {
				t.Error(err)
				return
			}
			ids["n1"].add(id, "fast path")
		}
	}()
	const sessions, calls = 4, 300
	for s := 0; s < sessions; s++ {
		sc := connect(t, url)
		mustExec(t, sc, "SET snowflake.node = 6")
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			last := map[string]int64{}
			for i := 0; i < calls; i++ {
				seq := []string{"n1", "n2"}[(i+s)%2]
				err := pgx.BeginTxFunc(ctx, sc.Conn, pgx.TxOptions{}, func(tx pgx.Tx) error {
					var id int64
					if err := tx.QueryRow(ctx, "SELECT snowflake.nextval($1)", seq).Scan(&id); err != nil {
						return err
					}
					if id <= last[seq] {
						return fmt.Errorf("%s: %v after %v in one session", seq, generator.Decode(id), generator.Decode(last[seq]))
					}
					last[seq] = id
					ids[seq].add(id, fmt.Sprintf("session %d", s))
					if i%3 == 0 {
						return errRollBack
					}
					return nil
				})
				if err != nil && err != errRollBack {
					t.Errorf("session %d: %v", s, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got, want := len(ids["n1"].seen)+len(ids["n2"].seen), 2000+sessions*calls; got != want {
		t.Fatalf("%d ids, want %d", got, want)
	}
	if got := queryInt(t, c, "SELECT seqmax FROM pg_sequence WHERE seqrelid = 'n1'::regclass"); got != 9223372036854775807 {
		t.Fatalf("n1's MAXVALUE is %d after its lease, want 2^63-1", got)
	}
	if got := queryInt(t, c, "SELECT seqmax FROM pg_sequence WHERE seqrelid = 'n2'::regclass"); got != -1 {
		t.Fatalf("n2's MAXVALUE is %d: only a lease widens a sequence", got)
	}
	if got := queryInt(t, c, "SELECT count(*) FROM snowflake._narrow WHERE seq = 'n2'::regclass"); got < 1 {
		t.Fatal("n2 is not recorded for the 2.5.0 repair")
	}
}

// errRollBack makes pgx.BeginTxFunc roll the transaction back.
var errRollBack = fmt.Errorf("roll back")

// The narrow store is read by every sequence of the database, so nothing
// may put a position far ahead in it. A role without privileges gave its
// own temporary sequence a MAXVALUE a year ahead as a snowflake, set it
// there and called snowflake.nextval: the next ID did not fit, went to the
// store, and every sequence's IDs were dated a year ahead (regression).
// The call is refused now, and leases, which could store any position,
// are the proxies' alone (TestDefaultSequenceOnlyUsableByPublic).
func TestNarrowStoreTakesNothingFarAhead(t *testing.T) {
	t.Parallel()
	url, c, _, _ := shimDB(t)
	_, roleURL := testRole(t, c, url, "narrowfar")
	r := connect(t, roleURL)
	mustExec(t, r, "SET snowflake.node = 4")
	storeBefore := queryInt(t, c, "SELECT coalesce(last_value, 0) FROM snowflake._hw_narrow")
	far := queryInt(t, r, fmt.Sprintf("SELECT ((%s + 31536000000) << 22) | (1023 << 12) | 4095", serverMsSQL))
	mustExec(t, r, fmt.Sprintf("CREATE TEMP SEQUENCE far MINVALUE 1 MAXVALUE %d", far))
	mustExec(t, r, fmt.Sprintf("SELECT setval('far', %d)", far))
	pe := pgErr(t, r, "SELECT snowflake.nextval('far')")
	if pe.Code != "2200H" || !strings.Contains(pe.Message, `sequence "far" lies outside its bounds`) {
		t.Fatalf("got %s %q, want 2200H for the next ID outside far's bounds", pe.Code, pe.Message)
	}
	wantErr(t, pgErr(t, r, "SELECT * FROM snowflake._lease('far', 4, 0, 0, 0)"), "42501", "permission denied for function _lease")
	// Nor does a proxy's lease of such a sequence (its owner's sessions
	// through a proxy would ask for one). A lease widens a MAXVALUE it may
	// alter; a MINVALUE above the next ID of the node stays.
	mustExec(t, c, fmt.Sprintf("CREATE SEQUENCE farreg MINVALUE %d", far-1))
	mustExec(t, c, fmt.Sprintf("SELECT setval('farreg', %d)", far-1))
	pe = pgErr(t, c, "SELECT * FROM snowflake._lease('farreg', 4, 0, 0, 0)")
	if pe.Code != "2200H" {
		t.Fatalf("lease of farreg: got %s %q, want 2200H", pe.Code, pe.Message)
	}
	if got := queryInt(t, c, "SELECT coalesce(last_value, 0) FROM snowflake._hw_narrow"); got != storeBefore {
		t.Fatalf("narrow store moved from %d to %d", storeBefore, got)
	}
	mustExec(t, c, "SET snowflake.node = 4")
	before := queryInt(t, c, "SELECT "+serverMsSQL)
	id := queryInt(t, c, "SELECT snowflake.nextval('s')")
	if ms, _, _ := generator.Decompose(id); ms > before+100 {
		t.Fatalf("s's next ID dated %d ms after the clock", ms-before)
	}
	// A narrow sequence within the clock still goes through the store, and
	// is leased.
	mustExec(t, r, "CREATE TEMP SEQUENCE small AS integer")
	if id := queryInt(t, r, "SELECT snowflake.nextval('small')"); id <= 0 {
		t.Fatalf("narrow sequence: %d", id)
	}
	mustExec(t, c, "CREATE SEQUENCE smallreg AS integer")
	if hi := queryInt(t, c, "SELECT hi_pos FROM snowflake._lease('smallreg', 4, 0, 0, 0)"); hi <= 0 {
		t.Fatalf("lease of a narrow sequence: hi_pos %d", hi)
	}
}

// A call that read a narrow sequence's parameters, then waited for the
// lock while a lease widened the sequence and another write set it ahead
// of the clock, issues above that value: it reads the parameters again
// under the lock. It raised "outside its bounds", the old MAXVALUE held
// against the new value (regression, seen as a rare failure of
// TestNarrowSequencesConcurrent).
func TestNarrowSequenceWidenedWhileACallWaits(t *testing.T) {
	t.Parallel()
	url, c, _, _ := shimDB(t)
	closeLockWindow(t, c)
	mustExec(t, c, "CREATE SEQUENCE nw MAXVALUE 1000")
	mustExec(t, c, "BEGIN")
	mustExec(t, c, "SELECT * FROM snowflake._lease('nw', 6, 0, 0, 0)")
	ahead := queryInt(t, c, fmt.Sprintf("SELECT ((%s + 1000) << 22) | (6 << 12)", serverMsSQL))
	mustExec(t, c, fmt.Sprintf("SELECT setval('nw', %d)", ahead))

	x := connect(t, url)
	mustExec(t, x, "SET snowflake.node = 6")
	pid := queryInt(t, x, "SELECT pg_backend_pid()")
	type result struct {
		id  int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.err = x.QueryRow(context.Background(), "SELECT snowflake.nextval('nw')").Scan(&r.id)
		done <- r
	}()
	w := connect(t, url)
	waitFor(t, "the call to wait for the lease's lock", func() bool {
		return queryInt(t, w, "SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted", pid) > 0
	})
	mustExec(t, c, "COMMIT")
	r := <-done
	if r.err != nil {
		t.Fatalf("the call that waited: %v", r.err)
	}
	if r.id <= ahead {
		t.Fatalf("the call that waited got %v, want above %v", generator.Decode(r.id), generator.Decode(ahead))
	}
}
