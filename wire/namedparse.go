package wire

import "github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"

// Statement records changed when the server has answered. PostgreSQL
// keeps a named statement until a Close or DEALLOCATE that runs: a Parse
// of a name it has fails (42P05), as does one it cannot parse, plan or
// type, and every message skipped after an earlier error in the pipeline
// changes nothing, a Close or a Parse of the unnamed statement included; a
// DEALLOCATE in a Query whose earlier statement failed never runs. The
// proxy changes its record of a statement when it forwards the message,
// and keeps the record it replaced (replaced) until the server has
// answered the message (answer): the first lookup of the name after that
// settles it, keeping the new record if the server confirmed the message
// and going back to the one before otherwise. Without that, a client that
// ignored an error had its later Binds of the name rendered for a text the
// server never took: IDs appended in the wrong places, or left out.
//
// A change that leaves the name without a record (a Parse of a statement
// the proxy passes as it is, a Close, a DEALLOCATE) puts a placeholder in
// its place that holds the record it replaced; lookups see the name as
// recordless unless the server refused the change. The one exception to
// "refused changes nothing": a Parse of the unnamed statement that the
// server runs drops the unnamed statement first, so its refusal leaves
// none (dropsOnFailure). A DEALLOCATE in a Query of several statements
// is confirmed by its own CommandComplete: prepared statements are not
// transactional, and one that ran stays run when a later statement
// fails. A record kept for a statement the server dropped would not be
// harmless: a Bind that leaves an ID to the server would run it through
// its fallback statement (fallbackstmt.go).
//
// Until the answer reaches the proxy, lookups see the new record: a Bind
// behind the message before its Sync runs only if the message succeeded,
// but one sent after that Sync, before the answer came back, is still
// rendered for the new record (the proxy does not wait).

// replaceRecord makes rec (nil: a placeholder) the record of a statement
// whose record was old, to be settled by answer (nil: rec's own Parse),
// and returns the new record, nil when there was none and is none.
func (p *clientPump) replaceRecord(old, rec *stmtRec, answer *parseConfirm) *stmtRec {
	if rec == nil && old == nil {
		return nil
	}
	if rec == nil {
		rec = &stmtRec{pl: plan.Passthrough, placeholder: true}
	}
	if answer == nil {
		answer = &rec.parsed
	}
	rec.unsettled, rec.replaced, rec.answer = true, old, answer
	return rec
}

// recordNamed records rec (nil: a statement passed as it is, or none)
// as the named statement name, settled by answer (nil: rec's own Parse),
// and returns the record whose Parse confirmation the owed entry of a
// Parse carries (nil when there is none to keep).
func (p *clientPump) recordNamed(name string, rec *stmtRec, answer *parseConfirm) *stmtRec {
	// Settled first where the server answered: refused Parses of a name
	// that nothing looks up in between would pile up otherwise.
	rec = p.replaceRecord(p.settleNamed(name), rec, answer)
	if rec != nil {
		if p.stmts == nil {
			p.stmts = map[string]*stmtRec{}
		}
		p.stmts[name] = rec
	}
	return rec
}

// recordUnnamed records rec (nil: a statement passed as it is) as the
// unnamed statement, parsed by a Parse whose owed entry carries
// rec.confirmation().
func (p *clientPump) recordUnnamed(rec *stmtRec) *stmtRec {
	old := p.settleChain(p.unnamed)
	// The fallback names of the records replaced go back at once: a
	// client that parses the unnamed statement at every execution keeps
	// reusing one fallback statement. A record the server keeps after all
	// (the Parse skipped) prepares one again when it needs it.
	p.dropRecords(old)
	rec = p.replaceRecord(old, rec, nil)
	if rec != nil {
		rec.dropsOnFailure = true
	}
	p.unnamed = rec
	return rec
}

// closeUnnamed records a Close of the unnamed statement, whose owed entry
// carries the confirmation returned (nil: none needed).
func (p *clientPump) closeUnnamed() *parseConfirm {
	old := p.settleChain(p.unnamed)
	p.dropRecords(old) // as recordUnnamed
	p.unnamed = p.replaceRecord(old, nil, nil)
	return p.unnamed.confirmation()
}

// confirmation is where the server pump notes the answer to rec's Parse.
func (rec *stmtRec) confirmation() *parseConfirm {
	if rec == nil {
		return nil
	}
	return &rec.parsed
}

// settleNamed settles the record of the named statement name (settleChain)
// and returns it: nil when there is none, a placeholder when the change
// it stands for is unanswered.
func (p *clientPump) settleNamed(name string) *stmtRec {
	rec := p.stmts[name]
	if rec == nil || !rec.unsettled {
		return rec
	}
	head := p.settleChain(rec)
	if head == nil {
		delete(p.stmts, name)
	} else {
		p.stmts[name] = head
	}
	return head
}

// settleChain resolves the records from rec down whose message the server
// answered, and returns the record that then stands for the statement (nil:
// none). Answers come in order: when a record's message is answered, so
// are those of the records it replaced.
func (p *clientPump) settleChain(rec *stmtRec) *stmtRec {
	for rec != nil && rec.unsettled {
		p.sh.mu.Lock()
		a := *rec.answer
		p.sh.mu.Unlock()
		if !a.done {
			break
		}
		rec.unsettled = false
		prev := rec.replaced
		rec.replaced = nil
		switch {
		case a.ok:
			p.dropRecords(prev)
			if rec.placeholder {
				return nil
			}
			return rec
		case a.failed && rec.dropsOnFailure:
			p.dropRecords(prev)
			p.dropRecord(rec)
			return nil
		}
		p.dropRecord(rec)
		rec = prev
	}
	return rec
}

// lookup is what a lookup of a statement whose record is rec sees.
func lookup(rec *stmtRec) *stmtRec {
	if rec != nil && rec.placeholder {
		return nil
	}
	return rec
}

// dropRecords drops rec and the records it replaced (dropRecord).
func (p *clientPump) dropRecords(rec *stmtRec) {
	for ; rec != nil; rec = rec.replaced {
		p.dropRecord(rec)
	}
}
