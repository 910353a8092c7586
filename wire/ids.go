package wire

import (
	"github.com/snowflake-proxy/snowflake-proxy/compat/catalog"
	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// values fills p.vals, one per slot of t, for one execution: generated IDs
// where the fast path may serve them (mirror.go says when), Valid false
// elsewhere so that the server's shim does the work. Extension slots get
// their SQL. hiddenOK says whether a hidden query may run now if the
// mirror is stale. It reports whether every ID slot got a value, and false
// for ok when an extension slot has no SQL (forward the original text).
// Without generate only the mirror and the extension SQL are prepared.
// shimming: the statement leaves INSERT defaults to the shim (the caller
// marks it so afterwards, markShim), which keeps the fast path off as
// while such a statement runs (fence). slotFallback is why a Nextval slot
// was left to the shim (0 when none was refused).
//
// On a loop thread, where nothing may wait, err is errHandover when a
// hidden query or the generator would have to wait: nothing was issued
// and no record changed (the mirror's caches may have been refreshed, and
// a due fence applied: the pump keeps both).
func (p *clientPump) values(t *plan.Template, hiddenOK, generate, shimming bool) (allValid, ok bool, err error) {
	if cap(p.vals) < len(t.Slots) {
		p.vals = make([]plan.Value, len(t.Slots))
	}
	p.vals = p.vals[:len(t.Slots)]
	clear(p.vals)
	p.fastIDs = 0
	p.slotFallback = 0
	ids := 0
	for i := range t.Slots {
		s := &t.Slots[i]
		if s.Op.IsID() {
			ids++
			continue
		}
		if p.cfg.Snowflakes == nil {
			return false, false, nil
		}
		sql, err := p.cfg.Snowflakes.ExtensionSQL(s.Op, s.Ext)
		if err != nil {
			p.log.Warn("extension statement", logError, err)
			return false, false, nil
		}
		p.vals[i].Text = sql
	}
	if ids == 0 {
		return true, true, nil
	}
	if p.cfg.Snowflakes == nil {
		p.slotFallback = FallbackDisabled
		return false, true, nil
	}
	safe, status := p.state()
	if status == 'E' {
		p.slotFallback = FallbackFailedTransaction
		return false, true, nil // the server gives its own 25P02
	}
	p.checkEpoch()
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
		if p.onLoop() {
			return false, true, errHandover // a hidden query waits for the server
		}
		p.refresh(missing, nil)
	}
	if !generate {
		return false, true, nil
	}
	busy := p.fence(shimming)
	// The Nextval slots the fast path serves are issued together, as the
	// calls of one statement at one instant (regression: one clock reading
	// and one lease check per call let the ms move between the calls of a
	// UNION ALL, and an event loop that gave up half-way had issued IDs
	// the retry then skipped). p.vals[i].Valid marks them until then.
	reqs := m.reqs[:0]
	for i := range t.Slots {
		s := &t.Slots[i]
		if s.Op != plan.Nextval {
			continue
		}
		info, known := m.seqs[s.Seq]
		if f := m.refusal(info, known, busy); f != 0 {
			if p.slotFallback == 0 {
				p.slotFallback = f
			}
			continue
		}
		reqs = append(reqs, generator.Request{Seq: info.oid, Inc: info.inc, After: m.ticket})
		p.vals[i].Valid = true
	}
	m.reqs = reqs
	if len(reqs) > 0 {
		ok, err := p.nextvals(reqs, m.node)
		if !ok {
			for i := range p.vals {
				p.vals[i].Valid = false
			}
		}
		if err == errHandover {
			return false, true, err // nothing was issued: the pump starts over
		}
		if err != nil {
			p.log.Debug("fast path refused", logError, err)
			p.slotFallback = p.fallbackOf(err)
		}
	}
	allValid = true
	k := 0
	for i := range t.Slots {
		s := &t.Slots[i]
		switch {
		case s.Op == plan.Nextval && p.vals[i].Valid:
			r := &reqs[k]
			k++
			p.vals[i].ID = r.ID
			if m.currval == nil {
				m.currval = map[uint32]int64{}
			}
			m.currval[r.Seq] = r.ID
			continue
		case s.Op == plan.Currval:
			if info, known := m.seqs[s.Seq]; known && m.fresh && m.shim && info.oid != 0 {
				if v, ok := m.currval[info.oid]; ok {
					p.vals[i] = plan.Value{ID: v, Valid: true}
					continue
				}
			}
		case !s.Op.IsID():
			continue
		}
		allValid = false
	}
	p.srv.stats.fast.Add(uint64(k))
	p.fastIDs = k
	return allValid, true, nil
}

// refusal is why the fast path may not serve a Nextval slot of sequence
// info (known: the session resolved its name), or 0 when it may; busy is
// fence's answer.
func (m *mirror) refusal(info seqInfo, known bool, busy Fallback) Fallback {
	switch {
	case !known || !m.fresh:
		return FallbackStateUnknown
	case !m.shim:
		return FallbackNoShim
	case m.node < 1 || m.node > 1023:
		return FallbackNoNode
	case m.readOnly:
		return FallbackReadOnly
	case info.oid == 0:
		return FallbackNotSequence
	case !info.usable:
		return FallbackNoUsage
	}
	return busy
}

// nextvals issues the fast-path IDs of one execution; on the event loop's
// thread it never waits, and returns errHandover instead when it would
// have to (nothing is issued then). ok is false when the fast path refused
// them.
func (p *clientPump) nextvals(reqs []generator.Request, node int) (ok bool, err error) {
	if !p.onLoop() {
		netloop.MayWait("the generator (Snowflakes.NextvalBatch)")
		err = p.cfg.Snowflakes.NextvalBatch(p.ctx, p.db, node, reqs)
		return err == nil, err
	}
	ok, err = p.cfg.Snowflakes.TryNextvalBatch(p.db, node, reqs)
	if err == nil && !ok {
		return false, errHandover
	}
	return ok, err
}

// touchFence are the touches after which the fast path fences.
const touchFence = plan.TouchShim | plan.TouchSequence

// fence applies what statements that may have issued IDs outside the fast
// path require: while one still runs, no fast-path ID (FallbackShimRunning:
// leave Nextval slots to the shim, which issues in execution order; a
// Currval hint stays right, the shim's values being the larger ones); once
// answered, Snowflakes.FenceTicket, so the session's next fast-path ID is
// above theirs (and, after a setval or ALTER SEQUENCE, above the
// sequence's last_value).
//
// It also refuses, with FallbackDDLInTransaction, inside a transaction
// block that ran DDL or set a sequence: ALTER SEQUENCE, TRUNCATE ...
// RESTART IDENTITY and DROP hold locks on the sequence until the
// transaction ends, and a lease taken on a control connection would wait
// for them while the session waits for the lease (regression: BEGIN; ALTER
// SEQUENCE s INCREMENT 100; SELECT snowflake.nextval('s') hung). The shim
// issues in the session itself. shimming counts as a statement that still
// runs: the one being sent leaves INSERT defaults to the shim.
func (p *clientPump) fence(shimming bool) Fallback {
	p.sh.mu.Lock()
	busy, due := p.sh.shimBusy, p.sh.fenceDue
	locks := p.sh.txStatus != 'I' && p.sh.pending&(plan.TouchCatalog|plan.TouchSequence) != 0
	p.sh.fenceDue = 0
	p.sh.mu.Unlock()
	if due != 0 {
		p.mirror.ticket = p.cfg.Snowflakes.FenceTicket()
	}
	switch {
	case busy != 0 || shimming:
		return FallbackShimRunning
	case locks:
		return FallbackDDLInTransaction
	}
	return 0
}

// markShim records that a statement about to be forwarded may issue IDs in
// the server's shim (see fence).
func (p *clientPump) markShim() {
	p.sh.mu.Lock()
	p.sh.shimBusy |= plan.TouchShim
	p.sh.mu.Unlock()
}

// noteShimSlots marks the session when a Nextval slot of t (an explicit
// call or an INSERT default) got no fast-path value: the server's shim
// issues that ID (regression: a fast-path refusal, e.g. a lease still
// pending, sent one call to the shim and the next fast-path ID came out
// below it). It reports whether it did.
func (p *clientPump) noteShimSlots(t *plan.Template) bool {
	for i := range t.Slots {
		if t.Slots[i].Op == plan.Nextval && !p.vals[i].Valid {
			p.markShim()
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// hiddenName names the statement and portal of hidden queries: no client
// names its statements so.
const hiddenName = "snowflake-proxy hidden"

// refresh runs the hidden mirror query on the session's server connection
// (the caller checked the safe point) and applies its result: settings,
// sequence names, INSERT target names.
func (p *clientPump) refresh(names, rels []string) {
	// Extended protocol with a named statement and portal, closed at once:
	// a simple Query would destroy the client's unnamed statement and
	// portal, which the client may still use after a Sync.
	var start int
	p.out, start = pgmsg.BeginParse(p.out[:0], hiddenName)
	q := catalog.StateQuery{Sequences: names, Targets: rels}
	p.out = q.AppendSQL(p.out)
	p.out = pgmsg.Finish(pgmsg.EndParseText(p.out, 0), start)
	p.out, start = pgmsg.BeginBind(p.out, hiddenName, hiddenName, 0)
	p.out = pgmsg.FinishBind(p.out, start)
	p.out = pgmsg.AppendExecute(p.out, hiddenName, 0) // all rows
	p.out = pgmsg.AppendClose(p.out, 'P', hiddenName)
	p.out = pgmsg.AppendClose(p.out, 'S', hiddenName)
	p.out = pgmsg.AppendEmpty(p.out, pgmsg.TypeSync)
	p.sh.hq = hiddenQuery{}
	p.sh.hiddenActive.Store(true)
	_, err := p.sw.Write(p.out)
	if err == nil {
		err = p.sw.Flush()
	}
	if err != nil {
		p.sh.hiddenActive.Store(false)
		return
	}
	netloop.MayWait("a hidden query's response")
	select {
	case <-p.sh.hqDone:
	case <-p.ctx.Done():
		return
	}
	p.srv.stats.hidden.Add(1)
	st, err := p.sh.hq.state(q)
	if err != nil {
		p.log.Warn("mirror query failed", logError, err, "sqlstate", p.sh.hq.fail)
		p.mirror.fresh = false
		return
	}
	p.mirror.apply(st, names, rels)
	p.notePooler()
}

// hidden consumes the response to a hidden query (server pump): nothing
// reaches the client but asynchronous messages and a FATAL error.
func (p *serverPump) hidden(typ byte) error {
	switch typ {
	case 'A':
		return p.sr.forward(p.sh.cw)
	case 'S':
		return p.parameterStatus()
	case 'D':
		body, err := p.sr.body()
		if err != nil {
			return err
		}
		p.sh.hq.rows++
		p.sh.hq.row = decodeDataRow(body)
		p.sr.consume()
		return nil
	case 'E':
		body, err := p.sr.body()
		if err != nil {
			return err
		}
		f, _ := pgmsg.ReadFields(body)
		code, _ := f.Get('C')
		p.sh.hq.fail = string(code)
		if f.Fatal() {
			p.sh.noteServerFatal(f)
			return p.sr.pass(p.sh.cw)
		}
		p.sr.consume()
		return nil
	case 'Z':
		body, err := p.sr.body()
		if err != nil {
			return err
		}
		p.sh.mu.Lock()
		if m, ok := pgmsg.ReadReadyForQuery(body); ok {
			p.sh.txStatus = m.Status
		}
		p.sh.mu.Unlock()
		p.sr.consume()
		p.sh.hiddenActive.Store(false)
		p.sh.hqDone <- struct{}{}
		return nil
	}
	return p.sr.skip()
}

// decodeDataRow copies the fields of a DataRow; nil for NULL, and nil for
// a malformed row.
func decodeDataRow(b []byte) []*string {
	m, ok := pgmsg.ReadDataRow(b)
	if !ok {
		return nil
	}
	row := make([]*string, 0, m.NumColumns())
	for vs := m.Values(); vs.Len() > 0; {
		v, null := vs.Next()
		if null {
			row = append(row, nil)
			continue
		}
		s := string(v)
		row = append(row, &s)
	}
	return row
}
