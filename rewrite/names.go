package rewrite

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A slot renders as something else than the call it replaces (a cast
// literal, a parameter, snowflake._currval), and PostgreSQL names result
// columns and FROM items after what it sees: SELECT snowflake.currval('s')
// names its column currval, SELECT snowflake._currval('s', 1) names it
// _currval. So wherever a slot call gives a name, the rewritten text names
// it explicitly with the name the original would have had (regression:
// SELECT * FROM snowflake.currval('s') came back as column _currval, and
// SELECT currval FROM snowflake.currval('s') failed with 42703).
//
// PostgreSQL's rules (FigureColname, chooseScalarFunctionAlias): a target
// that is a function call is named after the function; a cast or a COLLATE
// keeps the name of what it applies to; anything around the call (an
// operator, another function) gives its own name, which the rewrite does
// not change. A function in FROM without alias names both the relation and
// its column after itself (ROWS FROM: the relation after the first
// function, each column after its function); with an alias and a single
// function the column takes the alias.

// slotName returns the column name PostgreSQL gives an expression whose
// value is a slot call, possibly cast, and that call; "" when the
// expression is anything else.
func (a *analyzer) slotName(n *pg_query.Node) (string, *pg_query.FuncCall) {
	for {
		switch x := n.GetNode().(type) {
		case *pg_query.Node_TypeCast:
			n = x.TypeCast.Arg
			continue
		case *pg_query.Node_CollateClause:
			n = x.CollateClause.Arg
			continue
		case *pg_query.Node_FuncCall:
			f := x.FuncCall
			if !a.slotted[f.Location] {
				return "", nil
			}
			return snowflakeFunc(f), f
		}
		return "", nil
	}
}

// keepTargetNames gives every unnamed target of raw's target and RETURNING
// lists whose value is a slot call the name of that call.
func (a *analyzer) keepTargetNames(raw *pg_query.RawStmt) {
	if len(a.slotted) == 0 {
		return
	}
	walk(raw.ProtoReflect(), func(m protoreflect.Message) {
		var list []*pg_query.Node
		switch x := m.Interface().(type) {
		case *pg_query.SelectStmt:
			list = x.TargetList
		case *pg_query.InsertStmt:
			list = x.ReturningList
		case *pg_query.UpdateStmt:
			list = x.ReturningList
		case *pg_query.DeleteStmt:
			list = x.ReturningList
		case *pg_query.MergeStmt:
			list = x.ReturningList
		}
		for _, t := range list {
			rt := t.GetResTarget()
			if rt == nil || rt.Name != "" || rt.Val == nil {
				continue
			}
			if name, _ := a.slotName(rt.Val); name != "" {
				a.nameTarget(rt, name)
			}
		}
	})
}

// nameTarget appends " AS name" after a target.
func (a *analyzer) nameTarget(rt *pg_query.ResTarget, name string) {
	end := a.exprEnd(int(rt.Location))
	if end < 0 {
		return
	}
	a.insertAt(end, " AS "+name)
}

// insertAt inserts text at byte end, kept apart from a word that follows
// (SELECT f()ORDER BY 1).
func (a *analyzer) insertAt(end int, text string) {
	if end < len(a.sql) && (isIdentChar(a.sql[end]) || a.sql[end] == '$') {
		text += " "
	}
	a.addEdit(edit{start: end, end: end, text: text})
}

// rangeFunction makes slots of the snowflake.currval calls that are a whole
// function of a FROM item (possibly cast) and keeps the names PostgreSQL
// gives that item: the relation alias and the function's column. Calls it
// cannot name so (a function after the first of a ROWS FROM, whose column
// position depends on the earlier functions' result types) stay calls, for
// the server's shim. Calls deeper inside are left to currvalAnywhere.
func (a *analyzer) rangeFunction(r *pg_query.RangeFunction) {
	for i, item := range r.Functions {
		pair := item.GetList().GetItems()
		if len(pair) == 0 {
			continue
		}
		f := unwrapCasts(pair[0]).GetFuncCall()
		if f == nil || a.slotted[f.Location] || snowflakeFunc(f) != "currval" || !plainCall(f) {
			continue
		}
		if !a.slotRangeFunction(r, i, pair[0], f) {
			// Keep currvalAnywhere away from it too.
			if a.leave == nil {
				a.leave = map[int32]bool{}
			}
			a.leave[f.Location] = true
		}
	}
}

// slotRangeFunction makes a slot of f, function number i of r (expr is f,
// possibly cast), with the naming edits r needs; false when it could not.
func (a *analyzer) slotRangeFunction(r *pg_query.RangeFunction, i int, expr *pg_query.Node, f *pg_query.FuncCall) bool {
	const name = "currval"
	named := r.Alias != nil && len(r.Alias.Colnames) > 0
	switch {
	case len(r.Coldeflist) > 0 || len(r.Functions) > 1 && i > 0:
		return false
	case named || len(r.Functions) == 1 && r.Alias != nil:
		// The client's column list, or the alias, names the column.
		return a.callSlot(f, name)
	}
	end, next, ok := a.rangeFunctionEnd(r, exprLocation(expr))
	if !ok {
		return false
	}
	at, text := end, " AS "+name
	switch {
	case r.Alias == nil && len(r.Functions) == 1:
	case r.Alias == nil:
		text = " AS " + name + "(" + name + ")"
	default:
		// ROWS FROM (snowflake.currval(...), ...) AS x: name the first
		// column after the alias.
		ts := a.tokens()
		if next < len(ts) && ts[next].kind == pg_query.Token_AS {
			next++
		}
		if next >= len(ts) {
			return false
		}
		at, text = ts[next].end, "("+name+")"
	}
	if !a.callSlot(f, name) {
		return false
	}
	a.insertAt(at, text)
	return true
}

// rangeFunctionEnd returns the byte offset just after a FROM function item
// without its alias (after ROWS FROM's parenthesis and WITH ORDINALITY),
// and the index of the token that follows. first is the byte offset of the
// item's first function.
func (a *analyzer) rangeFunctionEnd(r *pg_query.RangeFunction, first int) (end, next int, ok bool) {
	ts := a.tokens()
	var close int
	if r.IsRowsfrom {
		open := a.tokenAt(first) - 1
		if open < 0 || ts[open].kind != pg_query.Token_ASCII_40 {
			return 0, 0, false
		}
		if close = a.matchParen(open); close < 0 {
			return 0, 0, false
		}
	} else {
		var found bool
		if _, close, found = a.callParens(first); !found {
			return 0, 0, false
		}
	}
	next = close + 1
	if r.Ordinality {
		if next+1 >= len(ts) || ts[next+1].kind != pg_query.Token_ORDINALITY {
			return 0, 0, false
		}
		next += 2
	}
	return ts[next-1].end, next, true
}

// exprLocation is where an expression of a FROM function item starts: the
// call's name, or CAST.
func exprLocation(n *pg_query.Node) int {
	if tc := n.GetTypeCast(); tc != nil {
		return int(tc.Location)
	}
	return int(n.GetFuncCall().GetLocation())
}

// int8Only reports whether n is a call possibly cast to int8 only: the
// proxy answers a statement locally (plan.Local) with int8 columns, which
// SELECT snowflake.nextval()::text is not.
func int8Only(n *pg_query.Node) bool {
	for {
		tc := n.GetTypeCast()
		if tc == nil {
			return n.GetFuncCall() != nil
		}
		if !isInt8(tc.TypeName) {
			return false
		}
		n = tc.Arg
	}
}

func isInt8(t *pg_query.TypeName) bool {
	if t == nil || t.Setof || t.PctType || len(t.Typmods) > 0 || len(t.ArrayBounds) > 0 {
		return false
	}
	switch len(t.Names) {
	case 1:
		return t.Names[0].GetString_().GetSval() == "int8"
	case 2:
		return t.Names[0].GetString_().GetSval() == "pg_catalog" && t.Names[1].GetString_().GetSval() == "int8"
	}
	return false
}
