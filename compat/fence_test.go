package compat

import (
	"context"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

// Regression (equivalence suite, currval.sql): a shim nextval in the middle
// of a lease issues above the lease, and the fast path then went on issuing
// below it, so one session saw its IDs go backwards. After a Fence the next
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
		svc.Fence(db, 0)
		after, err := nextvalVia(ctx, svc, db, oid, 5)
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
// rule continues above it. After a Fence the next lease starts above the
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
	svc.Fence(db, 0)
	next, err := nextvalVia(ctx, svc, db, oid, 5)
	if err != nil {
		t.Fatal(err)
	}
	if next <= future {
		t.Fatalf("after setval(%d) the fast path gave %d", future, next)
	}
	// A later fence continues from there.
	svc.Fence(db, 0)
	again, err := nextvalVia(ctx, svc, db, oid, 5)
	if err != nil {
		t.Fatal(err)
	}
	if again <= next {
		t.Fatalf("not increasing: %d then %d", next, again)
	}
}
