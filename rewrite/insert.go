package rewrite

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// INSERT ... VALUES targets (docs/architecture.md, "How IDs are made"). Which columns
// of the target default to snowflake.nextval is a catalog fact the session
// learns (and caches) itself, so the analysis records only the shape of the
// statement: the target's name, its column list and where each row ends and
// each DEFAULT item lies (plan.Insert). The session builds the template.
//
// Positions come from the token stream, walked strictly in the grammar's
// order (name, alias, column list, OVERRIDING, VALUES rows): anything
// unexpected leaves the statement to the server.

// withInserts records the INSERTs that are queries of a WITH clause. A
// data-modifying CTE runs exactly once, whether or not it is referenced.
func (a *analyzer) withInserts(w *pg_query.WithClause) {
	if w == nil {
		return
	}
	for _, c := range w.Ctes {
		cte := c.GetCommonTableExpr()
		if ins := cte.GetCtequery().GetInsertStmt(); ins != nil {
			a.withInserts(ins.WithClause)
			a.insert(ins)
		}
	}
}

// insert records an INSERT ... VALUES or INSERT ... DEFAULT VALUES whose
// target may have snowflake defaults.
func (a *analyzer) insert(ins *pg_query.InsertStmt) {
	if a.noSlots {
		return // an earlier statement may change search_path, role or catalog
	}
	rv := ins.Relation
	if rv == nil || rv.Catalogname != "" || rv.Relname == "" {
		return
	}
	var sel *pg_query.SelectStmt
	if ins.SelectStmt != nil {
		sel = ins.SelectStmt.GetSelectStmt()
		// Only a bare VALUES list evaluates each row's items exactly once.
		if sel == nil || len(sel.ValuesLists) == 0 || sel.WithClause != nil || sel.IntoClause != nil ||
			len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil ||
			len(sel.LockingClause) > 0 || sel.Op != pg_query.SetOperation_SETOP_NONE {
			return
		}
	}
	t := plan.Insert{Rel: quoteIdent(rv.Relname)}
	if rv.Schemaname != "" {
		t.Rel = quoteIdent(rv.Schemaname) + "." + t.Rel
	}
	if !validRelName(t.Rel) {
		return
	}
	ts := a.tokens()
	i := a.afterRelName(rv)
	if i < 0 {
		return
	}
	if rv.Alias != nil {
		if !tokIs(ts, i, pg_query.Token_AS) {
			return // the grammar requires AS before an INSERT target's alias
		}
		i += 2
	}
	if len(ins.Cols) > 0 {
		if !tokIs(ts, i, pg_query.Token_ASCII_40) {
			return
		}
		close := a.matchParen(i)
		if close < 0 {
			return
		}
		t.ColsEnd = ts[close].start
		for _, c := range ins.Cols {
			rt := c.GetResTarget()
			if rt == nil || len(rt.Indirection) > 0 || rt.Name == "" {
				return // subscripted or field targets: leave to the server
			}
			t.Cols = append(t.Cols, rt.Name)
		}
		i = close + 1
	}
	if ins.Override != pg_query.OverridingKind_OVERRIDING_NOT_SET {
		if !tokIs(ts, i, pg_query.Token_OVERRIDING) {
			return
		}
		i += 3 // OVERRIDING {USER|SYSTEM} VALUE
	}
	if sel == nil {
		if !tokIs(ts, i, pg_query.Token_DEFAULT) || !tokIs(ts, i+1, pg_query.Token_VALUES) {
			return
		}
		t.DefaultValues = plan.Span{Start: ts[i].start, End: ts[i+1].end}
		a.inserts = append(a.inserts, t)
		return
	}
	if !tokIs(ts, i, pg_query.Token_VALUES) {
		return
	}
	i++
	for r, row := range sel.ValuesLists {
		if r > 0 {
			if !tokIs(ts, i, pg_query.Token_ASCII_44) {
				return
			}
			i++
		}
		if !tokIs(ts, i, pg_query.Token_ASCII_40) {
			return
		}
		close := a.matchParen(i)
		if close < 0 {
			return
		}
		items := row.GetList().GetItems()
		rw := plan.Row{End: ts[close].start, Len: len(items)}
		for j, it := range items {
			d := it.GetSetToDefault()
			if d == nil {
				continue
			}
			k := a.tokenAt(int(d.Location))
			if !tokIs(ts, k, pg_query.Token_DEFAULT) || ts[k].end > rw.End {
				return
			}
			rw.Defaults = append(rw.Defaults, plan.DefaultItem{Index: j, Span: plan.Span{Start: ts[k].start, End: ts[k].end}})
		}
		t.Rows = append(t.Rows, rw)
		i = close + 1
	}
	a.inserts = append(a.inserts, t)
}

func tokIs(ts []token, i int, k pg_query.Token) bool { return i >= 0 && i < len(ts) && ts[i].kind == k }

// quoteIdent double-quotes an identifier as the server would read it back
// unchanged (the parser already folded unquoted names).
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
