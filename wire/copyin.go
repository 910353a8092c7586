package wire

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgcopy"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// COPY ... FROM STDIN on the fast path (docs/architecture.md, "How IDs are
// made"). A simple Query, or the Parse of an unnamed statement, that is
// one COPY table (columns) FROM STDIN whose column list omits snowflake
// default columns is sent with those columns
// named, and the client's CopyData is relayed through a pgcopy.Rewriter
// that appends an ID per row and column. The server then only inserts,
// as into a table without a snowflake default. The checks are those of an
// INSERT ... VALUES default (defaults.go, ids.go): the catalog cache of
// the target's defaults, node, transaction state, USAGE on the sequence,
// INSERT on the column, the fence; when one says no, the COPY goes to the
// server as written and the shim fills the defaults.
//
// IDs are issued in batches before the rows that need them are rewritten.
// The first batch is issued with the checks, before the statement is
// sent: a generator that refuses then (a lease that cannot be had, the
// node claim lost) leaves the COPY to the shim, as an INSERT's default;
// once the statement names the columns, a refusal can only end the COPY
// (copyFail). Then each CopyData body (or, in a pump, each part of one
// read) first gets
// enough IDs in the queue for every row that can end in it, so that the
// rewrite itself never waits. On a loop thread a batch that would wait
// hands the session over before anything changed. IDs left in the queue
// when the COPY ends are never issued again (the generator's rule).

// copyIn is the state of a COPY whose rows the client pump completes.
type copyIn struct {
	active bool
	// failed: no more IDs can be had, or the server refused the COPY:
	// the rest of the data is passed unchanged.
	failed bool
	rw     pgcopy.Rewriter
	extra  int
	ids    pgcopy.IDs
	// row holds one request per added column (sequence, INCREMENT);
	// reqs is the scratch of a refill.
	row  []generator.Request
	reqs []generator.Request
	node int
	// last are the IDs of the last row that got them, for currval.
	last [pgcopy.MaxExtra]int64
	rows int64
}

// minCopyBatch is the fewest IDs a refill asks for: clients that send a
// row per CopyData message then cost one generator call per batch.
const minCopyBatch = 256

// copySpec is how a COPY statement is completed: what the session sends
// instead, how its rows are read and what goes into them.
type copySpec struct {
	text string // the statement with the added columns
	opts pgcopy.Options
	row  []generator.Request // one per added column: sequence, INCREMENT
	view copyView
	node int
	// first are IDs issued when the statement was checked, for its first
	// rows: a generator that refuses then leaves the COPY to the shim
	// (once the statement names the columns, a refusal must end it).
	// Taken by the first execution only.
	first []int64
}

// copySpecFor returns how to complete the COPY of pl, or nil when it is
// left to the server as written. On a loop thread err is errHandover
// before anything changed, when a hidden query must run.
func (p *clientPump) copySpecFor(pl *plan.Plan) (*copySpec, error) {
	c := pl.Copy
	if p.cfg.Snowflakes == nil {
		return nil, nil
	}
	safe, status := p.state()
	m := &p.mirror
	if m.relsTx && status == 'I' {
		m.dropRels()
	}
	if status == 'E' || p.checkEpoch() == 0 {
		return nil, nil
	}
	info, known := m.rels[c.Rel]
	if (!known || !m.fresh) && safe {
		if p.onLoop() {
			return nil, errHandover // a hidden query waits for the server
		}
		var rels []string
		if !known {
			rels = []string{c.Rel}
		}
		p.refresh(nil, rels)
		if info, known = m.rels[c.Rel]; known && status == 'T' && m.isolation != "read committed" {
			info.skip = true
			m.rels[c.Rel] = info
			m.relsTx = true
		}
	}
	if !known || info.skip || !m.fresh {
		return nil, nil
	}
	var add []*plan.ColumnDefault
	for i := range info.defs {
		d := &info.defs[i]
		if contains(c.Cols, d.Name) {
			continue
		}
		if !d.Insertable || !d.Int8 || len(add) == pgcopy.MaxExtra {
			return nil, nil // the shim fills it; or the server's error
		}
		add = append(add, d)
	}
	if len(add) == 0 {
		return nil, nil
	}
	busy := p.fence(false)
	row := make([]generator.Request, 0, len(add))
	for _, d := range add {
		s, ok := m.seqs[d.Seq]
		if m.refusal(s, ok, busy) != 0 {
			return nil, nil
		}
		row = append(row, generator.Request{Seq: s.oid, Inc: s.inc, After: m.ticket})
	}
	o, ok := p.copyOptions(c, add)
	if !ok {
		return nil, nil
	}
	quoted := make([]string, len(add))
	for i, d := range add {
		quoted[i] = d.Quoted
	}
	view := copyView{cols: len(c.Cols), extra: len(add), delim: c.Delim, header: string(o.HeaderText), node: m.node}
	if c.Format == plan.CopyBinary {
		view.delim = 0
	}
	reqs := make([]generator.Request, 0, minCopyBatch*len(row))
	for len(reqs) < cap(reqs) {
		reqs = append(reqs, row...)
	}
	if _, err := p.nextvals(reqs, m.node); err != nil {
		if err == errHandover {
			return nil, err // nothing was issued
		}
		p.log.Debug("fast path refused a COPY", logError, err)
		p.srv.countFallback(p.fallbackOf(err))
		return nil, nil
	}
	first := make([]int64, len(reqs))
	for i := range reqs {
		first[i] = reqs[i].ID
	}
	p.srv.stats.fast.Add(uint64(len(reqs)))
	view.lo, view.hi = slices.Min(first), slices.Max(first)
	return &copySpec{text: c.Text(quoted), opts: o, row: row, view: view, node: m.node, first: first}, nil
}

// startCopy makes s the COPY whose rows the pump completes, from its
// first CopyData on.
func (p *clientPump) startCopy(s *copySpec) {
	p.cin = copyIn{active: true, rw: pgcopy.New(s.opts), extra: s.opts.Extra, ids: p.cin.ids,
		row: s.row, reqs: p.cin.reqs, node: s.node}
	p.cin.ids.Reset()
	p.cin.ids.Buf = append(p.cin.ids.Buf, s.first...)
	view := s.view
	if s.first == nil {
		view.lo, view.hi = 0, 0
	}
	s.first = nil // an unnamed statement may be bound and run again
	p.sh.copyRefused.Store(false)
	p.sh.mu.Lock()
	p.sh.copyView = view
	p.sh.mu.Unlock()
}

// copyQuery sends a COPY FROM STDIN whose rows the session completes,
// when it may: done reports that the Query was handled. On a loop thread
// err is errHandover before anything changed, when a hidden query must
// run.
func (p *clientPump) copyQuery(pl *plan.Plan) (done bool, err error) {
	s, err := p.copySpecFor(pl)
	if s == nil || err != nil {
		return false, err
	}
	// The Query is handled here for good.
	p.cr.consume()
	var start int
	p.out, start = pgmsg.BeginQuery(p.out[:0])
	p.out = append(p.out, s.text...)
	p.out = pgmsg.FinishQuery(p.out, start)
	p.push(owed{kind: owedQuery, stmts: pl.Statements, copyCols: s.opts.Extra, confirm: p.queryDropsUnnamed()})
	p.copyEffects(pl)
	p.startCopy(s)
	_, err = p.sw.Write(p.out)
	return true, err
}

// copyEffects applies the effects of a completed COPY: those of its plan
// but the shim's, which issues nothing for it.
func (p *clientPump) copyEffects(pl *plan.Plan) {
	if pl.Touches&^plan.TouchShim == 0 {
		return
	}
	q := *pl
	q.Touches &^= plan.TouchShim
	p.effects(&q, nil)
}

// parseCopy sends the Parse of an unnamed COPY statement whose rows the
// session completes when a portal of it runs (execute), when it may: done
// reports that the Parse was handled. Named statements stay with the
// shim: one may run long after the catalog told what its table's
// defaults are.
func (p *clientPump) parseCopy(pl *plan.Plan, msg pgmsg.Parse) (done bool, err error) {
	s, err := p.copySpecFor(pl)
	if s == nil || err != nil {
		return false, err
	}
	rec := &stmtRec{pl: pl, base: msg.NumTypes(), copy: s}
	confirm := p.recordUnnamed(rec)
	p.stmtLive = true
	var start int
	p.out, start = pgmsg.BeginParse(p.out[:0], "")
	p.out = append(p.out, s.text...)
	p.out = pgmsg.EndParseText(p.out, msg.NumTypes())
	p.out = append(p.out, msg.Types()...)
	p.out = pgmsg.Finish(p.out, start)
	p.cr.consume()
	p.push(owed{kind: owedParse, confirm: confirm})
	_, err = p.sw.Write(p.out)
	return true, err
}

// copyMessage handles a client message while a completed COPY is under
// way; handled is false for a message that ends it (the caller then
// dispatches it as usual).
func (p *clientPump) copyMessage(typ byte) (handled bool, err error) {
	switch typ {
	case 'd':
		return true, p.copyData()
	case 'c':
		return true, p.copyDone()
	case 'H', 'S':
		// Ignored by the server during COPY; the COPY goes on.
		return false, nil
	}
	p.endCopy()
	return false, nil
}

// copyData relays one CopyData message with its rows completed. A message
// the read buffer holds whole is rewritten in one piece (always so on a
// loop thread); a larger one part by part, each part its own CopyData.
func (p *clientPump) copyData() error {
	c := &p.cin
	if c.failed || p.sh.copyRefused.Load() {
		return p.cr.forward(p.sw)
	}
	f := &p.cr
	if 5+f.n <= f.R.Size() {
		body, err := f.body()
		if err != nil {
			return err
		}
		if err := p.copyIDs(body); err != nil {
			if err == errHandover {
				return err // nothing consumed, nothing issued
			}
			f.consume() // its rows cannot be completed: the COPY ends
			return p.copyFail(err)
		}
		p.copyRewrite(body)
		f.consume()
		_, err = p.sw.Write(p.out)
		return err
	}
	_, _ = f.R.Discard(5)
	for n := f.n; n > 0; {
		if f.R.Buffered() == 0 {
			if _, err := f.R.Peek(1); err != nil {
				return unexpected(err)
			}
		}
		k := min(n, f.R.Buffered())
		part, _ := f.R.Peek(k)
		if !c.failed {
			if err := p.copyIDs(part); err != nil {
				if err := p.copyFail(err); err != nil {
					return err
				}
				_, _ = f.R.Discard(k)
				n -= k
				continue
			}
			p.copyRewrite(part)
			if _, err := p.sw.Write(p.out); err != nil {
				return err
			}
		}
		_, _ = f.R.Discard(k)
		n -= k
	}
	return nil
}

// copyRewrite puts into p.out a CopyData message of data with its rows
// completed; the IDs are in the queue already (copyIDs).
func (p *clientPump) copyRewrite(data []byte) {
	c := &p.cin
	var start int
	p.out, start = pgmsg.Begin(p.out[:0], 'd')
	before := c.rw.Rows()
	var n int
	var need bool
	p.out, n, need = c.rw.Rewrite(p.out, data, &c.ids)
	p.noteCopyRows(before)
	if need {
		// copyIDs counted too few rows: a bug. The rest goes unchanged,
		// and the server refuses the row that lacks its IDs.
		p.log.Error("COPY: a row without IDs")
		c.failed = true
		p.out = append(p.out, data[n:]...)
	}
	p.out = pgmsg.Finish(p.out, start)
}

// noteCopyRows keeps the IDs of the last completed row.
func (p *clientPump) noteCopyRows(before int64) {
	c := &p.cin
	if c.rw.Rows() != before {
		copy(c.last[:c.extra], c.ids.Buf[c.ids.Next-c.extra:c.ids.Next])
		c.rows = c.rw.Rows()
	}
}

// copyIDs makes sure the queue holds an ID per added column for every
// row that can end in data (and one more row, for Finish).
func (p *clientPump) copyIDs(data []byte) error {
	c := &p.cin
	rows := 1
	switch {
	case c.rw.Ended():
		return nil
	case c.rw.Binary():
		rows += len(data) / c.rw.MinTuple()
	default:
		rows += bytes.Count(data, []byte{'\n'}) + bytes.Count(data, []byte{'\r'})
	}
	want := rows * c.extra
	if c.ids.Len() >= want {
		return nil
	}
	want = max(want-c.ids.Len(), minCopyBatch*c.extra)
	reqs := c.reqs[:0]
	for len(reqs) < want {
		reqs = append(reqs, c.row...)
	}
	c.reqs = reqs
	if _, err := p.nextvals(reqs, c.node); err != nil {
		return err
	}
	c.ids.Compact()
	lo, hi := reqs[0].ID, reqs[0].ID
	for i := range reqs {
		c.ids.Buf = append(c.ids.Buf, reqs[i].ID)
		lo, hi = min(lo, reqs[i].ID), max(hi, reqs[i].ID)
	}
	p.sh.mu.Lock()
	v := &p.sh.copyView
	if v.lo == 0 || lo < v.lo {
		v.lo = lo
	}
	v.hi = max(v.hi, hi)
	p.sh.mu.Unlock()
	p.srv.stats.fast.Add(uint64(len(reqs)))
	return nil
}

// copyDone ends the data: the last row without a line end gets its IDs,
// then the CopyDone goes on.
func (p *clientPump) copyDone() error {
	c := &p.cin
	if !c.failed && !p.sh.copyRefused.Load() {
		if err := p.copyIDs(nil); err != nil {
			if err == errHandover {
				return err
			}
			if err := p.copyFail(err); err != nil {
				return err
			}
			p.endCopy()
			return p.cr.skip() // the server ended the COPY already
		}
		var start int
		p.out, start = pgmsg.Begin(p.out[:0], 'd')
		body := len(p.out)
		before := c.rw.Rows()
		p.out, _ = c.rw.Finish(p.out, &c.ids)
		p.noteCopyRows(before)
		if len(p.out) > body {
			p.out = pgmsg.Finish(p.out, start)
			if _, err := p.sw.Write(p.out); err != nil {
				return err
			}
		}
	}
	p.endCopy()
	return p.cr.forward(p.sw)
}

// errCopyIDs is the message of the CopyFail the proxy sends when it can
// have no more IDs for a COPY's rows.
var errCopyIDs = errors.New("snowflake-proxy could not issue snowflake IDs for the rows")

// copyFail ends the COPY on the server with a CopyFail (the server
// answers with its error, 57014), after the generator failed: the
// statement names columns the rest of the rows would lack. The session
// goes on; the client's remaining CopyData is passed to the server, which
// ignores it outside a COPY.
func (p *clientPump) copyFail(cause error) error {
	p.log.Warn("COPY: no IDs for its rows", logError, cause)
	p.srv.countFallback(p.fallbackOf(cause))
	p.cin.failed = true
	msg := fmt.Sprintf("%v: %v", errCopyIDs, cause)
	var start int
	p.out, start = pgmsg.Begin(p.out[:0], 'f')
	p.out = append(p.out, msg...)
	p.out = append(p.out, 0)
	p.out = pgmsg.Finish(p.out, start)
	_, err := p.sw.Write(p.out)
	return err
}

// endCopy forgets the COPY's state; currval becomes its last row's IDs,
// as if the server's shim had issued them.
func (p *clientPump) endCopy() {
	c := &p.cin
	if c.rows > 0 {
		m := &p.mirror
		if m.currval == nil {
			m.currval = map[uint32]int64{}
		}
		for k, r := range c.row {
			m.currval[r.Seq] = c.last[k]
		}
	}
	c.active, c.failed, c.rows = false, false, 0
	c.ids.Reset()
}
