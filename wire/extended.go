package wire

import (
	"encoding/binary"
	"strconv"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// stmtRec is the proxy's record of a prepared statement whose plan matters
// (portals share the record of their statement).
type stmtRec struct {
	pl   *plan.Plan
	base int // parameters of the client's statement
	ids  int // parameters the proxy appends, one per ID slot
}

func (p *clientPump) stmt(name []byte) *stmtRec {
	if len(name) == 0 {
		return p.unnamed
	}
	return p.stmts[string(name)]
}

func (p *clientPump) portal(name []byte) *stmtRec {
	if len(name) == 0 {
		return p.unnamedPortal
	}
	return p.portals[string(name)]
}

// parse handles Parse: statements with slots are rendered with parameters
// $base+1... for the ID slots, typed int8.
func (p *clientPump) parse() error {
	ss := (*session)(p)
	body, err := ss.cr.body()
	if err != nil {
		return err
	}
	name, rest, ok1 := cstring(body)
	query, rest, ok2 := cstring(rest)
	if !ok1 || !ok2 || len(rest) < 2 || len(rest) != 2+4*int(binary.BigEndian.Uint16(rest)) {
		p.push(owed{kind: owedParse})
		return ss.cr.pass(ss.sw) // the server reports the malformed message
	}
	noids := int(binary.BigEndian.Uint16(rest))
	pl := ss.cfg.Rewriter.Plan(string(query))
	if pl == nil {
		pl = plan.Passthrough
	}
	var rec *stmtRec
	if pl != plan.Passthrough {
		rec = &stmtRec{pl: pl, base: max(pl.MaxParam, noids)}
		if pl.Template != nil {
			rec.ids = pl.Template.IDSlots()
		}
	}
	if len(name) == 0 {
		p.unnamed, p.stmtLive = rec, true
	} else if rec != nil {
		if p.stmts == nil {
			p.stmts = map[string]*stmtRec{}
		}
		p.stmts[string(name)] = rec
	} else if p.stmts != nil {
		delete(p.stmts, string(name))
	}
	if pl.Template == nil {
		p.push(owed{kind: owedParse})
		return ss.cr.pass(ss.sw)
	}
	// Extension SQL, and a chance to refresh the mirror while the session
	// is still at a safe point (the Bind that follows will not be).
	if _, ok := p.values(pl.Template, !p.portalLive && (len(name) == 0 || !p.stmtLive), false); !ok {
		rec.ids = 0
		rec.pl = &plan.Plan{Statements: pl.Statements, Touches: pl.Touches, Deallocate: pl.Deallocate, DeallocateAll: pl.DeallocateAll}
		p.push(owed{kind: owedParse})
		return ss.cr.pass(ss.sw)
	}
	var start int
	p.out, start = appendHeader(p.out[:0], 'P')
	p.out = append(p.out, name...)
	p.out = append(p.out, 0)
	p.out = pl.Template.RenderParams(p.out, rec.base, p.vals)
	p.out = append(p.out, 0)
	p.out = append16(p.out, rec.base+rec.ids)
	p.out = append(p.out, rest[2:]...)
	for i := noids; i < rec.base; i++ {
		p.out = append32(p.out, 0)
	}
	for i := 0; i < rec.ids; i++ {
		p.out = append32(p.out, int8OID)
	}
	p.out = finishMsg(p.out, start)
	ss.cr.consume()
	p.push(owed{kind: owedParse})
	_, err = ss.sw.Write(p.out)
	return err
}

// bind handles Bind: for a statement with ID slots, one value per slot is
// appended, generated now (every Execute of the portal's statement gets
// fresh IDs), in the format the client's format codes imply.
func (p *clientPump) bind() error {
	ss := (*session)(p)
	body, err := ss.cr.body()
	if err != nil {
		return err
	}
	portal, rest, ok1 := cstring(body)
	stmt, rest, ok2 := cstring(rest)
	var rec *stmtRec
	if ok1 && ok2 {
		rec = p.stmt(stmt)
		p.setPortal(portal, rec, true)
	}
	if rec == nil || rec.ids == 0 {
		p.push(owed{kind: owedBind})
		return ss.cr.pass(ss.sw)
	}
	// Layout: formats (int16 n, n int16), params (int16 n, n × (int32 len,
	// bytes)), result formats (the rest).
	nf, pos, ok := count16(rest, 0)
	fmtEnd := pos + 2*nf
	np, ppos, ok2 := count16(rest, fmtEnd)
	if !ok || !ok2 {
		p.push(owed{kind: owedBind})
		return ss.cr.pass(ss.sw)
	}
	end := ppos
	for i := 0; i < np && end >= 0; i++ {
		if end+4 > len(rest) {
			end = -1
			break
		}
		l := int32(binary.BigEndian.Uint32(rest[end:]))
		end += 4
		if l > 0 {
			end += int(l)
		}
	}
	if end < 0 || end > len(rest) {
		p.push(owed{kind: owedBind})
		return ss.cr.pass(ss.sw)
	}
	bin := nf == 1 && binaryAt(rest, pos)
	p.values(rec.pl.Template, !p.stmtLive && !p.portalLive, true)
	var start int
	p.out, start = appendHeader(p.out[:0], 'B')
	p.out = append(p.out, body[:len(portal)+len(stmt)+2]...)
	if nf > 1 {
		p.out = append16(p.out, nf+rec.ids)
		p.out = append(p.out, rest[pos:fmtEnd]...)
		for i := 0; i < rec.ids; i++ {
			p.out = append16(p.out, 0)
		}
	} else {
		p.out = append(p.out, rest[:fmtEnd]...)
	}
	p.out = append16(p.out, np+rec.ids)
	p.out = append(p.out, rest[ppos:end]...)
	for i, s := range rec.pl.Template.Slots {
		if !s.Op.IsID() {
			continue
		}
		v := p.vals[i]
		switch {
		case !v.Valid:
			p.out = append32(p.out, -1)
		case bin:
			p.out = append32(p.out, 8)
			p.out = binaryAppendInt64(p.out, v.ID)
		default:
			at := len(p.out)
			p.out = append32(p.out, 0)
			p.out = strconv.AppendInt(p.out, v.ID, 10)
			binaryPut32(p.out[at:], len(p.out)-at-4)
		}
	}
	p.out = append(p.out, rest[end:]...)
	p.out = finishMsg(p.out, start)
	ss.cr.consume()
	p.push(owed{kind: owedBind})
	_, err = ss.sw.Write(p.out)
	return err
}

func (p *clientPump) setPortal(name []byte, rec *stmtRec, live bool) {
	if len(name) == 0 {
		p.unnamedPortal, p.portalLive = rec, live
	} else if rec != nil {
		if p.portals == nil {
			p.portals = map[string]*stmtRec{}
		}
		p.portals[string(name)] = rec
	} else if p.portals != nil {
		delete(p.portals, string(name))
	}
}

// count16 reads an int16 count at off: the count and the offset after it.
func count16(b []byte, off int) (int, int, bool) {
	if off < 0 || off+2 > len(b) {
		return 0, 0, false
	}
	n := int(binary.BigEndian.Uint16(b[off:]))
	return n, off + 2, off+2+2*n <= len(b)
}

func binaryAt(b []byte, off int) bool { return binary.BigEndian.Uint16(b[off:]) == 1 }

func binaryAppendInt64(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v))
}

func binaryPut32(b []byte, v int) { binary.BigEndian.PutUint32(b, uint32(v)) }

// describe handles Describe: for a statement with injected parameters the
// server pump strips them from the ParameterDescription.
func (p *clientPump) describe() error {
	ss := (*session)(p)
	body, err := ss.cr.body()
	if err != nil {
		return err
	}
	o := owed{kind: owedDescribePortal}
	if len(body) >= 2 && body[0] == 'S' {
		o.kind = owedDescribeStmt
		if name, _, ok := cstring(body[1:]); ok {
			if rec := p.stmt(name); rec != nil {
				o.strip = rec.ids
			}
		}
	}
	p.push(o)
	return ss.cr.pass(ss.sw)
}

// execute handles Execute: the command tag may be renamed, and the
// statement's effects apply.
func (p *clientPump) execute() error {
	ss := (*session)(p)
	body, err := ss.cr.body()
	if err != nil {
		return err
	}
	o := owed{kind: owedExecute}
	if name, _, ok := cstring(body); ok {
		if rec := p.portal(name); rec != nil {
			o.stmts = rec.pl.Statements
			p.effects(rec.pl)
		}
	}
	p.push(o)
	return ss.cr.pass(ss.sw)
}

// closeMsg handles Close of a statement or portal: its record goes.
func (p *clientPump) closeMsg() error {
	ss := (*session)(p)
	body, err := ss.cr.body()
	if err != nil {
		return err
	}
	if len(body) >= 2 {
		if name, _, ok := cstring(body[1:]); ok {
			switch body[0] {
			case 'S':
				if len(name) == 0 {
					p.unnamed = nil
				} else {
					delete(p.stmts, string(name))
				}
			case 'P':
				p.setPortal(name, nil, false)
			}
		}
	}
	p.push(owed{kind: owedClose})
	return ss.cr.pass(ss.sw)
}
