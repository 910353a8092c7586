package rewrite

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// COPY table (columns) FROM STDIN (docs/architecture.md, "How IDs are
// made"). The session may name the snowflake columns the list omits and
// append their IDs to every row it relays, so the analysis records the
// target, the column list and how the rows are read (plan.Copy). Anything
// it does not understand (an option it does not know, a WHERE clause, a
// file or a program, no column list) stays with the server's shim.

// copyStmt records c when its rows may be completed by the session. only:
// c is the only statement of the string.
func (a *analyzer) copyStmt(c *pg_query.CopyStmt, only bool) {
	if !only || a.noSlots || !c.IsFrom || c.IsProgram || c.Filename != "" || c.Query != nil ||
		c.WhereClause != nil || len(c.Attlist) == 0 {
		return
	}
	rv := c.Relation
	if rv == nil || rv.Catalogname != "" || rv.Relname == "" || rv.Alias != nil {
		return
	}
	cp := plan.Copy{SQL: a.sql, Rel: quoteIdent(rv.Relname), Delim: '\t', Quote: '"', Null: `\N`}
	if rv.Schemaname != "" {
		cp.Rel = quoteIdent(rv.Schemaname) + "." + cp.Rel
	}
	if !validRelName(cp.Rel) {
		return
	}
	for _, n := range c.Attlist {
		s := n.GetString_()
		if s == nil || s.Sval == "" {
			return
		}
		cp.Cols = append(cp.Cols, s.Sval)
	}
	if !copyOptions(&cp, c.Options) {
		return
	}
	ts := a.tokens()
	i := a.afterRelName(rv)
	if !tokIs(ts, i, pg_query.Token_ASCII_40) {
		return
	}
	close := a.matchParen(i)
	if close < 0 {
		return
	}
	cp.ColsEnd = ts[close].start
	a.p.Copy = &cp
}

// copyOptions reads the options of a COPY FROM into cp; false for one the
// session does not handle.
func copyOptions(cp *plan.Copy, opts []*pg_query.Node) bool {
	csvDefaults := false
	escape := false
	delim := false
	null := false
	for _, o := range opts {
		d := o.GetDefElem()
		if d == nil {
			return false
		}
		switch d.Defname {
		case "format":
			switch strings.ToLower(optString(d)) {
			case "text":
				cp.Format = plan.CopyText
			case "csv":
				cp.Format, csvDefaults = plan.CopyCSV, true
			case "binary":
				cp.Format = plan.CopyBinary
			default:
				return false
			}
		case "delimiter", "quote", "escape":
			s := optString(d)
			if len(s) != 1 {
				return false // the server's error
			}
			switch d.Defname {
			case "delimiter":
				cp.Delim, delim = s[0], true
			case "quote":
				cp.Quote = s[0]
			default:
				cp.Escape, escape = s[0], true
			}
		case "null":
			s, ok := d.Arg.GetNode().(*pg_query.Node_String_)
			if !ok {
				return false
			}
			cp.Null, null = s.String_.Sval, true
		case "header":
			h, ok := optHeader(d)
			if !ok {
				return false
			}
			cp.Header = h
		case "encoding":
			cp.Encoding = optString(d)
			if cp.Encoding == "" {
				return false
			}
		case "freeze", "force_not_null", "force_null":
			// They change nothing in how a row's fields are delimited.
		default:
			return false
		}
	}
	if csvDefaults {
		if !delim {
			cp.Delim = ','
		}
		if !null {
			cp.Null = ""
		}
	}
	if !escape {
		cp.Escape = cp.Quote
	}
	return true
}

// optString is a DefElem's value as a string ("" when it is not one).
func optString(d *pg_query.DefElem) string {
	if d.Arg == nil {
		return ""
	}
	switch v := d.Arg.Node.(type) {
	case *pg_query.Node_String_:
		return v.String_.Sval
	case *pg_query.Node_TypeName:
		// FORMAT binary without quotes: a keyword read as a type name.
		if n := v.TypeName.Names; len(n) == 1 {
			return n[0].GetString_().GetSval()
		}
	}
	return ""
}

// optHeader reads HEADER's value as the server's defGetCopyHeaderChoice.
func optHeader(d *pg_query.DefElem) (plan.CopyHeader, bool) {
	if d.Arg == nil {
		return plan.HeaderSkip, true
	}
	var s string
	switch v := d.Arg.Node.(type) {
	case *pg_query.Node_Boolean:
		if v.Boolean.Boolval {
			return plan.HeaderSkip, true
		}
		return plan.HeaderNone, true
	case *pg_query.Node_Integer:
		switch v.Integer.Ival {
		case 0:
			return plan.HeaderNone, true
		case 1:
			return plan.HeaderSkip, true
		}
		return 0, false
	case *pg_query.Node_String_:
		s = strings.ToLower(v.String_.Sval)
	default:
		return 0, false
	}
	switch s {
	case "true", "on", "t", "tr", "tru", "y", "ye", "yes", "1":
		return plan.HeaderSkip, true
	case "false", "off", "f", "fa", "fal", "fals", "n", "no", "0":
		return plan.HeaderNone, true
	case "match":
		return plan.HeaderMatch, true
	}
	return 0, false
}
