package wire

import (
	"encoding/binary"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// values fills p.vals, one per slot of t, for one execution: generated IDs
// where the fast path may serve them (mirror.go says when), Valid false
// elsewhere so that the server's shim does the work. Extension slots get
// their SQL. hiddenOK says whether a hidden query may run now if the
// mirror is stale. It reports whether every ID slot got a value, and false
// for ok when an extension slot has no SQL (forward the original text).
// Without generate only the mirror and the extension SQL are prepared.
func (p *clientPump) values(t *plan.Template, hiddenOK, generate bool) (allValid, ok bool) {
	ss := (*session)(p)
	if cap(p.vals) < len(t.Slots) {
		p.vals = make([]plan.Value, len(t.Slots))
	}
	p.vals = p.vals[:len(t.Slots)]
	clear(p.vals)
	ids := 0
	for i := range t.Slots {
		s := &t.Slots[i]
		if s.Op.IsID() {
			ids++
			continue
		}
		if ss.cfg.Snowflakes == nil {
			return false, false
		}
		sql, err := ss.cfg.Snowflakes.ExtensionSQL(s.Op, s.Ext)
		if err != nil {
			ss.log.Warn("extension statement", logError, err)
			return false, false
		}
		p.vals[i].Text = sql
	}
	if ids == 0 {
		return true, true
	}
	if ss.cfg.Snowflakes == nil {
		return false, true
	}
	safe, status := p.state()
	if status == 'E' {
		return false, true // the server gives its own 25P02
	}
	m := &p.mirror
	var missing []string
	for i := range t.Slots {
		if s := &t.Slots[i]; s.Op.IsID() {
			if _, ok := m.seqs[s.Seq]; !ok && !contains(missing, s.Seq) {
				missing = append(missing, s.Seq)
			}
		}
	}
	if (!m.fresh || len(missing) > 0) && safe && hiddenOK {
		p.refresh(missing)
	}
	if !generate {
		return false, true
	}
	allValid = true
	for i := range t.Slots {
		s := &t.Slots[i]
		if !s.Op.IsID() {
			continue
		}
		info, known := m.seqs[s.Seq]
		usable := known && m.fresh && m.shim && info.oid != 0
		switch {
		case s.Op == plan.Nextval && usable && info.usable && !m.readOnly && m.node >= 1 && m.node <= 1023:
			id, err := ss.cfg.Snowflakes.Nextval(ss.ctx, ss.db, info.oid, m.node)
			if err != nil {
				ss.log.Debug("fast path refused", logError, err)
				break
			}
			p.vals[i] = plan.Value{ID: id, Valid: true}
			if m.currval == nil {
				m.currval = map[uint32]int64{}
			}
			m.currval[info.oid] = id
			ss.srv.stats.fast.Add(1)
			continue
		case s.Op == plan.Currval && usable:
			if v, ok := m.currval[info.oid]; ok {
				p.vals[i] = plan.Value{ID: v, Valid: true}
				continue
			}
		}
		allValid = false
	}
	return allValid, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// refresh runs the hidden mirror query on the session's server connection
// (the caller checked the safe point) and applies its result.
func (p *clientPump) refresh(names []string) {
	ss := (*session)(p)
	var start int
	p.out, start = appendHeader(p.out[:0], 'Q')
	p.out = mirrorSQL(p.out, names)
	p.out = append(p.out, 0)
	p.out = finishMsg(p.out, start)
	ss.hq = hiddenQuery{}
	ss.hiddenActive.Store(true)
	_, err := ss.sw.Write(p.out)
	if err == nil {
		err = ss.sw.Flush()
	}
	if err != nil {
		ss.hiddenActive.Store(false)
		return
	}
	select {
	case <-ss.hqDone:
	case <-ss.ctx.Done():
		return
	}
	ss.srv.stats.hidden.Add(1)
	hq := &ss.hq
	if hq.err != nil || hq.fail != "" || hq.rows != 1 || !p.mirror.apply(hq.row, names) {
		ss.log.Warn("mirror query failed", logError, hq.err, "sqlstate", hq.fail)
		p.mirror.fresh = false
	}
}

// hidden consumes the response to a hidden query (server pump): nothing
// reaches the client but asynchronous messages and a FATAL error.
func (p *serverPump) hidden(typ byte) error {
	ss := (*session)(p)
	switch typ {
	case 'A':
		return ss.sr.forward(ss.cw)
	case 'S':
		body, err := ss.sr.body()
		if err != nil {
			return err
		}
		ss.mu.Lock()
		ss.noteParameter(body)
		ss.mu.Unlock()
		return ss.sr.pass(ss.cw)
	case 'D':
		body, err := ss.sr.body()
		if err != nil {
			return err
		}
		ss.hq.rows++
		ss.hq.row = decodeDataRow(body)
		ss.sr.consume()
		return nil
	case 'E':
		body, err := ss.sr.body()
		if err != nil {
			return err
		}
		ss.hq.fail = errorField(body, 'C')
		if isFatal(body) {
			ss.sawFatal.Store(true)
			return ss.sr.pass(ss.cw)
		}
		ss.sr.consume()
		return nil
	case 'Z':
		body, err := ss.sr.body()
		if err != nil {
			return err
		}
		ss.mu.Lock()
		if len(body) == 1 {
			ss.txStatus = body[0]
		}
		ss.mu.Unlock()
		ss.sr.consume()
		ss.hiddenActive.Store(false)
		ss.hqDone <- struct{}{}
		return nil
	}
	return ss.sr.skip()
}

// decodeDataRow copies the fields of a DataRow; nil for NULL.
func decodeDataRow(b []byte) []*string {
	if len(b) < 2 {
		return nil
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	row := make([]*string, 0, n)
	for i := 0; i < n; i++ {
		if len(b) < 4 {
			return nil
		}
		l := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		if l < 0 {
			row = append(row, nil)
			continue
		}
		if int(l) > len(b) {
			return nil
		}
		s := string(b[:l])
		row = append(row, &s)
		b = b[l:]
	}
	return row
}

// errorField returns one field of an ErrorResponse or NoticeResponse body.
func errorField(b []byte, field byte) string {
	for len(b) > 1 {
		f := b[0]
		v, rest, ok := cstring(b[1:])
		if !ok {
			return ""
		}
		if f == field {
			return string(v)
		}
		b = rest
	}
	return ""
}
