package wire

import (
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// After the session's own committed DDL, the next statement that may
// evaluate snowflake defaults in the server waits once for the per-row
// blocks (Snowflakes.AwaitBlocks) where the catalog epoch is 0 (no event
// trigger made them with the DDL): through a Query and a Parse; not in the
// DDL's open transaction, not twice, not where the epoch is armed.
func TestAwaitBlocksAfterOwnDDL(t *testing.T) {
	srv := pgtest.Shared(t)
	db := pgtest.NewDatabase(t, srv)
	const (
		create = "CREATE TABLE ab (id bigint, v int)"
		drop   = "DROP TABLE ab"
		insert = "INSERT INTO ab (v) SELECT 1"
	)
	plans := snowflakePlans()
	plans[create] = &plan.Plan{Statements: []plan.Statement{{}}, Touches: plan.TouchCatalog}
	plans[drop] = &plan.Plan{Statements: []plan.Statement{{}}, Touches: plan.TouchCatalog}
	plans[insert] = &plan.Plan{Statements: []plan.Statement{{}}, Touches: plan.TouchShim}
	pgtest.Exec(t, srv, db, create)
	sf := &fakeSnowflakes{}
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: plans}, Snowflakes: sf, Node: 5})
	c := connectPg(t, p.url(srv, db))
	ctx := ctxT(t)
	exec := func(sql string) {
		t.Helper()
		if _, err := c.Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	want := func(n int64, after string) {
		t.Helper()
		if got := sf.awaits.Load(); got != n {
			t.Fatalf("%d AwaitBlocks calls after %s, want %d", got, after, n)
		}
	}

	exec(insert)
	want(0, "an INSERT without DDL before it")
	exec(drop)
	exec(create)
	exec(insert)
	exec(insert)
	want(1, "DDL and two INSERTs")

	exec(drop)
	exec(create)
	if err := c.ExecParams(ctx, insert, nil, nil, nil, nil).Read().Err; err != nil {
		t.Fatal(err)
	}
	want(2, "DDL and an INSERT in the extended protocol")

	exec("BEGIN")
	exec(drop)
	exec(create)
	exec(insert)
	want(2, "DDL and an INSERT in one open transaction")
	exec("COMMIT")
	exec(insert)
	want(3, "its commit and an INSERT")

	sf.epoch.Store(1)
	exec(drop)
	exec(create)
	exec(insert)
	want(3, "DDL and an INSERT with the catalog watched")
}
