package wire

import (
	"strconv"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// posInline is how many values a posMap holds without an allocation: a
// statement's IDs and currvals, usually one or two.
const posInline = 4

// posMap is what it takes to map an error cursor in a rewritten text back to
// the client's text (plan.Template.SourcePos): the template and the values
// it was rendered with. Owed entries of rewritten Query and Parse messages
// carry one, by value: a rewritten INSERT allocates nothing for it unless
// it has more than posInline values. The zero posMap (t nil) maps nothing.
type posMap struct {
	t      *plan.Template
	base   int
	render plan.Rendering
	n      int                   // how many values
	inline [posInline]plan.Value // the values, when n <= posInline
	more   []plan.Value          // the values, when n > posInline
}

// newPosMap copies vals: the client pump reuses its slice for the next
// message while the server may still answer this one.
func newPosMap(t *plan.Template, vals []plan.Value, base int, r plan.Rendering) posMap {
	m := posMap{t: t, base: base, render: r, n: len(vals)}
	if len(vals) <= posInline {
		copy(m.inline[:], vals)
	} else {
		m.more = append([]plan.Value(nil), vals...)
	}
	return m
}

// values returns the values the text was rendered with; valid while m is.
func (m *posMap) values() []plan.Value {
	if m.n <= posInline {
		return m.inline[:m.n]
	}
	return m.more
}

// fixPosition returns the body of an ErrorResponse or NoticeResponse (its
// fields) with its position field (P) mapped to the client's text, and
// whether it changed.
// Regression: psql's caret pointed into the rewritten text (tests/psql
// errors.sql, equivalence currval.sql).
func (m *posMap) fixPosition(fields pgmsg.Fields) ([]byte, bool) {
	p, ok := fields.Get('P')
	if !ok {
		return nil, false
	}
	pos, err := strconv.Atoi(string(p))
	if err != nil {
		return nil, false
	}
	src := m.t.SourcePos(pos, m.values(), m.base, m.render)
	if src == 0 || src == pos {
		return nil, false
	}
	var digits [20]byte
	return fields.AppendReplaced(nil, 'P', strconv.AppendInt(digits[:0], int64(src), 10), false), true
}
