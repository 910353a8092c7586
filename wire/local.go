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
	if !safe || status == 'E' {
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
	return appendInt8Result(dst, cols, vals, nil, true, status)
}

// appendInt8Result encodes the result of a one-row SELECT of int8 columns:
// RowDescription (when describe), DataRow, CommandComplete "SELECT 1" and
// ReadyForQuery. formats are Bind result format codes as sent (none: text;
// one: for all columns; else one per column).
func appendInt8Result(dst []byte, cols []string, vals []plan.Value, formats []byte, describe bool, status byte) []byte {
	var start int
	if describe {
		dst, start = appendHeader(dst, 'T')
		dst = append16(dst, len(cols))
		for i, c := range cols {
			dst = append(dst, c...)
			dst = append(dst, 0)
			dst = append32(dst, 0) // table OID
			dst = append16(dst, 0) // attribute number
			dst = append32(dst, int8OID)
			dst = append16(dst, int8Size)
			dst = append32(dst, -1) // type modifier
			if binaryFormat(formats, i) {
				dst = append16(dst, 1)
			} else {
				dst = append16(dst, 0)
			}
		}
		dst = finishMsg(dst, start)
	}
	dst, start = appendHeader(dst, 'D')
	dst = append16(dst, len(vals))
	for i, v := range vals {
		if binaryFormat(formats, i) {
			dst = append32(dst, int8Size)
			dst = binaryAppendInt64(dst, v.ID)
			continue
		}
		at := len(dst)
		dst = append32(dst, 0)
		dst = strconv.AppendInt(dst, v.ID, 10)
		binaryPut32(dst[at:], len(dst)-at-4)
	}
	dst = finishMsg(dst, start)
	dst, start = appendHeader(dst, 'C')
	dst = append(dst, "SELECT 1\x00"...)
	dst = finishMsg(dst, start)
	dst, start = appendHeader(dst, 'Z')
	dst = append(dst, status)
	return finishMsg(dst, start)
}

// binaryFormat reports whether column i is sent in binary under the Bind
// result format codes formats (2 bytes each).
func binaryFormat(formats []byte, i int) bool {
	switch len(formats) / 2 {
	case 0:
		return false
	case 1:
		return formats[1] == 1
	}
	return formats[2*i+1] == 1
}

func append16(dst []byte, v int) []byte { return append(dst, byte(v>>8), byte(v)) }

func append32(dst []byte, v int) []byte {
	return append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}
