package wire

import (
	"strings"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// query handles a simple Query ('Q'). Pass-through text is forwarded raw;
// a plan with slots is rendered with literal values and sent as a new
// Query; a plan the proxy can answer alone is answered by local.go when the
// session state allows it.
func (p *clientPump) query() error {
	body, err := p.cr.body()
	if err != nil {
		return err
	}
	msg, ok := pgmsg.ReadQuery(body)
	if !ok {
		// The server reports the malformed message, as without the proxy.
		p.forwardQuery(owed{kind: owedQuery}, plan.Passthrough)
		return p.cr.pass(p.sw)
	}
	text := msg.SQL
	pl := p.plan(text)
	if err := p.awaitBlocks(pl); err != nil {
		return p.handOver(text, pl, err)
	}
	if pl.Copy != nil {
		if done, err := p.copyQuery(pl); done || err != nil {
			return p.handOver(text, pl, err)
		}
	}
	// The client's own Query destroys the unnamed statement and portal, so
	// a hidden query before it harms nothing.
	t, shim, err := p.insertTemplate(pl, true)
	if err != nil {
		return p.handOver(text, pl, err)
	}
	if t == nil {
		if shim != 0 {
			p.markShim()
		}
		p.srv.countFallback(p.executionFallback(shim, false, pl))
		p.forwardQuery(owed{kind: owedQuery, stmts: pl.Statements}, pl)
		return p.cr.pass(p.sw)
	}
	allValid, ok, err := p.values(t, true, true, shim != 0)
	if err != nil {
		return p.handOver(text, pl, err)
	}
	// The Query is handled here for good.
	if shim != 0 {
		p.markShim()
	}
	p.srv.countFallback(p.executionFallback(shim, p.noteShimSlots(t), pl))
	if !ok {
		// No SQL for an extension slot: the server answers the original.
		p.forwardQuery(owed{kind: owedQuery}, pl)
		return p.cr.pass(p.sw)
	}
	p.cr.consume()
	if pl.Local != nil && allValid {
		if done, err := p.answerLocally(pl); done || err != nil {
			// For the client the Query destroyed the unnamed statement and
			// portal; the server has neither (answerLocally).
			p.dropUnnamed()
			p.unnamedPortal = nil
			return err
		}
	}
	if allValid {
		if done, err := p.queryPrepared(pl, t); done || err != nil {
			return err
		}
	}
	var start int
	p.out, start = pgmsg.BeginQuery(p.out[:0])
	p.out = t.RenderLiteral(p.out, p.vals)
	p.out = pgmsg.FinishQuery(p.out, start)
	p.forwardQuery(owed{kind: owedQuery, stmts: pl.Statements, pos: newPosMap(t, p.vals, 0, plan.Literals)}, pl)
	_, err = p.sw.Write(p.out)
	return err
}

// forwardQuery pushes o, the owed entry of a Query of pl about to be
// sent, with the confirmations that the changes of statement records it
// makes wait for (namedparse.go), and records them: it destroys the
// unnamed statement and portal, and has its plan's effects.
func (p *clientPump) forwardQuery(o owed, pl *plan.Plan) {
	o.confirms = dropConfirms(pl)
	o.confirm = p.queryDropsUnnamed()
	p.push(o)
	p.effects(pl, o.confirms)
}

// dropConfirms returns, when a statement of pl removes prepared
// statements, a confirmation per statement (nil for the others), which
// the statement's CommandComplete sets (namedparse.go); nil otherwise.
func dropConfirms(pl *plan.Plan) []*parseConfirm {
	var cs []*parseConfirm
	for i, st := range pl.Statements {
		if st.Deallocate == "" && !st.DeallocateAll {
			continue
		}
		if cs == nil {
			cs = make([]*parseConfirm, len(pl.Statements))
		}
		cs[i] = &parseConfirm{}
	}
	return cs
}

// answeredNow is the confirmation of a change that needs no answer.
var answeredNow = parseConfirm{ok: true, done: true}

// effects applies what an executed string does to the session records:
// prepared statements removed by DEALLOCATE or DISCARD ALL (the client's
// once the server confirmed the statement through confirms, dropConfirms;
// the proxy's own, and confirmations of fallback statements, at once:
// forgetting those only costs a Parse), and mirror state made stale
// (again at each ReadyForQuery until the transaction ends, for SET LOCAL
// and rollbacks).
func (p *clientPump) effects(pl *plan.Plan, confirms []*parseConfirm) {
	for i, st := range pl.Statements {
		if st.Deallocate == "" && !st.DeallocateAll {
			continue
		}
		c := &answeredNow // no entry to wait for
		if i < len(confirms) && confirms[i] != nil {
			c = confirms[i]
		}
		p.deallocated(st, c)
	}
	t := pl.Touches
	if t == 0 {
		return
	}
	p.mirror.invalidate(t)
	if t&plan.TouchAll != 0 && t&plan.TouchPrepared != 0 {
		clear(p.mirror.currval) // DISCARD ALL includes DISCARD SEQUENCES
	}
	p.sh.mu.Lock()
	p.sh.pending |= t
	p.sh.shimBusy |= t & touchFence
	p.sh.mu.Unlock()
}

// deallocated records a statement that removes prepared statements,
// confirmed through c.
func (p *clientPump) deallocated(st plan.Statement, c *parseConfirm) {
	if st.DeallocateAll {
		names := make([]string, 0, len(p.stmts))
		for name := range p.stmts {
			names = append(names, name)
		}
		for _, name := range names {
			p.recordNamed(name, nil, c)
		}
		clear(p.prepared)
		p.fallbacksDropped(nil, true) // the server dropped them too
		return
	}
	p.recordNamed(st.Deallocate, nil, c)
	p.fallbacksDropped([]byte(st.Deallocate), false)
	if strings.HasPrefix(st.Deallocate, preparedQueryPrefix) {
		p.forgetPrepared(st.Deallocate) // simpleprep.go
	}
}
