package wire

import (
	"fmt"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// A posMap keeps its own copy of the values, however many: the client pump
// overwrites its slice with the next statement's while the server may
// still answer this one.
func TestPosMapKeepsItsValues(t *testing.T) {
	tmpl := &plan.Template{Parts: []string{"SELECT ", ""}}
	for _, n := range []int{0, 1, posInline, posInline + 1, 3 * posInline} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			vals := make([]plan.Value, n)
			for i := range vals {
				vals[i] = plan.Value{ID: int64(1000 + i), Valid: true}
			}
			m := newPosMap(tmpl, vals, 0, plan.Literals)
			for i := range vals {
				vals[i] = plan.Value{ID: -1}
			}
			got := m.values()
			if len(got) != n {
				t.Fatalf("%d values, want %d", len(got), n)
			}
			for i, v := range got {
				if v.ID != int64(1000+i) || !v.Valid {
					t.Fatalf("value %d is %+v, want ID %d", i, v, 1000+i)
				}
			}
		})
	}
}

// Recording a rewritten statement's error-cursor map allocates nothing for
// up to posInline values: a rewritten INSERT allocated its map and a copy
// of its values for every execution (regression).
func TestPosMapOfARewrittenInsertAllocatesNothing(t *testing.T) {
	tmpl := &plan.Template{Parts: []string{"INSERT INTO t (id, v) VALUES (", ", 1)"}}
	vals := []plan.Value{{ID: 7, Valid: true}}
	var q owedQueue
	allocs := testing.AllocsPerRun(1000, func() {
		q.push(owed{kind: owedQuery, pos: newPosMap(tmpl, vals, 0, plan.Literals)})
		q.pop()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per recorded statement, want 0", allocs)
	}
}
