package wire

import "github.com/snowflake-proxy/snowflake-proxy/wire/netloop"

// Statement records changed when the server has answered. PostgreSQL
// keeps a named statement until a Close or DEALLOCATE that runs: a Parse
// of a name it has fails (42P05), as does one it cannot parse, plan or
// type, and every message skipped after an earlier error in the pipeline
// changes nothing, a Close or a Parse of the unnamed statement included; a
// DEALLOCATE in a Query whose earlier statement failed never runs. So the
// proxy keeps, per statement name, the record the server has for sure
// (stmtSlot.base) and the changes it sent and the server has not answered
// yet (pending, oldest first): a Parse's new record, or none for a Close,
// a DEALLOCATE or a Parse of a statement the proxy passes as it is.
// Lookups see the newest change: a Bind behind it in the pipeline runs
// only if the change was made.
//
// Answers come in the order the messages were sent, whatever their
// names, so the session keeps every pending change in one FIFO too
// (clientPump.changes), and settles it from its front as far as the
// server has answered (settleAnswered) before each lookup and change. A
// change the server confirmed becomes the base; one it skipped or
// refused goes, and the base stays. The one exception to "refused changes
// nothing": a Parse of the unnamed statement that the server runs drops
// the unnamed statement first, so its refusal leaves none
// (dropsOnFailure). A DEALLOCATE in a Query of several statements is
// confirmed by its own CommandComplete: prepared statements are not
// transactional. Without all this, a client that ignored an error had its
// later Binds of the name rendered for a record the server does not
// have: IDs appended in the wrong places, or left out, or a statement
// the server dropped run through its fallback statement
// (fallbackstmt.go).
//
// Until an answer reaches the proxy, lookups see the newest change: a
// Bind in the same group (up to the next Sync, or the Query itself) runs
// only if the change was made. A Bind or Describe of a later group runs
// whatever became of it, so the proxy first waits for the answer
// (answered): a client that pipelines past the Sync of a refused Parse of
// a name it had, or of a skipped Close, had its Binds rendered for a
// statement the server did not have, with IDs of another sequence bound
// in its slots.

// stmtSlot is what the proxy knows of one statement name.
type stmtSlot struct {
	name    string          // "" for the unnamed statement
	base    *stmtRec        // the server's, nil for none
	pending []pendingChange // pending[head:], oldest first
	head    int
}

// pendingChange is a change of a statement the server has not answered.
type pendingChange struct {
	rec            *stmtRec // the new record; nil: the name has none after it
	answer         *parseConfirm
	dropsOnFailure bool
	group          uint64 // clientPump.groups when it was sent
}

// current is the record lookups see: the newest change's, else the base.
func (s *stmtSlot) current() *stmtRec {
	if n := len(s.pending); n > s.head {
		return s.pending[n-1].rec
	}
	return s.base
}

// settled reports whether no change of the slot is pending.
func (s *stmtSlot) settled() bool { return s.head == len(s.pending) }

// empty reports whether the slot holds nothing.
func (s *stmtSlot) empty() bool { return s.base == nil && s.settled() }

// compact moves the live part of a FIFO q[head:] to its front when the
// dead part is the larger, as owedQueue.push does: no allocation in
// steady state, and no growth when something is always pending.
func compact[T any](q []T, head int) ([]T, int) {
	if head == len(q) {
		return q[:0], 0
	}
	if head > 64 && head > len(q)/2 {
		n := copy(q, q[head:])
		clear(q[n:])
		return q[:n], 0
	}
	return q, head
}

// change records a change of slot s answered through answer (nil: rec's
// own Parse confirmation, or a new one when rec is nil) and returns
// answer, for the owed entry of the message.
func (p *clientPump) change(s *stmtSlot, rec *stmtRec, answer *parseConfirm, dropsOnFailure bool) *parseConfirm {
	if answer == nil {
		if rec != nil {
			answer = &rec.parsed
		} else {
			answer = &parseConfirm{}
		}
	}
	if rec != nil {
		rec.unsettled = true
	}
	s.pending, s.head = compact(s.pending, s.head)
	s.pending = append(s.pending, pendingChange{rec: rec, answer: answer, dropsOnFailure: dropsOnFailure, group: p.groups})
	p.changes, p.changesHead = compact(p.changes, p.changesHead)
	p.changes = append(p.changes, s)
	return answer
}

// settleAnswered settles the pending changes the server has answered,
// oldest first.
func (p *clientPump) settleAnswered() {
	if p.changesHead == len(p.changes) {
		return
	}
	p.sh.mu.Lock()
	for p.changesHead < len(p.changes) {
		s := p.changes[p.changesHead]
		c := s.pending[s.head]
		if !c.answer.done {
			break
		}
		a := *c.answer
		p.changes[p.changesHead] = nil
		p.changesHead++
		s.pending[s.head] = pendingChange{}
		s.head++
		if s.settled() {
			s.pending, s.head = s.pending[:0], 0
		}
		if c.rec != nil {
			c.rec.unsettled = false
		}
		switch {
		case a.ok:
			p.dropRecord(s.base)
			s.base = c.rec
		case a.failed && c.dropsOnFailure:
			p.dropRecord(s.base)
			p.dropRecord(c.rec)
			s.base = nil
		default:
			p.dropRecord(c.rec)
		}
		if s.name != "" && s.empty() {
			delete(p.stmts, s.name)
		}
	}
	p.sh.mu.Unlock()
	p.changes, p.changesHead = compact(p.changes, p.changesHead)
}

// recordNamed records a change of the named statement name: rec its new
// record (nil: none, for a Close, a DEALLOCATE or a statement passed as
// it is), answered through answer (nil: the message's own, returned for
// its owed entry; nil when there is nothing to record).
func (p *clientPump) recordNamed(name string, rec *stmtRec, answer *parseConfirm) *parseConfirm {
	p.settleAnswered()
	s := p.stmts[name]
	if s == nil {
		if rec == nil {
			return nil
		}
		s = &stmtSlot{name: name}
		if p.stmts == nil {
			p.stmts = map[string]*stmtSlot{}
		}
		p.stmts[name] = s
	}
	return p.change(s, rec, answer, false)
}

// recordUnnamed records a Parse of the unnamed statement, rec its new
// record (nil: a statement passed as it is), and returns the confirmation
// its owed entry carries.
func (p *clientPump) recordUnnamed(rec *stmtRec) *parseConfirm {
	if rec == nil {
		if p.unnamed.empty() {
			return nil
		}
		// Run or refused, the Parse drops the unnamed statement first.
		return p.unnamedGoes(p.atSafePoint())
	}
	p.settleAnswered()
	p.dropRecord(p.unnamed.current()) // as unnamedGoes
	return p.change(&p.unnamed, rec, nil, true)
}

// closeUnnamed records a Close of the unnamed statement and returns the
// confirmation its owed entry carries.
func (p *clientPump) closeUnnamed() *parseConfirm {
	if p.unnamed.empty() {
		return nil
	}
	return p.unnamedGoes(p.atSafePoint())
}

// queryDropsUnnamed records that a Query sent to the server destroys the
// unnamed statement and portal, which it does when it runs: not when the
// server skips it after an error before Sync. It returns the confirmation
// the Query's owed entry carries (nil: the record went at once). Called
// before the entry is pushed.
func (p *clientPump) queryDropsUnnamed() *parseConfirm {
	safe := p.atSafePoint()
	if safe {
		// Nothing before it can make the server skip it. Elsewhere the
		// flags stay: the server may keep both (regression, found in
		// review: a skipped Query let the next one be answered locally
		// over the server's unnamed statement).
		p.stmtLive, p.unnamedPortal, p.portalLive = false, nil, false
	}
	return p.unnamedGoes(safe)
}

// dropUnnamed drops the record of the unnamed statement when the server
// has none either: the client's Query destroyed it, and the proxy
// answered that Query itself, at a safe point, where the server had none
// (local.go, simpleprep.go).
func (p *clientPump) dropUnnamed() { p.unnamedGoes(true) }

// unnamedGoes records a message that leaves the unnamed statement without
// a record (a Parse of a statement passed as it is, a Close, a Query). Its
// fallback name goes back at once: a client that parses the unnamed
// statement at every execution keeps reusing one fallback statement, and
// a record the server keeps after all (the message skipped) prepares one
// again when it needs it. safe: nothing sent before the message can make
// the server skip it, so the record goes at once once every earlier
// change is settled (at a safe point they all are); otherwise the change
// is pending, and its confirmation is returned for the message's owed
// entry.
func (p *clientPump) unnamedGoes(safe bool) *parseConfirm {
	s := &p.unnamed
	if s.empty() {
		return nil
	}
	p.settleAnswered()
	p.dropRecord(s.current())
	if safe && s.settled() {
		s.base = nil
		return nil
	}
	return p.change(s, nil, nil, false)
}

// answered returns the record of statement name for a message that runs
// whatever became of the changes of earlier groups: once the server has
// answered the newest change, when that was sent before a Sync or Query
// since. On a loop thread it returns errHandover instead of waiting.
func (p *clientPump) answered(name []byte) (*stmtRec, error) {
	for {
		p.settleAnswered()
		s := &p.unnamed
		if len(name) != 0 {
			if s = p.stmts[string(name)]; s == nil {
				return nil, nil
			}
		}
		if s.settled() || s.pending[len(s.pending)-1].group == p.groups {
			return s.current(), nil
		}
		if p.onLoop() {
			return nil, errHandover
		}
		if err := p.awaitAnswer(s.pending[len(s.pending)-1].answer); err != nil {
			return nil, err
		}
	}
}

// awaitAnswer sends what is buffered for the server and waits until c is
// done or the session ends.
func (p *clientPump) awaitAnswer(c *parseConfirm) error {
	if err := p.sw.Flush(); err != nil {
		return &Error{Kind: KindUpstreamIO, Message: "write", Err: err}
	}
	p.sh.mu.Lock()
	if p.sh.q.wake == nil {
		p.sh.q.wake = make(chan struct{}, 1)
	}
	done, wake := c.done, p.sh.q.wake
	p.sh.mu.Unlock()
	if done {
		return nil
	}
	netloop.MayWait("the answer to a change of a statement")
	select {
	case <-wake:
		return nil
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
}

// atSafePoint reports whether nothing sent to the server is unanswered.
func (p *clientPump) atSafePoint() bool {
	safe, _ := p.sh.quiet()
	return safe
}

// records calls fn with every record the session holds, pending ones
// included.
func (p *clientPump) records(fn func(*stmtRec)) {
	each := func(s *stmtSlot) {
		if s.base != nil {
			fn(s.base)
		}
		for _, c := range s.pending[s.head:] {
			if c.rec != nil {
				fn(c.rec)
			}
		}
	}
	each(&p.unnamed)
	for _, s := range p.stmts {
		each(s)
	}
}
