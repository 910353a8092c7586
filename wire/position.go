package wire

import (
	"strconv"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// posMap is what it takes to map an error cursor in a rewritten text back to
// the client's text (plan.Template.SourcePos): the template and the values
// it was rendered with. Owed entries of rewritten Query and Parse messages
// carry one.
type posMap struct {
	t      *plan.Template
	vals   []plan.Value
	base   int
	render plan.Rendering
}

// newPosMap copies vals: the client pump reuses its slice for the next
// message while the server may still answer this one.
func newPosMap(t *plan.Template, vals []plan.Value, base int, r plan.Rendering) *posMap {
	return &posMap{t: t, vals: append([]plan.Value(nil), vals...), base: base, render: r}
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
	src := m.t.SourcePos(pos, m.vals, m.base, m.render)
	if src == 0 || src == pos {
		return nil, false
	}
	var digits [20]byte
	return fields.AppendReplaced(nil, 'P', strconv.AppendInt(digits[:0], int64(src), 10), false), true
}
