package compat

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

// Regression (equivalence suite, currval.sql): a shim nextval in the middle
// of a lease issues above the lease, and the fast path then went on issuing
// below it, so one session saw its IDs go backwards. After a fence the next
// fast-path ID is above the shim's.
func TestFenceAfterShimIssuance(t *testing.T) {
	url := newDB(t)
	c := connect(t, url)
	install(t, c)
	mustExec(t, c, "CREATE SEQUENCE s")
	mustExec(t, c, "SET snowflake.node = 5")
	svc := newService(t, url, 5, nil)
	ctx := context.Background()
	db, oid := dbName(t, c), seqOID(t, c, "s")

	for i := 0; i < 3; i++ {
		fast, err := nextvalVia(ctx, svc, db, oid, 5)
		if err != nil {
			t.Fatal(err)
		}
		shim := queryInt(t, c, "SELECT snowflake.nextval('s')")
		if shim <= fast {
			t.Fatalf("shim %d not above fast %d", shim, fast)
		}
		after, err := nextvalAfter(ctx, svc, db, oid, 5, svc.FenceTicket())
		if err != nil {
			t.Fatal(err)
		}
		if after <= shim {
			t.Fatalf("round %d: fast path gave %d after the shim's %d", i, after, shim)
		}
	}
}

// Regression (equivalence suite, increment.sql): setval to a future
// snowflake was ignored by the fast path while it held a lease; the pgEdge
// rule continues above it. After a fence the next lease starts above the
// sequence's last_value.
func TestFenceHonorsSetval(t *testing.T) {
	url := newDB(t)
	c := connect(t, url)
	install(t, c)
	mustExec(t, c, "CREATE SEQUENCE s")
	svc := newService(t, url, 5, nil)
	ctx := context.Background()
	db, oid := dbName(t, c), seqOID(t, c, "s")

	first, err := nextvalVia(ctx, svc, db, oid, 5)
	if err != nil {
		t.Fatal(err)
	}
	ms, _, _ := generator.Decompose(first)
	future := generator.Compose(ms+3_600_000, 5, 3995) // an hour ahead
	mustExec(t, c, "SELECT setval('s', $1)", future)
	next, err := nextvalAfter(ctx, svc, db, oid, 5, svc.FenceTicket())
	if err != nil {
		t.Fatal(err)
	}
	if next <= future {
		t.Fatalf("after setval(%d) the fast path gave %d", future, next)
	}
	// A later fence continues from there.
	again, err := nextvalAfter(ctx, svc, db, oid, 5, svc.FenceTicket())
	if err != nil {
		t.Fatal(err)
	}
	if again <= next {
		t.Fatalf("not increasing: %d then %d", next, again)
	}
}

// A client's setval made while a lease runs stands. _lease reads S, and
// raises it from that reading at its end; a setval between the two (a
// proxy session's, just before it fences) was overwritten with the
// lease's lower position, so the fenced lease that followed gave IDs
// below the setval (regression; TestFenceHonorsSetval failed about once
// in 40 runs on a loaded machine, a background renewal racing its
// setval). Here the setval runs inside the lease, deterministically: an
// event trigger on the CREATE SEQUENCE of the node's first lease makes it,
// and an open transaction the shim must wait for (its 'waiting' list)
// makes the lease raise S to its top.
func TestSetvalDuringALeaseStands(t *testing.T) {
	t.Parallel()
	url, c, _, _ := shimDB(t)
	mustExec(t, c, "SELECT snowflake._blocks('s', 3)") // the lease's only CREATE SEQUENCE is then H's
	holder := connect(t, url)
	mustExec(t, holder, "BEGIN")
	var vxid string
	if err := holder.QueryRow(ctxT(t), `SELECT virtualtransaction FROM pg_locks
		WHERE pid = pg_backend_pid() AND locktype = 'virtualxid'`).Scan(&vxid); err != nil {
		t.Fatal(err)
	}
	mustExec(t, c, "COMMENT ON SEQUENCE snowflake._hw_count IS 'waiting "+vxid+"'")
	mustExec(t, c, `CREATE FUNCTION public.setval_in_lease() RETURNS event_trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF coalesce(current_setting('test_lease.setval_to', true), '') <> '' THEN
				PERFORM setval('public.s', current_setting('test_lease.setval_to')::bigint);
			END IF;
		END $$`)
	mustExec(t, c, `CREATE EVENT TRIGGER setval_in_lease ON ddl_command_end
		WHEN TAG IN ('CREATE SEQUENCE') EXECUTE FUNCTION public.setval_in_lease()`)

	now := queryInt(t, c, "SELECT "+serverMsSQL)
	future := generator.Compose(now+3_600_000, 5, 3995) // an hour ahead
	want := (now + 2000) << generator.CountBits
	mustExec(t, c, "SELECT set_config('test_lease.setval_to', $1, false)", fmt.Sprint(future))
	var hi int64
	if err := c.QueryRow(ctxT(t), "SELECT hi_pos FROM snowflake._lease('s', 3, 0, $1, 0)", want).Scan(&hi); err != nil {
		t.Fatal(err)
	}
	mustExec(t, c, "SELECT set_config('test_lease.setval_to', '', false)")
	if hi < want {
		t.Fatalf("lease top %d below the %d asked for", hi, want)
	}
	if got := queryInt(t, c, "SELECT last_value FROM s"); got != future {
		t.Fatalf("S is %v after the lease, want the setval's %v", generator.Decode(got), generator.Decode(future))
	}
}

// Regression (TestSequenceChangesWhileLeased, about 1 run in 15 under
// load): the floor of a fenced lease was S alone, which an ALTER SEQUENCE
// ... RESTART or a setval into the past lowers. A session that had just
// taken IDs from a block, dated by the server's clock in the counts above
// the fast path's, then got a fast-path ID below them from a proxy clock
// one millisecond behind. The floor now also covers the last block, which
// neither lowers. Here the proxy's clock stands still, so the server's is
// always at or past it.
func TestFenceAfterABlockAndARestart(t *testing.T) {
	t.Parallel()
	url, c, db, oid := shimDB(t)
	mustExec(t, c, "SET snowflake.node = 5")
	clock := generator.NewFakeClock(serverPos(t, c) >> generator.CountBits)
	svc := newServiceWith(t, Config{ControlURL: url, Node: 5, Clock: clock, LeaseDuration: 10 * time.Second})
	ctx := ctxT(t)
	for _, change := range []string{"ALTER SEQUENCE s RESTART", "SELECT setval('s', 5)"} {
		fast, err := nextvalVia(ctx, svc, db, oid, 5)
		if err != nil {
			t.Fatal(err)
		}
		// A block serves only within its millisecond: on a loaded machine
		// every call may find the clock past it and take the slow path.
		ids, slow := perRow(t, c, "s", 3)
		for deadline := time.Now().Add(time.Minute); slow == 3 && time.Now().Before(deadline); {
			ids, slow = perRow(t, c, "s", 3)
		}
		if slow == 3 || ids[0] <= fast || ids[2] <= ids[1] || ids[1] <= ids[0] {
			t.Fatalf("%s: per-row IDs %v (%d slow calls) after the fast path's %v: none from a block above it",
				change, ids, slow, generator.Decode(fast))
		}
		mustExec(t, c, change)
		after, err := nextvalAfter(ctx, svc, db, oid, 5, svc.FenceTicket())
		if err != nil {
			t.Fatal(err)
		}
		if after <= ids[2] {
			t.Fatalf("after %s the fenced fast path gave %v, below the block's %v",
				change, generator.Decode(after), generator.Decode(ids[2]))
		}
	}
}
