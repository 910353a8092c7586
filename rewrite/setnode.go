package rewrite

import (
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/snowflake-proxy/snowflake-proxy/internal/guc"
)

// nodeGUC is the setting the extension declares: integer 0..1023,
// superuser-only (PGC_SUSET).
const (
	nodeGUC     = "snowflake.node"
	nodeGUCMin  = 0
	nodeGUCMax  = 1023
	errPrivCode = "42501" // insufficient_privilege
	errValCode  = "22023" // invalid_parameter_value
)

// setNode rewrites SET/RESET snowflake.node. On a stock server the setting
// is a placeholder anyone may set to any text; the extension would refuse
// non-superusers and values that are not integers in 0..1023. The statement
// becomes a DO block that makes the same checks, in the server's order
// (argument count, privilege, value), and then runs the statement. The
// value is checked here, at analysis time, with PostgreSQL's own integer
// syntax (guc.CheckInt); a valid value written other than as a plain integer
// ('7', 0x7, 7.2) is normalised (SET snowflake.node = 7) so that
// current_setting returns what the extension would. It returns the command
// tag, or "" when the statement is not about snowflake.node.
func (a *analyzer) setNode(raw *pg_query.RawStmt, s *pg_query.VariableSetStmt) string {
	if !strings.EqualFold(s.Name, nodeGUC) {
		return ""
	}
	tag := "SET"
	switch s.Kind {
	case pg_query.VariableSetKind_VAR_SET_VALUE, pg_query.VariableSetKind_VAR_SET_DEFAULT,
		pg_query.VariableSetKind_VAR_SET_CURRENT:
	case pg_query.VariableSetKind_VAR_RESET:
		tag = "RESET"
	default:
		return ""
	}
	start, end, ok := a.stmtSpan(raw)
	if !ok {
		return ""
	}
	stmt := a.sql[start:end]
	var body strings.Builder
	body.WriteString("DECLARE ok boolean; BEGIN ")
	if s.Kind == pg_query.VariableSetKind_VAR_SET_VALUE && len(s.Args) != 1 {
		raise(&body, errValCode, "SET "+s.Name+" takes only one argument", "")
	} else {
		privilegeCheck(&body, s.Name)
		if s.Kind == pg_query.VariableSetKind_VAR_SET_VALUE {
			val, verbatim, ok := setValue(s.Args[0])
			if !ok {
				return "" // a value form SET does not produce: let the server decide
			}
			if n, err := guc.CheckInt(s.Name, val, nodeGUCMin, nodeGUCMax); err != nil {
				raise(&body, errValCode, err.Message, err.Hint)
			} else {
				if !verbatim {
					stmt = "SET " + localWord(s) + nodeGUC + " = " + strconv.Itoa(int(n))
				}
				body.WriteString(stmt)
				body.WriteString("; ")
			}
		} else {
			body.WriteString(stmt)
			body.WriteString("; ")
		}
	}
	body.WriteString("END")
	b := body.String()
	q := dollarTag(b)
	a.addEdit(edit{start: start, end: end, text: "DO " + q + b + q})
	return tag
}

func localWord(s *pg_query.VariableSetStmt) string {
	if s.IsLocal {
		return "LOCAL "
	}
	return ""
}

// setValue returns the text PostgreSQL's flatten_set_variable_args makes of
// a SET argument; verbatim is set when the statement as written already
// passes the canonical integer text (an integer constant).
func setValue(n *pg_query.Node) (val string, verbatim, ok bool) {
	c := n.GetAConst()
	if c == nil || c.Isnull {
		return "", false, false
	}
	switch v := c.Val.(type) {
	case *pg_query.A_Const_Ival:
		return strconv.Itoa(int(v.Ival.GetIval())), true, true
	case *pg_query.A_Const_Fval:
		return v.Fval.GetFval(), false, true
	case *pg_query.A_Const_Sval:
		return v.Sval.GetSval(), false, true
	}
	return "", false, false
}

// privilegeCheck refuses the statement as PostgreSQL refuses a
// superuser-only setting: allowed for superusers and, from PostgreSQL 15,
// for roles granted SET on the parameter (GRANT SET ON PARAMETER).
func privilegeCheck(b *strings.Builder, name string) {
	b.WriteString("SELECT rolsuper INTO ok FROM pg_catalog.pg_roles WHERE rolname = current_user; ")
	b.WriteString("IF NOT ok AND pg_catalog.current_setting('server_version_num')::int >= 150000 THEN ")
	b.WriteString("EXECUTE 'SELECT pg_catalog.has_parameter_privilege(''" + nodeGUC + "'', ''SET'')' INTO ok; END IF; ")
	b.WriteString("IF NOT ok THEN ")
	raise(b, errPrivCode, `permission denied to set parameter "`+name+`"`, "")
	b.WriteString("END IF; ")
}

func raise(b *strings.Builder, code, msg, hint string) {
	b.WriteString("RAISE EXCEPTION USING ERRCODE = '" + code + "', MESSAGE = ")
	b.WriteString(quoteLiteral(msg))
	if hint != "" {
		b.WriteString(", HINT = ")
		b.WriteString(quoteLiteral(hint))
	}
	b.WriteString("; ")
}

// quoteLiteral quotes s as an SQL string literal that means s whatever
// standard_conforming_strings is.
func quoteLiteral(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		q = "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}

// dollarTag returns a dollar-quote delimiter that does not occur in body.
func dollarTag(body string) string {
	q := "$sf$"
	for i := 1; strings.Contains(body, q); i++ {
		q = "$sf" + strconv.Itoa(i) + "$"
	}
	return q
}

// showNode answers SHOW snowflake.node as the extension does when no node
// is set anywhere: 0. On a stock server the setting is a placeholder that
// does not exist until something sets it, and SHOW would fail with
// "unrecognized configuration parameter". The SELECT gives the same column
// (text, named snowflake.node) and the session renames its tag to SHOW.
func (a *analyzer) showNode(raw *pg_query.RawStmt, s *pg_query.VariableShowStmt) string {
	if !strings.EqualFold(s.Name, nodeGUC) {
		return ""
	}
	start, end, ok := a.stmtSpan(raw)
	if !ok {
		return ""
	}
	a.addEdit(edit{start: start, end: end, text: `SELECT COALESCE(NULLIF(pg_catalog.current_setting('` + nodeGUC +
		`', true), ''), '0') AS "` + nodeGUC + `"`})
	return "SHOW"
}
