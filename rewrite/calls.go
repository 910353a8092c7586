package rewrite

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// defaultArg is the argument text of a call without argument, as the
// server would see it: an untyped literal, which the server resolves to
// regclass only once it has found the function, so that without schema
// snowflake the error is the function's, as for the call the client wrote
// (regression: with '...'::regclass PostgreSQL 18 reported the missing
// relation snowflake.id_seq, 42P01, instead of the missing schema, 3F000;
// earlier versions report the schema either way).
const defaultArg = "'" + plan.DefaultSequence + "'"

// topSelect analyses a SELECT (or VALUES, or set operation) that is a whole
// statement. only is set when it is the only statement of the string: it
// may then be answered locally.
func (a *analyzer) topSelect(sel *pg_query.SelectStmt, only bool) {
	if sel.IntoClause != nil {
		return // SELECT INTO creates a table: the server evaluates it
	}
	slots := len(a.edits)
	direct, ok := a.onceQuery(sel)
	if !ok || !only || sel.Op != pg_query.SetOperation_SETOP_NONE || len(sel.ValuesLists) > 0 || len(sel.SortClause) > 0 {
		return
	}
	// Local: every target is directly a Nextval slot.
	if direct == nil || len(direct) != len(sel.TargetList) {
		return
	}
	cols := make([]string, 0, len(direct))
	for i, rt := range direct {
		if rt == nil || rt.op != plan.Nextval || !int8Only(sel.TargetList[i].GetResTarget().GetVal()) {
			return
		}
		name := sel.TargetList[i].GetResTarget().GetName()
		if name == "" {
			name = "nextval"
		}
		cols = append(cols, name)
	}
	if len(a.edits) == slots {
		return
	}
	a.local = &plan.Local{Columns: cols}
}

// directSlot records, for one target, the op of the slot that is its whole
// value (nil when the target is anything else).
type directSlot struct{ op plan.SlotOp }

// onceQuery finds the slots of a query whose expressions are evaluated
// exactly once per execution: a SELECT without FROM (and without any
// clause that could evaluate its targets zero or many times), a VALUES
// list, or a set operation of such queries. For a plain SELECT it returns,
// per target, the slot that is the target's whole value. ok is false when
// the query is not of that kind (no slots were added then).
func (a *analyzer) onceQuery(sel *pg_query.SelectStmt) (direct []*directSlot, ok bool) {
	if sel.WithClause != nil || sel.IntoClause != nil || len(sel.LockingClause) > 0 ||
		sel.LimitCount != nil || sel.LimitOffset != nil {
		return nil, false
	}
	if sel.Op != pg_query.SetOperation_SETOP_NONE {
		if sel.Larg == nil || sel.Rarg == nil {
			return nil, false
		}
		// Each branch stands on its own: one that is not of the kind keeps
		// its calls, the other may still have slots.
		a.onceQuery(sel.Larg)
		a.onceQuery(sel.Rarg)
		return nil, true
	}
	if len(sel.ValuesLists) > 0 {
		for _, row := range sel.ValuesLists {
			for _, item := range row.GetList().GetItems() {
				a.slotsIn(item)
			}
		}
		return nil, true
	}
	if len(sel.FromClause) > 0 || sel.WhereClause != nil || len(sel.GroupClause) > 0 ||
		sel.GroupDistinct || sel.HavingClause != nil || len(sel.WindowClause) > 0 ||
		len(sel.DistinctClause) > 0 {
		return nil, false
	}
	for _, t := range sel.TargetList {
		if !plainTarget(t) {
			return nil, false
		}
	}
	direct = make([]*directSlot, len(sel.TargetList))
	for i, t := range sel.TargetList {
		rt := t.GetResTarget()
		before := len(a.edits)
		a.slotsIn(rt.Val)
		if len(a.edits) == before+1 && a.edits[before].isSlot {
			if call := unwrapCasts(rt.Val).GetFuncCall(); call != nil && int(call.Location) == a.edits[before].start {
				direct[i] = &directSlot{op: a.edits[before].slot.Op}
			}
		}
	}
	return direct, true
}

func unwrapCasts(n *pg_query.Node) *pg_query.Node {
	for {
		tc := n.GetTypeCast()
		if tc == nil {
			return n
		}
		n = tc.Arg
	}
}

// plainTarget reports whether a target of a SELECT without FROM is made
// only of nodes that cannot evaluate a call zero or many times: constants,
// parameters, casts, operators, arrays, rows and snowflake.* functions. Any
// other function may return a set (SELECT snowflake.nextval(),
// generate_series(1,3) gives three rows, each with its own id); CASE,
// COALESCE, NULLIF and boolean operators evaluate lazily; sublinks run
// queries.
func plainTarget(n *pg_query.Node) bool {
	if n == nil {
		return true
	}
	switch x := n.Node.(type) {
	case *pg_query.Node_ResTarget:
		return len(x.ResTarget.Indirection) == 0 && plainTarget(x.ResTarget.Val)
	case *pg_query.Node_AConst, *pg_query.Node_ParamRef:
		return true
	case *pg_query.Node_TypeCast:
		return plainTarget(x.TypeCast.Arg)
	case *pg_query.Node_CollateClause:
		return plainTarget(x.CollateClause.Arg)
	case *pg_query.Node_AExpr:
		e := x.AExpr
		return e.Kind == pg_query.A_Expr_Kind_AEXPR_OP && plainTarget(e.Lexpr) && plainTarget(e.Rexpr)
	case *pg_query.Node_AArrayExpr:
		return plainList(x.AArrayExpr.Elements)
	case *pg_query.Node_RowExpr:
		return plainList(x.RowExpr.Args)
	case *pg_query.Node_FuncCall:
		f := x.FuncCall
		return snowflakeFunc(f) != "" && plainCall(f) && plainList(f.Args)
	case *pg_query.Node_NamedArgExpr:
		return plainTarget(x.NamedArgExpr.Arg)
	}
	return false
}

func plainList(ns []*pg_query.Node) bool {
	for _, n := range ns {
		if !plainTarget(n) {
			return false
		}
	}
	return true
}

// plainCall reports whether a call is an ordinary function call: no
// aggregate or window decoration, no VARIADIC, no *.
func plainCall(f *pg_query.FuncCall) bool {
	return len(f.AggOrder) == 0 && f.AggFilter == nil && f.Over == nil && !f.AggWithinGroup &&
		!f.AggStar && !f.AggDistinct && !f.FuncVariadic
}

// snowflakeFunc returns the name of a snowflake.<name>(...) call, or "".
func snowflakeFunc(f *pg_query.FuncCall) string {
	if len(f.Funcname) != 2 || f.Funcname[0].GetString_().GetSval() != "snowflake" {
		return ""
	}
	return f.Funcname[1].GetString_().GetSval()
}

// slotsIn turns the snowflake.nextval/currval calls of an expression that
// is evaluated once into slots, descending only through nodes that
// evaluate their operands exactly once: operators, casts and snowflake.*
// functions. Operators and functions with a NULL constant operand are not
// descended: the planner folds a strict call with a NULL argument to NULL
// without evaluating its other arguments.
func (a *analyzer) slotsIn(n *pg_query.Node) {
	if n == nil {
		return
	}
	switch x := n.Node.(type) {
	case *pg_query.Node_TypeCast:
		a.slotsIn(x.TypeCast.Arg)
	case *pg_query.Node_AExpr:
		e := x.AExpr
		if e.Kind != pg_query.A_Expr_Kind_AEXPR_OP || isNullConst(e.Lexpr) || isNullConst(e.Rexpr) {
			return
		}
		a.slotsIn(e.Lexpr)
		a.slotsIn(e.Rexpr)
	case *pg_query.Node_FuncCall:
		f := x.FuncCall
		name := snowflakeFunc(f)
		if name == "" || !plainCall(f) {
			return
		}
		if (name == "nextval" || name == "currval") && a.callSlot(f, name) {
			return
		}
		for _, arg := range f.Args {
			if isNullConst(arg) {
				return
			}
		}
		for _, arg := range f.Args {
			a.slotsIn(arg)
		}
	}
}

func isNullConst(n *pg_query.Node) bool {
	n = unwrapCasts(n)
	c := n.GetAConst()
	return c != nil && c.Isnull
}

// callSlot makes a slot of a snowflake.nextval/currval call whose argument
// is absent or a literal sequence name; it reports whether it did.
func (a *analyzer) callSlot(f *pg_query.FuncCall, name string) bool {
	if a.noSlots || len(f.Args) > 1 {
		return false
	}
	slot := plan.Slot{Op: plan.Nextval, Seq: plan.DefaultSequence, Arg: defaultArg}
	if name == "currval" {
		slot.Op = plan.Currval
	}
	open, close, ok := a.callParens(int(f.Location))
	if !ok {
		return false
	}
	ts := a.tokens()
	if len(f.Args) == 1 {
		seq, ok := literalRegclass(f.Args[0])
		if !ok || !validRelName(seq) || close == open+1 {
			return false
		}
		slot.Seq = seq
		slot.Arg = a.sql[ts[open+1].start:ts[close-1].end]
	} else if close != open+1 {
		return false
	}
	start := int(f.Location)
	if start > 0 && (isIdentChar(a.sql[start-1]) || a.sql[start-1] == '$') {
		// SELECT"snowflake"."nextval"(): a rendered slot may start with a
		// letter (COALESCE, snowflake._currval), keep it apart.
		a.addEdit(edit{start: start, end: start, text: " "})
	}
	a.addEdit(edit{start: start, end: ts[close].end, isSlot: true, slot: slot})
	if a.slotted == nil {
		a.slotted = map[int32]bool{}
	}
	a.slotted[f.Location] = true
	return true
}

// currvalAnywhere makes slots of the snowflake.currval calls of a DML
// statement that are not slots yet: per-row positions, WHERE clauses,
// subqueries. currval reads state and changes none, so evaluating it once
// or per row gives the same value, and the shim's snowflake._currval
// returns the later of its own session value and the proxy's (regression:
// equivalence currval.sql, a currval next to a subquery went to the shim,
// which knew nothing of IDs the fast path had issued, and said 55000).
// DDL and PREPARE keep theirs: a hint baked into a default or a prepared
// body would go stale.
func (a *analyzer) currvalAnywhere(raw *pg_query.RawStmt) {
	switch raw.Stmt.GetNode().(type) {
	case *pg_query.Node_SelectStmt, *pg_query.Node_InsertStmt, *pg_query.Node_UpdateStmt,
		*pg_query.Node_DeleteStmt, *pg_query.Node_MergeStmt:
	default:
		return
	}
	if raw.Stmt.GetSelectStmt().GetIntoClause() != nil {
		return // SELECT INTO is DDL
	}
	walk(raw.ProtoReflect(), func(m protoreflect.Message) {
		switch x := m.Interface().(type) {
		case *pg_query.RangeFunction:
			a.rangeFunction(x) // before the calls inside it
		case *pg_query.FuncCall:
			if a.slotted[x.Location] || a.leave[x.Location] || snowflakeFunc(x) != "currval" || !plainCall(x) {
				return
			}
			a.callSlot(x, "currval")
		}
	})
}

// literalRegclass returns the value of an argument that is a string
// literal, or a string literal cast to regclass.
func literalRegclass(n *pg_query.Node) (string, bool) {
	if tc := n.GetTypeCast(); tc != nil {
		if !isRegclass(tc.TypeName) {
			return "", false
		}
		n = tc.Arg
	}
	c := n.GetAConst()
	if c == nil || c.Isnull {
		return "", false
	}
	s, ok := c.Val.(*pg_query.A_Const_Sval)
	if !ok {
		return "", false
	}
	return s.Sval.GetSval(), true
}

func isRegclass(t *pg_query.TypeName) bool {
	if t == nil || t.Setof || t.PctType || len(t.Typmods) > 0 || len(t.ArrayBounds) > 0 {
		return false
	}
	switch len(t.Names) {
	case 1:
		return t.Names[0].GetString_().GetSval() == "regclass"
	case 2:
		return t.Names[0].GetString_().GetSval() == "pg_catalog" && t.Names[1].GetString_().GetSval() == "regclass"
	}
	return false
}
