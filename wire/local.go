package wire

import (
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// Type facts of int8, as PostgreSQL describes an int8 result column.
const (
	int8OID  = 20
	int8Size = 8
)

// answerLocally answers a Query whose plan is Local without the server:
// RowDescription, DataRow, CommandComplete and ReadyForQuery, byte for byte
// what PostgreSQL sends for the same SELECT. It does so only at a safe
// point (the answer then follows everything already sent to the client),
// outside a failed transaction, without an unnamed statement or portal
// on the server, and when the mirror says the transaction may write;
// otherwise done is false and the caller forwards the query.
func (p *clientPump) answerLocally(pl *plan.Plan) (done bool, err error) {
	m := &p.mirror
	if !m.fresh || m.readOnly || len(pl.Local.Columns) != len(p.vals) {
		return false, nil
	}
	p.sh.wmu.Lock()
	defer p.sh.wmu.Unlock()
	p.sh.mu.Lock()
	safe := p.sh.q.empty() && !p.sh.dirty && !p.sh.hiddenActive.Load()
	status := p.sh.txStatus
	p.sh.mu.Unlock()
	if !safe || status == 'E' || p.stmtLive || p.portalLive {
		// The Query destroys the unnamed statement and portal, which
		// only the server can do when it may have them (regression: a
		// later Bind or Execute of them ran the server's).
		return false, nil
	}
	p.out = appendLocalAnswer(p.out[:0], pl.Local.Columns, p.vals, status)
	p.srv.stats.local.Add(1)
	p.srv.stats.localIDs.Add(uint64(p.fastIDs))
	return true, p.sendLocal()
}

// sendLocal writes a local answer built in p.out to the client at once
// (the caller holds wmu).
func (p *clientPump) sendLocal() error {
	if _, err := p.sh.cw.Write(p.out); err != nil {
		return &Error{Kind: KindClientIO, Message: "write", Err: err}
	}
	if err := p.sh.cw.Flush(); err != nil {
		return &Error{Kind: KindClientIO, Message: "write", Err: err}
	}
	return nil
}

// appendLocalAnswer encodes the answer to a Query of a one-row SELECT of
// int8 columns (text format, as the simple protocol always is).
func appendLocalAnswer(dst []byte, cols []string, vals []plan.Value, status byte) []byte {
	return appendInt8Result(dst, cols, vals, pgmsg.Bind{}, true, status)
}

// appendInt8Result encodes the result of a one-row SELECT of int8 columns:
// RowDescription (when describe), DataRow, CommandComplete "SELECT 1" and
// ReadyForQuery, in the result formats bind asks for (a zero Bind: text).
func appendInt8Result(dst []byte, cols []string, vals []plan.Value, bind pgmsg.Bind, describe bool, status byte) []byte {
	var start int
	if describe {
		dst, start = pgmsg.BeginRowDescription(dst, len(cols))
		for i, c := range cols {
			dst = pgmsg.AppendField(dst, c, pgmsg.Field{TypeOID: int8OID, TypeSize: int8Size, TypeModifier: -1,
				Format: bind.ResultFormat(i)})
		}
		dst = pgmsg.Finish(dst, start)
	}
	dst, start = pgmsg.BeginDataRow(dst, len(vals))
	for i, v := range vals {
		dst = pgmsg.AppendInt64Param(dst, v.ID, bind.ResultFormat(i) == 1)
	}
	dst = pgmsg.Finish(dst, start)
	dst = pgmsg.AppendCommandComplete(dst, "SELECT 1")
	return pgmsg.ReadyForQuery{Status: status}.Append(dst)
}
