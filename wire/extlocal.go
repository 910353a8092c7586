package wire

import (
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// Local answers in the extended protocol.
//
// A Bind of a plan.Local statement is answered by the proxy, with the
// Describe (portal), Execute and Sync that follow it, when all of these
// hold; otherwise the group is forwarded as any other:
//
//   - the statement's Parse was confirmed by the server (ParseComplete), so
//     that the statement exists there and a Describe or Close of it, or a
//     later forwarded Bind, behaves as without the proxy;
//   - the portal is the unnamed one and the transaction is implicit: at a
//     safe point in status 'I' the server has no portal, and the Sync ends
//     the client's. In a transaction block ('T') the client's finished
//     portal would outlive the Sync, and a later Describe or Execute of
//     it, which PostgreSQL answers, would reach a server without it; such
//     a group is forwarded;
//   - the Bind has no parameters and result formats PostgreSQL accepts;
//   - the client's buffered input holds, right after the Bind, exactly an
//     optional Describe of the unnamed portal, an Execute of it whose row
//     limit ends the portal (0 or negative: all rows; 2 or more: more than
//     the one row; 1 would suspend the portal) and a Sync;
//   - the session is at a safe point (nothing owed, nothing forwarded since
//     the last ReadyForQuery, no hidden query), the transaction is neither
//     failed nor read-only, and every value was generated.
//
// The answer is BindComplete, RowDescription (for the Describe), DataRow,
// CommandComplete "SELECT 1" and ReadyForQuery with the unchanged status:
// an implicit transaction that only read generated values leaves 'I'.

// localGroup describes the messages after a Bind that are answered with it.
type localGroup struct {
	describe bool // a Describe of the unnamed portal precedes the Execute
	n        int  // bytes of the Describe, Execute and Sync
}

// scanLocalGroup reads b, the client input buffered after a Bind:
// [Describe portal ""] Execute "" (row limit that ends the portal) Sync.
func scanLocalGroup(b []byte) (g localGroup, ok bool) {
	typ, body, rest, ok := pgmsg.Split(b)
	if ok && typ == pgmsg.TypeDescribe {
		d, dok := pgmsg.ReadDescribe(body)
		if !dok || d.Kind != 'P' || len(d.Name) != 0 {
			return g, false
		}
		g.describe = true
		typ, body, rest, ok = pgmsg.Split(rest)
	}
	if !ok || typ != pgmsg.TypeExecute {
		return g, false
	}
	e, ok := pgmsg.ReadExecute(body)
	if !ok || len(e.Portal) != 0 || e.MaxRows == 1 { // 1: PostgreSQL suspends the portal after its one row
		return g, false
	}
	typ, body, rest, ok = pgmsg.Split(rest)
	if !ok || typ != pgmsg.TypeSync || len(body) != 0 {
		return g, false
	}
	g.n = len(b) - len(rest)
	return g, true
}

// bindLocally answers the Bind being handled (msg), and the group that
// follows it, when the conditions above hold; p.vals holds the values
// generated for this Bind (all valid).
func (p *clientPump) bindLocally(rec *stmtRec, msg pgmsg.Bind) (done bool, err error) {
	pl := rec.pl
	m := &p.mirror
	if pl.Local == nil || rec.t != pl.Template || rec.shimDefaults != 0 || rec.base != 0 || msg.NumParams() != 0 ||
		msg.NumFormats() > 1 ||
		pl.Touches != 0 || len(pl.Statements) != 1 || pl.Statements[0].Tag != "" ||
		!m.fresh || m.readOnly || len(pl.Local.Columns) != len(p.vals) || !p.cr.peeked {
		return false, nil
	}
	// The one parameter format code, if sent, must be one PostgreSQL
	// accepts (there are no parameters for it to apply to).
	if f := msg.ParamFormat(0); msg.NumFormats() == 1 && f != 0 && f != 1 {
		return false, nil
	}
	ncols := len(pl.Local.Columns)
	nr := msg.NumResultFormats()
	if nr != 0 && nr != 1 && nr != ncols {
		return false, nil
	}
	for i := 0; i < nr; i++ {
		if f := msg.ResultFormat(i); f != 0 && f != 1 {
			return false, nil
		}
	}
	buf, _ := p.cr.R.Peek(p.cr.R.Buffered())
	if len(buf) < len(p.cr.cur) {
		return false, nil
	}
	g, ok := scanLocalGroup(buf[len(p.cr.cur):])
	if !ok {
		return false, nil
	}
	p.sh.wmu.Lock()
	defer p.sh.wmu.Unlock()
	p.sh.mu.Lock()
	safe := p.sh.q.empty() && !p.sh.dirty && !p.sh.hiddenActive.Load() && rec.parsed.ok
	status := p.sh.txStatus
	p.sh.mu.Unlock()
	if !safe || status != 'I' {
		return false, nil
	}
	p.out = appendExtLocalAnswer(p.out[:0], pl.Local.Columns, p.vals, msg, g.describe, status)
	p.cr.consume()
	_, _ = p.cr.R.Discard(g.n)
	p.groupEnded() // the group's Sync, taken here
	p.setPortal(nil, nil, false)
	p.srv.stats.local.Add(1)
	p.srv.stats.localIDs.Add(uint64(p.fastIDs))
	return true, p.sendLocal()
}

// appendExtLocalAnswer encodes the answer to Bind, [Describe portal],
// Execute, Sync of a one-row SELECT of int8 columns, in the result formats
// the Bind asks for.
func appendExtLocalAnswer(dst []byte, cols []string, vals []plan.Value, bind pgmsg.Bind, describe bool, status byte) []byte {
	dst = pgmsg.AppendEmpty(dst, pgmsg.TypeBindComplete)
	return appendInt8Result(dst, cols, vals, bind, describe, status)
}
