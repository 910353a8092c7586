package compat

import (
	"context"
	"fmt"
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
