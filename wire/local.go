package wire

import (
	"strconv"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
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
// outside a failed transaction and when the mirror says the transaction may
// write; otherwise done is false and the caller forwards the query.
func (p *clientPump) answerLocally(pl *plan.Plan) (done bool, err error) {
	ss := (*session)(p)
	m := &p.mirror
	if !m.fresh || m.readOnly || len(pl.Local.Columns) != len(p.vals) {
		return false, nil
	}
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	ss.mu.Lock()
	safe := ss.q.empty() && !ss.dirty && !ss.hiddenActive.Load()
	status := ss.txStatus
	ss.mu.Unlock()
	if !safe || status == 'E' {
		return false, nil
	}
	p.out = appendLocalAnswer(p.out[:0], pl.Local.Columns, p.vals, status)
	ss.srv.stats.local.Add(1)
	if _, err := ss.cw.Write(p.out); err != nil {
		return true, &Error{Kind: KindClientIO, Message: "write", Err: err}
	}
	if err := ss.cw.Flush(); err != nil {
		return true, &Error{Kind: KindClientIO, Message: "write", Err: err}
	}
	return true, nil
}

// appendLocalAnswer encodes the answer to a one-row SELECT of int8 columns.
func appendLocalAnswer(dst []byte, cols []string, vals []plan.Value, status byte) []byte {
	var start int
	dst, start = appendHeader(dst, 'T')
	dst = append16(dst, len(cols))
	for _, c := range cols {
		dst = append(dst, c...)
		dst = append(dst, 0)
		dst = append32(dst, 0) // table OID
		dst = append16(dst, 0) // attribute number
		dst = append32(dst, int8OID)
		dst = append16(dst, int8Size)
		dst = append32(dst, -1) // type modifier
		dst = append16(dst, 0)  // text format
	}
	dst = finishMsg(dst, start)
	dst, start = appendHeader(dst, 'D')
	dst = append16(dst, len(vals))
	for _, v := range vals {
		at := len(dst)
		dst = append32(dst, 0)
		dst = strconv.AppendInt(dst, v.ID, 10)
		l := len(dst) - at - 4
		dst[at], dst[at+1], dst[at+2], dst[at+3] = byte(l>>24), byte(l>>16), byte(l>>8), byte(l)
	}
	dst = finishMsg(dst, start)
	dst, start = appendHeader(dst, 'C')
	dst = append(dst, "SELECT 1\x00"...)
	dst = finishMsg(dst, start)
	dst, start = appendHeader(dst, 'Z')
	dst = append(dst, status)
	return finishMsg(dst, start)
}

func append16(dst []byte, v int) []byte { return append(dst, byte(v>>8), byte(v)) }

func append32(dst []byte, v int) []byte {
	return append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}
