package rewrite

import (
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v6"
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
		_ = NeedsParse(sql)
	})
}
