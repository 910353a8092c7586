package rewrite

import (
	"path/filepath"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// checkRendered fails when a plan's rendered texts do not parse, or parse
// into a different number of statements than the plan lists.
func checkRendered(t testing.TB, sql string, p *plan.Plan) {
	t.Helper()
	if p == nil {
		t.Fatalf("Plan(%q) = nil", sql)
	}
	checkTemplate(t, sql, p, p.Template)
	if p.Inserts != nil {
		checkTemplate(t, sql, p, p.Inserts.Template(sampleDefaults(p.Inserts)))
	}
}

func checkTemplate(t testing.TB, sql string, p *plan.Plan, tm *plan.Template) {
	t.Helper()
	if tm == nil {
		return
	}
	if len(tm.Parts) != len(tm.Slots)+1 {
		t.Fatalf("Plan(%q): %d parts for %d slots", sql, len(tm.Parts), len(tm.Slots))
	}
	vals := sampleValues(tm)
	for _, out := range []string{
		string(tm.RenderLiteral(nil, vals)),
		string(tm.RenderLiteral(nil, unfilled(tm))),
		string(tm.Render(nil, plan.Params, p.MaxParam, vals)),
	} {
		tree, err := pg_query.Parse(out)
		if err != nil {
			t.Fatalf("Plan(%q) renders %q, which does not parse: %v", sql, out, err)
		}
		if len(tree.Stmts) != len(p.Statements) {
			t.Fatalf("Plan(%q) renders %q: %d statements, plan lists %d", sql, out, len(tree.Stmts), len(p.Statements))
		}
	}
}

// TestRenderedParses renders every golden plan both ways and parses it.
func TestRenderedParses(t *testing.T) {
	files, _ := filepath.Glob("testdata/golden/*.sql")
	r := New(Config{})
	for _, f := range files {
		sql := readSQL(t, f)
		checkRendered(t, sql, r.Plan(sql))
	}
}
