package rewrite

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// analyzer holds the state of one analysis: the text, its tokens (scanned
// on first need), the edits collected so far and the plan being built.
type analyzer struct {
	sql  string
	toks []token
	scan bool // toks is valid
	// noSlots is set while analysing a statement whose calls must stay
	// calls: an earlier statement of the string (or the statement itself,
	// through set_config) may change what a generated value depends on.
	noSlots bool
	// issuing counts the calls of the current statement that issue IDs
	// (snowflake.nextval, convert_sequence_to_snowflake); nextvals the
	// snowflake.nextval calls among them.
	issuing, nextvals int
	// slotted holds the locations of calls made slots; leave those of
	// currval calls that must stay calls (names.go).
	slotted map[int32]bool
	leave   map[int32]bool
	edits   []edit
	inserts []plan.Insert // INSERT ... VALUES targets (insert.go)
	// plainInsert: the string is one INSERT ... VALUES without WITH or
	// RETURNING (plan.Inserts.Plain).
	plainInsert bool
	p           plan.Plan
	local       *plan.Local
}

// edit replaces sql[start:end] by a literal text or by a slot. An edit with
// start == end inserts.
type edit struct {
	start, end int
	text       string
	isSlot     bool
	slot       plan.Slot
}

// analyze parses sql and builds its plan. Text that does not parse, and
// any failure of the analysis (a panic in the parser bindings included),
// yields plan.Unparsed: forwarded as written, with every effect assumed
// (regression: as plan.Passthrough, a PostgreSQL 18 statement that
// changed a column default, or called snowflake.nextval, left the session
// filling the old default and issuing fast-path IDs below the shim's). The
// plan's template holds slices of sql: callers pass a string they own.
// Parses reports whether the parser's grammar reads sql. Tests use it to
// check that the syntax they send is newer than the grammar, without
// importing the parser themselves (only this package does).
func Parses(sql string) bool {
	_, err := pg_query.Parse(sql)
	return err == nil
}

func analyze(sql string) (p *plan.Plan) {
	defer func() {
		if recover() != nil {
			p = plan.Unparsed
		}
	}()
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return plan.Unparsed
	}
	if len(tree.Stmts) == 0 {
		return plan.Passthrough
	}
	a := &analyzer{sql: sql}
	a.p.Statements = make([]plan.Statement, len(tree.Stmts))
	for i, raw := range tree.Stmts {
		// Generated values are computed before the string is sent, from
		// the session's mirror of node, search_path, role, read-only state
		// and catalog. A statement that comes after one that may change
		// them (SET snowflake.node, CREATE SEQUENCE, BEGIN READ ONLY ...)
		// keeps its calls: the shim evaluates them after the change.
		before := a.p.Touches &^ plan.TouchPrepared
		a.issuing, a.nextvals = 0, 0
		own := a.scanParamsAndCalls(raw)
		a.noSlots = before != 0 || own != 0
		a.p.Touches |= own
		slots := a.nextvalEdits()
		a.p.Statements[i] = a.statement(raw, len(tree.Stmts) == 1)
		a.currvalAnywhere(raw)
		a.keepTargetNames(raw)
		// Calls that did not become slots issue in the server's shim when
		// the statement runs: later statements of the string keep theirs
		// too (their values would be generated before the shim's), and the
		// session fences afterwards (plan.TouchShim).
		if made := a.nextvalEdits() - slots; a.issuing > made {
			a.p.Touches |= plan.TouchShim
			a.p.ShimCalls = a.p.ShimCalls || a.nextvals > made
		}
	}
	return a.finish()
}

// statement analyses one raw statement and returns its plan entry.
func (a *analyzer) statement(raw *pg_query.RawStmt, only bool) plan.Statement {
	var st plan.Statement
	if raw.Stmt == nil {
		return st
	}
	a.p.Touches |= stmtTouches(raw.Stmt)
	switch n := raw.Stmt.Node.(type) {
	case *pg_query.Node_SelectStmt:
		a.withInserts(n.SelectStmt.WithClause)
		a.topSelect(n.SelectStmt, only)
	case *pg_query.Node_InsertStmt:
		a.withInserts(n.InsertStmt.WithClause)
		if sel := n.InsertStmt.SelectStmt.GetSelectStmt(); sel != nil {
			a.onceQuery(sel)
			if len(sel.ValuesLists) == 0 {
				// INSERT ... SELECT: column defaults, snowflake.nextval
				// among them, run per row in the server's shim.
				a.p.Touches |= plan.TouchShim
			}
		}
		a.insert(n.InsertStmt)
		// Without WITH, the only statement's targets are its own.
		ins := n.InsertStmt
		a.plainInsert = only && ins.WithClause == nil && len(ins.ReturningList) == 0 && len(a.inserts) == 1
	case *pg_query.Node_CopyStmt:
		a.copyStmt(n.CopyStmt, only)
	case *pg_query.Node_UpdateStmt:
		a.withInserts(n.UpdateStmt.WithClause)
	case *pg_query.Node_DeleteStmt:
		a.withInserts(n.DeleteStmt.WithClause)
	case *pg_query.Node_MergeStmt:
		a.withInserts(n.MergeStmt.WithClause)
	case *pg_query.Node_VariableSetStmt:
		st.Tag = a.setNode(raw, n.VariableSetStmt)
	case *pg_query.Node_VariableShowStmt:
		st.Tag = a.showNode(raw, n.VariableShowStmt)
	case *pg_query.Node_CreateExtensionStmt:
		st.Tag = a.createExtension(raw, n.CreateExtensionStmt)
	case *pg_query.Node_DropStmt:
		st.Tag = a.dropExtension(raw, n.DropStmt)
	case *pg_query.Node_AlterExtensionStmt:
		st.Tag = a.alterExtension(raw, n.AlterExtensionStmt)
	case *pg_query.Node_DiscardStmt:
		st.DeallocateAll = n.DiscardStmt.Target == pg_query.DiscardMode_DISCARD_ALL
	case *pg_query.Node_DeallocateStmt:
		d := n.DeallocateStmt
		st.Deallocate = d.Name
		st.DeallocateAll = d.Isall || d.Name == ""
	}
	return st
}

// nextvalEdits counts the Nextval slots recorded so far.
func (a *analyzer) nextvalEdits() int {
	n := 0
	for _, e := range a.edits {
		if e.isSlot && e.slot.Op == plan.Nextval {
			n++
		}
	}
	return n
}

// addEdit records an edit.
func (a *analyzer) addEdit(e edit) { a.edits = append(a.edits, e) }

// finish assembles the template from the edits and returns the plan, or
// plan.Passthrough when there is nothing to do.
func (a *analyzer) finish() *plan.Plan {
	if len(a.edits) == 0 && len(a.inserts) == 0 && a.p.Touches == 0 && !hasEffects(a.p.Statements) {
		return plan.Passthrough
	}
	p := a.p
	var base []plan.Edit
	if len(a.edits) > 0 {
		base = make([]plan.Edit, len(a.edits))
		for i, e := range a.edits {
			base[i] = plan.Edit{Start: e.start, End: e.end, Text: e.text, IsSlot: e.isSlot, Slot: e.slot}
		}
		// Build sorts base: Inserts.Base keeps that order, so that edits
		// at one offset stay in the order they were made.
		t, ok := plan.Build(a.sql, base)
		if !ok {
			return plan.Passthrough
		}
		p.Template = t
		p.Local = a.local
	}
	if len(a.inserts) > 0 {
		p.Inserts = &plan.Inserts{SQL: a.sql, Base: base, Targets: a.inserts, Plain: a.plainInsert}
	}
	return &p
}

// hasEffects reports whether a statement has a tag to rename or removes
// prepared statements.
func hasEffects(sts []plan.Statement) bool {
	for _, s := range sts {
		if s != (plan.Statement{}) {
			return true
		}
	}
	return false
}
