package wire

import (
	"strings"

	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// Errors and notices of the shim carry CONTEXT lines (the W field) that the
// C extension does not send: PL/pgSQL adds a line for each of its frames,
// and the shim's stand-ins for the extension's C functions are PL/pgSQL,
// as are the DO blocks the proxy sends in place of SET snowflake.node and
// the extension statements. The proxy removes those lines on the way to
// the client, so that the client reads the context the extension would
// give: none at top level, the caller's own frames when the call was made
// in the caller's function. Frames of the shim's functions that are
// PL/pgSQL in the extension too (convert_sequence_to_snowflake,
// convert_column_to_int8) are kept.

// shimFrames are the signatures of the shim's stand-ins for C functions, as
// a CONTEXT line names them (qualified unless visible on the search_path,
// which only the names without a twin in pg_catalog can be).
var shimFrames = []string{
	" snowflake.nextval(regclass) ",
	" snowflake.currval(regclass) ",
	" snowflake.set_config(text,text,boolean) ",
	" snowflake._issue(regclass,name) ",
	" snowflake._nextval_slow(regclass) ",
	" snowflake._currval_check(regclass,bigint) ",
	" snowflake._currval(regclass,bigint) ",
	" _currval(regclass,bigint) ",
}

// sqlNextvalFrame is the frame of snowflake.nextval, a SQL function, where
// the planner did not inline it (a call in FROM), or of a client's SQL
// function of that name.
const sqlNextvalFrame = `SQL function "nextval" statement 1`

// doFrame names the frame of a DO block in a CONTEXT line.
const doFrame = " inline_code_block "

// isShimFrame tells whether a CONTEXT line is a PL/pgSQL frame of one of
// the shim's stand-ins.
func isShimFrame(line string) bool {
	if !strings.Contains(line, "PL/pgSQL") {
		return false
	}
	for _, f := range shimFrames {
		if strings.Contains(line, f) {
			return true
		}
	}
	return false
}

// shimContext returns the CONTEXT w without the lines of the shim. Lines go
// from the innermost frame to the outermost; the shim never calls the
// client's code, so everything inside its outermost stand-in frame is the
// shim's. When own is set the statement was one of the proxy's DO blocks,
// whose frame is the outermost line: it goes too, with the line of the
// statement it ran, which PL/pgSQL prints just inside it (in English
// "SQL statement ...").
func shimContext(w string, own bool) (string, bool) {
	lines := strings.Split(w, "\n")
	from := 0
	for i, l := range lines {
		// snowflake.nextval's own frame, where it was not inlined, right
		// outside its slow path's frames; a client's SQL function of that
		// name elsewhere stays.
		if isShimFrame(l) || (l == sqlNextvalFrame && from == i && i > 0) {
			from = i + 1
		}
	}
	to := len(lines)
	if own && to > from && strings.Contains(lines[to-1], doFrame) {
		to--
		if to > from && strings.HasPrefix(lines[to-1], `SQL statement "`) {
			to--
		}
	}
	if from == 0 && to == len(lines) {
		return w, false
	}
	return strings.Join(lines[from:to], "\n"), true
}

// withoutShimContext returns the body of an ErrorResponse or
// NoticeResponse (its fields f) with the shim's CONTEXT lines removed (the
// whole W field when nothing else remains), and whether it changed.
func withoutShimContext(f pgmsg.Fields, own bool) ([]byte, bool) {
	context, ok := f.Get('W')
	if !ok {
		return nil, false
	}
	w, changed := shimContext(string(context), own)
	if !changed {
		return nil, false
	}
	return f.AppendReplaced(nil, 'W', []byte(w), w == ""), true
}

// fixError applies what the proxy changes in an ErrorResponse or
// NoticeResponse (its fields f): the error cursor mapped to the client's
// text (pm, whose t is nil when the text was not rewritten) and the shim's
// CONTEXT lines. It returns the new body, and whether there is one.
func fixError(f pgmsg.Fields, pm *posMap, own bool) ([]byte, bool) {
	var body []byte
	if pm.t != nil {
		if fixed, ok := pm.fixPosition(f); ok {
			body = fixed
			f, _ = pgmsg.ReadFields(fixed) // well formed: built from f
		}
	}
	if fixed, ok := withoutShimContext(f, own); ok {
		body = fixed
	}
	return body, body != nil
}

// ownStatement tells whether the statement the response o is at was
// replaced by the proxy: those are the statements whose command tag it
// renames (SET/RESET snowflake.node and the extension statements, sent as
// DO blocks; SHOW snowflake.node, sent as a SELECT without frames).
func ownStatement(o *owed) bool {
	switch o.kind {
	case owedQuery:
		return o.n < len(o.stmts) && o.stmts[o.n].Tag != ""
	case owedExecute:
		return len(o.stmts) > 0 && o.stmts[0].Tag != ""
	}
	return false
}

// notice relays a NoticeResponse without the shim's CONTEXT lines (server
// pump).
func (p *serverPump) notice() error {
	body, err := p.sr.body()
	if err != nil {
		return err
	}
	own := false
	if p.sh.track {
		p.sh.mu.Lock()
		if o := p.sh.q.front(); o != nil {
			own = ownStatement(o)
		}
		p.sh.mu.Unlock()
	}
	f, _ := pgmsg.ReadFields(body) // malformed: no fields, passed as it is
	if fixed, ok := withoutShimContext(f, own); ok {
		p.sr.consume()
		return p.write('N', fixed)
	}
	return p.sr.pass(p.sh.cw)
}
