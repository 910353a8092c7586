package rewrite

import (
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// FuzzPlan checks that Plan never panics or returns nil, and that the
// rendered text of any plan with a template parses again into as many
// statements as the plan lists. The seed corpus is in
// testdata/fuzz/FuzzPlan; the golden inputs are added too.
func FuzzPlan(f *testing.F) {
	for _, s := range []string{
		"SELECT snowflake.nextval()",
		"SELECT snowflake.nextval() + $1::int8 * 0",
		"SET snowflake.node = 7",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		p := analyze(sql) // uncached: every input is analysed
		if p == nil {
			t.Fatal("nil plan")
		}
		if p.Template != nil {
			if _, err := pg_query.Parse(sql); err != nil {
				t.Fatalf("plan with template for text that does not parse: %q", sql)
			}
		}
		checkRendered(t, sql, p)
		checkPlain(t, sql, p)
		_ = NeedsParse(sql)
	})
}

// checkPlain checks plan.Inserts.Plain against the parse tree: one
// statement, an INSERT with VALUES or DEFAULT VALUES, no WITH, no
// RETURNING (wire runs such a string as a prepared statement).
func checkPlain(t *testing.T, sql string, p *plan.Plan) {
	t.Helper()
	if p.Inserts == nil || !p.Inserts.Plain {
		return
	}
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 || len(p.Statements) != 1 || len(p.Inserts.Targets) != 1 {
		t.Fatalf("Plain for %q: %d statements, %d targets, parse error %v", sql, len(p.Statements), len(p.Inserts.Targets), err)
	}
	ins := tree.Stmts[0].Stmt.GetInsertStmt()
	if ins == nil || ins.WithClause != nil || len(ins.ReturningList) > 0 {
		t.Fatalf("Plain for %q, which is not a plain INSERT", sql)
	}
	if sel := ins.SelectStmt.GetSelectStmt(); ins.SelectStmt != nil && (sel == nil || len(sel.ValuesLists) == 0) {
		t.Fatalf("Plain for %q, whose rows do not come from VALUES", sql)
	}
}
