package wire

import (
	"encoding/binary"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
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
//   - the portal is the unnamed one, and the server has none: at a safe
//     point in status 'I' no portal survives, in 'T' only when no Bind of
//     the unnamed portal was forwarded in the transaction. The local portal
//     is then recorded as not live, so later references go to the server;
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
// an implicit transaction that only read generated values leaves 'I', a
// transaction block stays 'T'.

// localGroup describes the messages after a Bind that are answered with it.
type localGroup struct {
	describe bool // a Describe of the unnamed portal precedes the Execute
	n        int  // bytes of the Describe, Execute and Sync
}

// scanLocalGroup reads b, the client input buffered after a Bind:
// [Describe portal ""] Execute "" (row limit that ends the portal) Sync.
func scanLocalGroup(b []byte) (g localGroup, ok bool) {
	if len(b) >= 7 && b[0] == 'D' && binary.BigEndian.Uint32(b[1:]) == 6 && b[5] == 'P' && b[6] == 0 {
		g.describe, g.n = true, 7
	}
	e := b[g.n:]
	if len(e) < 10 || e[0] != 'E' || binary.BigEndian.Uint32(e[1:]) != 9 || e[5] != 0 {
		return g, false
	}
	if maxRows := int32(binary.BigEndian.Uint32(e[6:])); maxRows == 1 {
		return g, false // PostgreSQL suspends the portal after its one row
	}
	g.n += 10
	s := b[g.n:]
	if len(s) < 5 || s[0] != 'S' || binary.BigEndian.Uint32(s[1:]) != 4 {
		return g, false
	}
	g.n += 5
	return g, true
}

// bindLocally answers the Bind being handled, and the group that follows
// it, when the conditions above hold; p.vals holds the values generated for
// this Bind (all valid). rest is the Bind body after the portal and
// statement names; nf, pos, np and end its layout as bind read it.
// portalWasLive is portalLive before this Bind.
func (p *clientPump) bindLocally(rec *stmtRec, rest []byte, nf, pos, np, end int, portalWasLive bool) (done bool, err error) {
	pl := rec.pl
	m := &p.mirror
	if pl.Local == nil || rec.t != pl.Template || rec.shimDefaults != 0 || rec.base != 0 || np != 0 || nf > 1 ||
		pl.Touches != 0 || len(pl.Statements) != 1 || pl.Statements[0].Tag != "" ||
		!m.fresh || m.readOnly || len(pl.Local.Columns) != len(p.vals) || !p.cr.peeked {
		return false, nil
	}
	if nf == 1 && binary.BigEndian.Uint16(rest[pos:]) > 1 {
		return false, nil
	}
	ncols := len(pl.Local.Columns)
	nr, rpos, ok := count16(rest, end)
	if !ok || rpos+2*nr != len(rest) || (nr != 0 && nr != 1 && nr != ncols) {
		return false, nil
	}
	formats := rest[rpos:]
	for i := 0; i < nr; i++ {
		if binary.BigEndian.Uint16(formats[2*i:]) > 1 {
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
	if !safe || !(status == 'I' || status == 'T' && !portalWasLive) {
		return false, nil
	}
	p.out = appendExtLocalAnswer(p.out[:0], pl.Local.Columns, p.vals, formats, g.describe, status)
	p.cr.consume()
	_, _ = p.cr.R.Discard(g.n)
	p.setPortal(nil, nil, false)
	p.srv.stats.local.Add(1)
	p.srv.stats.localIDs.Add(uint64(p.fastIDs))
	return true, p.sendLocal()
}

// appendExtLocalAnswer encodes the answer to Bind, [Describe portal],
// Execute, Sync of a one-row SELECT of int8 columns, with the Bind's result
// format codes (none: text; one: for all columns; else one per column).
func appendExtLocalAnswer(dst []byte, cols []string, vals []plan.Value, formats []byte, describe bool, status byte) []byte {
	var start int
	dst, start = appendHeader(dst, '2') // BindComplete
	dst = finishMsg(dst, start)
	return appendInt8Result(dst, cols, vals, formats, describe, status)
}
