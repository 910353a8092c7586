package wire

import (
	"bytes"
	"strconv"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// posMap is what it takes to map an error cursor in a rewritten text back to
// the client's text (plan.Template.SourcePos): the template and the values
// it was rendered with. Owed entries of rewritten Query and Parse messages
// carry one.
type posMap struct {
	t      *plan.Template
	vals   []plan.Value
	base   int
	params bool
}

// newPosMap copies vals: the client pump reuses its slice for the next
// message while the server may still answer this one.
func newPosMap(t *plan.Template, vals []plan.Value, base int, params bool) *posMap {
	return &posMap{t: t, vals: append([]plan.Value(nil), vals...), base: base, params: params}
}

// fixPosition returns body (an ErrorResponse or NoticeResponse) with its
// position field (P) mapped to the client's text, and whether it changed.
// Regression: psql's caret pointed into the rewritten text (tests/psql
// errors.sql, equivalence currval.sql).
func (m *posMap) fixPosition(body []byte) ([]byte, bool) {
	for i := 0; i < len(body) && body[i] != 0; {
		end := bytes.IndexByte(body[i+1:], 0)
		if end < 0 {
			return nil, false
		}
		end += i + 1
		if body[i] == 'P' {
			pos, err := strconv.Atoi(string(body[i+1 : end]))
			if err != nil {
				return nil, false
			}
			src := m.t.SourcePos(pos, m.vals, m.base, m.params)
			if src == 0 || src == pos {
				return nil, false
			}
			out := make([]byte, 0, len(body)+4)
			out = append(out, body[:i+1]...)
			out = strconv.AppendInt(out, int64(src), 10)
			return append(out, body[end:]...), true
		}
		i = end + 1
	}
	return nil, false
}
