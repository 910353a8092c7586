package rewrite

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// stmtTouches returns the session and catalog state a statement may change.
// It errs towards reporting too much: a touch only makes the session
// re-read its mirror at the next safe point.
func stmtTouches(n *pg_query.Node) plan.Touch {
	switch x := n.Node.(type) {
	case *pg_query.Node_VariableSetStmt:
		return setTouches(x.VariableSetStmt)
	case *pg_query.Node_TransactionStmt:
		t := x.TransactionStmt
		if t.Kind == pg_query.TransactionStmtKind_TRANS_STMT_BEGIN || t.Kind == pg_query.TransactionStmtKind_TRANS_STMT_START {
			for _, o := range t.Options {
				if o.GetDefElem().GetDefname() == "transaction_read_only" {
					return plan.TouchReadOnly
				}
			}
		}
		return 0
	case *pg_query.Node_DiscardStmt:
		switch x.DiscardStmt.Target {
		case pg_query.DiscardMode_DISCARD_ALL:
			return plan.TouchAll | plan.TouchPrepared
		case pg_query.DiscardMode_DISCARD_TEMP:
			return plan.TouchCatalog // temporary tables (and their defaults) are gone
		}
		return 0
	case *pg_query.Node_DeallocateStmt:
		return plan.TouchPrepared
	case *pg_query.Node_DoStmt:
		// A DO block may run DDL, SET anything and call nextval.
		return plan.TouchCatalog | plan.TouchNode | plan.TouchSearchPath | plan.TouchRole | plan.TouchShim
	case *pg_query.Node_ExecuteStmt, *pg_query.Node_CallStmt:
		// A prepared statement or a procedure may issue IDs in the shim;
		// their text is not visible here.
		return plan.TouchShim
	case *pg_query.Node_SelectStmt:
		if x.SelectStmt.IntoClause != nil {
			return plan.TouchCatalog // SELECT INTO creates a table
		}
		return 0
	case *pg_query.Node_CopyStmt:
		if x.CopyStmt.IsFrom {
			// Column defaults (snowflake.nextval) run in the shim per row.
			return plan.TouchShim
		}
		return 0
	case *pg_query.Node_AlterSeqStmt:
		return plan.TouchCatalog | plan.TouchSequence // RESTART moves last_value
	}
	if isDDL(n) {
		return plan.TouchCatalog
	}
	return 0
}

func setTouches(s *pg_query.VariableSetStmt) plan.Touch {
	if s.Kind == pg_query.VariableSetKind_VAR_RESET_ALL {
		return plan.TouchAll
	}
	name := strings.ToLower(s.Name)
	switch name {
	case nodeGUC:
		return plan.TouchNode
	case "search_path":
		return plan.TouchSearchPath
	case "role", "session_authorization":
		return plan.TouchRole
	case "transaction_read_only", "default_transaction_read_only",
		"transaction", "session characteristics":
		// SET TRANSACTION and SET SESSION CHARACTERISTICS are VAR_SET_MULTI
		// statements named "TRANSACTION" and "SESSION CHARACTERISTICS".
		return plan.TouchReadOnly
	}
	return 0
}

// ddlStmts are the statement nodes (by protobuf field name of pg_query's
// Node) that change the catalog, besides every create_*, alter_* and drop*
// statement.
var ddlStmts = map[string]bool{
	"comment_stmt": true, "grant_stmt": true, "grant_role_stmt": true,
	"truncate_stmt": true, "reassign_owned_stmt": true, "sec_label_stmt": true,
	"import_foreign_schema_stmt": true, "refresh_mat_view_stmt": true,
	"rename_stmt": true, "index_stmt": true, "view_stmt": true, "rule_stmt": true,
	"define_stmt": true, "composite_type_stmt": true,
}

func isDDL(n *pg_query.Node) bool {
	m := n.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("node"))
	if fd == nil {
		return false
	}
	name := string(fd.Name())
	return strings.HasPrefix(name, "create") || strings.HasPrefix(name, "alter") ||
		strings.HasPrefix(name, "drop") || ddlStmts[name]
}

// scanParamsAndCalls walks a whole statement: MaxParam is the highest $n
// anywhere; a set_config(...) call anywhere may change any setting, a
// setval(...) a sequence; a.issuing counts the calls that issue IDs (see
// analyze). It returns the touches of such calls.
func (a *analyzer) scanParamsAndCalls(raw *pg_query.RawStmt) plan.Touch {
	var t plan.Touch
	walk(raw.ProtoReflect(), func(m protoreflect.Message) {
		switch x := m.Interface().(type) {
		case *pg_query.ParamRef:
			if int(x.Number) > a.p.MaxParam {
				a.p.MaxParam = int(x.Number)
			}
		case *pg_query.FuncCall:
			name := funcName(x)
			switch name {
			case "set_config":
				t |= plan.TouchNode | plan.TouchSearchPath | plan.TouchRole
			case "setval":
				t |= plan.TouchSequence
			}
			a.routeNodeCall(x, name)
			switch snowflakeFunc(x) {
			case "nextval":
				a.issuing++
				a.nextvals++
			case "convert_sequence_to_snowflake":
				a.issuing++
			}
		}
	})
	return t
}

// nodeCallRoutes are the shim functions that stand in for calls about
// snowflake.node, by the name of the built-in and its argument count:
//   - set_config('snowflake.node', v, local): snowflake.set_config refuses
//     it as the extension refuses a non-superuser (the setting is
//     superuser-only) and validates the value; on a stock server the
//     setting is a mere placeholder anyone may set.
//   - current_setting('snowflake.node') (without missing_ok):
//     snowflake.current_setting reports 0 when no node is set anywhere, as
//     the extension's declared setting does; a stock server knows no such
//     setting then and the call fails.
var nodeCallRoutes = map[string]struct {
	args int
	to   string
}{
	"set_config":      {3, "snowflake.set_config"},
	"current_setting": {1, "snowflake.current_setting"},
}

// routeNodeCall replaces the name of a nodeCallRoutes call whose first
// argument is the literal 'snowflake.node'. A name that is not a literal
// cannot be checked and stays with the server.
func (a *analyzer) routeNodeCall(f *pg_query.FuncCall, name string) {
	r, ok := nodeCallRoutes[name]
	if !ok || len(f.Args) != r.args {
		return
	}
	setting, ok := f.Args[0].GetAConst().GetVal().(*pg_query.A_Const_Sval)
	if !ok || !strings.EqualFold(strings.TrimSpace(setting.Sval.GetSval()), nodeGUC) {
		return
	}
	open, _, ok := a.callParens(int(f.Location))
	if !ok {
		return
	}
	a.addEdit(edit{start: int(f.Location), end: a.tokens()[open].start, text: r.to})
}

// funcName is the last part of a function call's name.
func funcName(f *pg_query.FuncCall) string {
	if len(f.Funcname) == 0 {
		return ""
	}
	return f.Funcname[len(f.Funcname)-1].GetString_().GetSval()
}

// walk calls visit for m and every message below it.
func walk(m protoreflect.Message, visit func(protoreflect.Message)) {
	visit(m)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() || fd.Message() == nil:
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walk(l.Get(i).Message(), visit)
			}
		default:
			walk(v.Message(), visit)
		}
		return true
	})
}
