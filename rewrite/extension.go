package rewrite

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// extName is the name under which the shim is installed.
const extName = "snowflake"

// The statements about the snowflake extension cannot run on a server
// without its files: each becomes one slot covering the whole statement
// (without surrounding comments and the semicolon), which the session
// fills with the shim's SQL, and the command tag PostgreSQL would give.
// Every other extension statement goes to the server unchanged.

func (a *analyzer) createExtension(raw *pg_query.RawStmt, s *pg_query.CreateExtensionStmt) string {
	if s.Extname != extName {
		return ""
	}
	o := &plan.ExtensionOptions{IfNotExists: s.IfNotExists}
	for _, opt := range s.Options {
		d := opt.GetDefElem()
		if d == nil {
			return ""
		}
		switch d.Defname {
		case "schema":
			o.Schema = d.Arg.GetString_().GetSval()
		case "new_version":
			o.Version = d.Arg.GetString_().GetSval()
		case "cascade":
			o.Cascade = defBool(d)
		default:
			return "" // an option this analysis does not know: the server decides
		}
	}
	return a.extensionSlot(raw, plan.CreateExtension, o, "CREATE EXTENSION")
}

func (a *analyzer) dropExtension(raw *pg_query.RawStmt, s *pg_query.DropStmt) string {
	if s.RemoveType != pg_query.ObjectType_OBJECT_EXTENSION {
		return ""
	}
	o := &plan.ExtensionOptions{IfExists: s.MissingOk, Cascade: s.Behavior == pg_query.DropBehavior_DROP_CASCADE}
	found := false
	for _, obj := range s.Objects {
		name := obj.GetString_().GetSval()
		if name == extName && !found {
			found = true
			continue
		}
		// Regression (equivalence lifecycle.sql): DROP EXTENSION IF
		// EXISTS snowflake, other went to the server as is and left the
		// shim installed. The others are dropped by the same statement.
		o.Others = append(o.Others, quoteIdent(name))
	}
	if !found {
		return ""
	}
	return a.extensionSlot(raw, plan.DropExtension, o, "DROP EXTENSION")
}

func (a *analyzer) alterExtension(raw *pg_query.RawStmt, s *pg_query.AlterExtensionStmt) string {
	if s.Extname != extName {
		return ""
	}
	o := &plan.ExtensionOptions{}
	for _, opt := range s.Options {
		d := opt.GetDefElem()
		if d == nil || d.Defname != "new_version" {
			return ""
		}
		o.Version = d.Arg.GetString_().GetSval()
	}
	return a.extensionSlot(raw, plan.AlterExtension, o, "ALTER EXTENSION")
}

func (a *analyzer) extensionSlot(raw *pg_query.RawStmt, op plan.SlotOp, o *plan.ExtensionOptions, tag string) string {
	start, end, ok := a.stmtSpan(raw)
	if !ok {
		return ""
	}
	a.addEdit(edit{start: start, end: end, isSlot: true, slot: plan.Slot{Op: op, Ext: o}})
	return tag
}

// defBool is the value of a boolean option (CASCADE has none: true).
func defBool(d *pg_query.DefElem) bool {
	if d.Arg == nil {
		return true
	}
	if b := d.Arg.GetBoolean(); b != nil {
		return b.Boolval
	}
	return true
}
