package wire

import (
	"hash/maphash"
	"strconv"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// Simple-protocol INSERTs run as prepared statements.
//
// A Query that is one INSERT ... VALUES into a table with snowflake
// defaults (plan.Inserts.Plain: no WITH, no RETURNING) is rendered with its
// IDs as literals, and the server parses and plans that text every time,
// although only the IDs change. From the second time the session sends the
// same text with parameters for the IDs, it prepares that text under a name
// of its own and sends Bind, Execute and Sync instead of the Query; the
// server pump swallows ParseComplete and BindComplete, so the client sees
// what a Query returns: CommandComplete (or an ErrorResponse) and
// ReadyForQuery.
//
// That is the same statement: PostgreSQL analyses a prepared statement
// again after DDL on its tables or a change of search_path, and a statement
// without RETURNING has no result shape that such a change could break.
// The path is taken only where it changes nothing else:
//   - at a safe point (nothing outstanding: Sync then answers this Query
//     alone) outside a failed transaction;
//   - with every ID generated (an unfilled default renders as DEFAULT in
//     the Query, which the parameter text cannot say); the text therefore
//     has each ID as the parameter alone (plan.BoundParams), without the
//     shim's fallback that the server would set up at every execution;
//   - without an unnamed statement on the server, which a Query would have
//     destroyed and Bind does not.
//
// Config.QueryInserts turns this off; Stats.PreparedInserts counts the
// INSERTs sent prepared.
//
// Not behind a connection pooler (PgBouncer, ...): in transaction mode the
// next transaction may run on another server connection, where the
// statement does not exist, or where another session prepared one under
// the same name. A session is behind one when the server process that
// answers its hidden queries (pg_backend_pid()) is not the one its
// BackendKeyData names: poolers hand their clients keys of their own.
// Until a hidden query has named the server process, nothing is prepared.
//
// The statements are named "snowflake-proxy insert T.N", T a random tag
// of the proxy process and N never reused in it (so that a session can
// never execute another's statement, even on a shared server connection),
// and are forgotten (not closed) with the client's DEALLOCATE
// ALL, DISCARD ALL or DEALLOCATE of one of them (effects, simple.go). What
// the session keeps is bounded: at most maxPreparedQueries texts prepared,
// of at most maxPreparedText bytes, and the texts seen once only as
// hashes, at most maxSeenQueries of them.

const (
	maxPreparedQueries = 64
	maxPreparedText    = 4096
	maxSeenQueries     = 256
)

// seenSeed hashes the texts seen once (a collision only prepares a text at
// its first use).
var seenSeed = maphash.MakeSeed()

// preparedQueryPrefix starts the names of those statements.
const preparedQueryPrefix = "snowflake-proxy insert "

// preparedQuery is one INSERT text the session prepares.
type preparedQuery struct {
	name []byte // "snowflake-proxy insert N"
	// rec holds the template for appendParse (the current one: any
	// template of this text renders it), and rec.parsed whether the server
	// confirmed the Parse (set by the server pump under shared.mu). At a
	// safe point it is final: false after a sent Parse means the Parse
	// failed, and the next use sends it again.
	rec stmtRec
}

// queryPrepared sends the Query's INSERT t, whose values p.vals are all
// generated, as Bind, Execute and Sync of a prepared statement (Parse
// first when needed) and reports whether it did. It does not when the
// conditions above do not hold or the text is new: the caller then sends
// the Query.
func (p *clientPump) queryPrepared(pl *plan.Plan, t *plan.Template) (bool, error) {
	if pl.Inserts == nil || !pl.Inserts.Plain || p.stmtLive || p.cfg.QueryInserts || !p.serverSeen || p.pooled {
		return false, nil
	}
	if safe, status := p.state(); !safe || status == 'E' {
		return false, nil
	}
	p.text = t.Render(p.text[:0], plan.BoundParams, 0, p.vals)
	pq := p.prepared[string(p.text)]
	if pq == nil {
		if pq = p.secondUse(); pq == nil {
			return false, nil
		}
	}
	// At a safe point the server pump has popped every entry, the one that
	// set parsed included: the answer is final.
	parsed := p.sh.confirmed(&pq.rec.parsed)
	pm := newPosMap(t, p.vals, 0, plan.BoundParams)
	p.out = p.out[:0]
	ids := t.IDSlots()
	if !parsed {
		pq.rec.t, pq.rec.ids = t, ids
		p.out = p.appendParse(p.out, pq.name, &pq.rec, nil, plan.BoundParams)
		p.push(owed{kind: owedHiddenParse, pos: pm, confirm: &pq.rec.parsed})
	}
	var start int
	p.out, start = pgmsg.BeginBind(p.out, "", pq.name, ids) // the unnamed portal
	p.out = appendIDParams(p.out, t, p.vals, false)
	p.out = pgmsg.FinishBind(p.out, start)
	p.push(owed{kind: owedHiddenBind, pos: pm})
	p.out = pgmsg.AppendExecute(p.out, "", 0) // all rows
	p.out = pgmsg.AppendEmpty(p.out, pgmsg.TypeSync)
	p.push(owed{kind: owedQuery, stmts: pl.Statements, pos: pm, sync: true})
	// For the client the Query destroyed the unnamed portal; the server
	// has this one until Sync or, in a transaction block, its end.
	p.dropUnnamed()
	p.unnamedPortal, p.portalLive = nil, true
	p.effects(pl, nil)
	p.srv.stats.preparedInserts.Add(1)
	_, err := p.sw.Write(p.out)
	return true, err
}

// secondUse returns a new, named record for p.text when it was seen once
// before and there is room for it; otherwise it notes the text as seen,
// and returns nil.
func (p *clientPump) secondUse() *preparedQuery {
	if len(p.text) > maxPreparedText || len(p.prepared) >= maxPreparedQueries {
		return nil
	}
	h := maphash.Bytes(seenSeed, p.text)
	if _, ok := p.seen[h]; !ok {
		if p.seen == nil {
			p.seen = make(map[uint64]struct{}, maxSeenQueries)
		} else if len(p.seen) >= maxSeenQueries {
			clear(p.seen) // keeps its buckets: no allocation per 256 new texts
		}
		p.seen[h] = struct{}{}
		return nil
	}
	delete(p.seen, h)
	if p.prepared == nil {
		p.prepared = map[string]*preparedQuery{}
	}
	name := append([]byte(preparedQueryPrefix), p.srv.stmtTag...)
	name = append(name, '.')
	pq := &preparedQuery{name: strconv.AppendUint(name, p.srv.stmtSeq.Add(1), 10), rec: stmtRec{bound: true}}
	p.prepared[string(p.text)] = pq
	return pq
}

// notePooler follows a mirror refresh: it tells whether the session
// reaches its server through a pooler (see the top of this file), once
// for good, and logs the first such session of the proxy.
func (p *clientPump) notePooler() {
	if p.pooled || p.mirror.pid == 0 {
		return
	}
	p.serverSeen = true
	if p.mirror.pid == p.backendPID {
		return
	}
	p.pooled = true
	if p.srv.pooledLogged.CompareAndSwap(false, true) {
		p.log.Info("this session reaches the server through a connection pooler (its server process is not the one its BackendKeyData names): "+
			"simple-protocol INSERTs of such sessions are not prepared", "server_pid", p.mirror.pid, "key_pid", p.backendPID)
	}
}

// forgetPrepared drops the record of the statement the client deallocated
// by name: its text is prepared again, under a new name, at its second use
// after. The others stay: forgetting them too would leave them on the
// server, unused, and prepare their texts again beside them.
func (p *clientPump) forgetPrepared(name string) {
	for text, pq := range p.prepared {
		if string(pq.name) == name {
			delete(p.prepared, text)
			return
		}
	}
}
