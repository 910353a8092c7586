package wire

import (
	"bytes"
	"strconv"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// Fallback statements.
//
// A client's prepared statement with ID slots could carry the shim's call
// as each ID's fallback, COALESCE($n::int8, snowflake.nextval(...)), for
// the executions the proxy cannot fill (fallback.go: a REPEATABLE READ or
// read-only transaction, no node, a lease that failed...). The server then
// sets up the inlined call at every execution, filled or not. When the
// session reaches its server directly (a refresh named the server process:
// not behind a pooler, simpleprep.go), the statement is sent instead with
// each ID as the parameter alone (plan.BoundParams), as the proxy's own
// prepared INSERTs are, and a Bind that leaves an ID to the server goes to
// the statement's fallback statement: the same text with the fallback
// calls (plan.Params), the same parameters, under a name of the proxy's.
//
// The fallback statement is prepared by a Close and a Parse sent before
// such a Bind, whose responses the server pump swallows, and again before
// the next such Bind until the server confirmed it (ParseComplete, or a
// BindComplete of a Bind to it; an error answering a Bind to it or the
// Parse drops the confirmation: once the Close before that Parse ran, the
// server has no such statement). That holds anywhere in a pipeline: after
// an earlier error the server skips the Close, the Parse and the Bind
// together, and the Close makes the Parse valid whatever the server holds
// under the name. So a Bind with a NULL for an ID never reaches the
// statement without the fallback calls, where it would insert the NULL.
// A client that parses its unnamed statement at every execution makes a
// new record each time: each of its executions left to the server costs
// that Close and Parse too.
//
// Names are "snowflake-proxy fallback T.N" (T and N as simpleprep.go's).
// A record that goes (Close, DEALLOCATE, an unnamed statement replaced)
// gives its name back for the next record that needs one: the server
// holds at most one fallback statement per client statement that needed
// one. A template prepared again (reprepare.go), DEALLOCATE ALL or DISCARD
// ALL, and a client that closes one of these names itself drop the
// confirmation.

// fallbackPrefix starts the names of fallback statements.
const fallbackPrefix = "snowflake-proxy fallback "

// fallbackStmt is a record's fallback statement: its name and whether the
// server confirmed its Parse (shared state: touched under shared.mu).
type fallbackStmt struct {
	name   []byte
	parsed parseConfirm
}

// bindsBound reports whether the session may send a client's statement
// with slots as parameters alone (see above).
func (p *clientPump) bindsBound() bool { return p.serverSeen && !p.pooled }

// appendFallbackPrep appends to p.out the Close and Parse of rec's
// fallback statement, unless the server confirmed it, and returns the
// statement's name and confirmation for the Bind that follows.
func (p *clientPump) appendFallbackPrep(rec *stmtRec) ([]byte, *parseConfirm) {
	if rec.fb == nil {
		rec.fb = &fallbackStmt{name: p.fallbackName()}
	}
	fb := rec.fb
	if p.sh.confirmed(&fb.parsed) {
		return fb.name, &fb.parsed
	}
	p.out = pgmsg.AppendClose(p.out, 'S', fb.name)
	p.push(owed{kind: owedHiddenClose})
	p.out = p.appendParse(p.out, fb.name, rec, rec.fbTypes, plan.Params)
	p.push(owed{kind: owedHiddenParse, pos: newPosMap(rec.t, p.vals, rec.base, plan.Params), confirm: &fb.parsed})
	return fb.name, &fb.parsed
}

// abortedNow reports whether the server will read the next message in an
// aborted transaction: the last ReadyForQuery said so and nothing was
// sent since. A Bind there fails whatever it binds (25P02, or 08P01 for
// a wrong number of parameters, which the server checks first), so it
// goes to the client's statement as it is, its IDs NULL: the fallback
// statement's Parse would fail first, with 25P02 (regression, found by
// FuzzPipelineMatchesServer).
func (p *clientPump) abortedNow() bool {
	safe, status := p.sh.quiet()
	return safe && status == 'E'
}

// fallbackName returns a name given back by a record that went, or a new
// one.
func (p *clientPump) fallbackName() []byte {
	if n := len(p.fbFree); n > 0 {
		name := p.fbFree[n-1]
		p.fbFree = p.fbFree[:n-1]
		return name
	}
	name := append([]byte(fallbackPrefix), p.srv.stmtTag...)
	name = append(name, '.')
	return strconv.AppendUint(name, p.srv.stmtSeq.Add(1), 10)
}

// dropRecord notes that the client's record rec went: its fallback name
// is free again.
func (p *clientPump) dropRecord(rec *stmtRec) {
	if rec != nil && rec.fb != nil {
		p.fbFree = append(p.fbFree, rec.fb.name)
		rec.fb = nil
	}
}

// unconfirmFallback drops the confirmation of rec's fallback statement:
// the server may no longer have it as the record renders it. A new
// confirmation, so that a ParseComplete still owed cannot set it.
func (rec *stmtRec) unconfirmFallback() {
	if rec != nil && rec.fb != nil {
		rec.fb = &fallbackStmt{name: rec.fb.name}
	}
}

// fallbacksDropped follows a DEALLOCATE or Close of name by the client
// (all: DEALLOCATE ALL, DISCARD ALL): the records whose fallback
// statement it was lose its confirmation.
func (p *clientPump) fallbacksDropped(name []byte, all bool) {
	if !all && !bytes.HasPrefix(name, []byte(fallbackPrefix)) {
		return
	}
	owns := func(rec *stmtRec) bool { return rec != nil && rec.fb != nil && (all || bytes.Equal(rec.fb.name, name)) }
	p.records(func(rec *stmtRec) {
		if owns(rec) {
			rec.unconfirmFallback()
		}
	})
}
