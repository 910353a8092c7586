package wire

import (
	"strconv"
	"strings"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// A COPY whose rows the client pump completes (copyin.go) reads one more
// column per added default than the client sent. Where the server's error
// shows that, the client is shown what the server says without the proxy:
// the expected field count of a binary tuple or a header line, and the
// line the CONTEXT quotes, which ends with the appended IDs (or, for the
// header, the appended names). An ID is removed only when it is one the
// proxy issued for this COPY, so data that merely looks like one stays. A
// quoted line the server cut short ("...") is left as it is: which of its
// bytes were the client's cannot be told apart.

// copyView is what the server pump needs to know of such a COPY (in
// shared, under mu).
type copyView struct {
	cols, extra int
	delim       byte
	header      string // the text appended to a header line; "" without
	node        int
	lo, hi      int64 // the IDs issued for the COPY
}

// fix returns the body of an ErrorResponse (fields f) as the client's own
// data would have made it, and whether it changed.
func (v *copyView) fix(f pgmsg.Fields) ([]byte, bool) {
	var body []byte
	if m, ok := f.Get('M'); ok {
		if fixed, ok := v.fixExpected(string(m)); ok {
			body = f.AppendReplaced(nil, 'M', []byte(fixed), false)
			f, _ = pgmsg.ReadFields(body)
		}
	}
	if w, ok := f.Get('W'); ok {
		if fixed, ok := v.fixContext(string(w)); ok {
			body = f.AppendReplaced(nil, 'W', []byte(fixed), false)
		}
	}
	return body, body != nil
}

// fixExpected: "row field count is 3, expected 3" (binary) and "wrong
// number of fields in header line: ..., expected 3" count the added
// columns.
func (v *copyView) fixExpected(m string) (string, bool) {
	const marker = ", expected "
	i := strings.LastIndex(m, marker)
	if i < 0 || !strings.HasPrefix(m, "row field count is ") && !strings.HasPrefix(m, "wrong number of fields in header line") {
		return "", false
	}
	n, err := strconv.Atoi(m[i+len(marker):])
	if err != nil || n != v.cols+v.extra {
		return "", false
	}
	return m[:i+len(marker)] + strconv.Itoa(v.cols), true
}

// fixContext removes the appended fields from the line a CONTEXT quotes:
// `COPY t, line 3: "a	b	<id>"`.
func (v *copyView) fixContext(w string) (string, bool) {
	lines := strings.Split(w, "\n")
	changed := false
	for i, l := range lines {
		if !strings.HasPrefix(l, "COPY ") || !strings.HasSuffix(l, `"`) || strings.HasSuffix(l, `..."`) {
			continue
		}
		k := strings.Index(l, `: "`)
		if k < 0 || len(l) < k+4 {
			continue
		}
		head, q := l[:k+3], l[k+3:len(l)-1]
		if v.header != "" && strings.HasSuffix(head, ", line 1: \"") && strings.HasSuffix(q, v.header) {
			lines[i] = head + strings.TrimSuffix(q, v.header) + `"`
			changed = true
			continue
		}
		if s, ok := v.withoutIDs(q); ok {
			lines[i] = head + s + `"`
			changed = true
		}
	}
	if !changed {
		return "", false
	}
	return strings.Join(lines, "\n"), true
}

// withoutIDs strips the extra trailing fields of q when each is an ID the
// proxy issued for this COPY.
func (v *copyView) withoutIDs(q string) (string, bool) {
	for k := 0; k < v.extra; k++ {
		d := strings.LastIndexByte(q, v.delim)
		if d < 0 {
			return "", false
		}
		id, err := strconv.ParseInt(q[d+1:], 10, 64)
		if _, node, _ := generator.Decompose(id); err != nil || id < v.lo || id > v.hi || node != v.node {
			return "", false
		}
		q = q[:d]
	}
	return q, true
}
