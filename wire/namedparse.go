package wire

import "github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"

// Named statements whose Parse the server refuses. PostgreSQL keeps a
// named statement until it is closed or deallocated: a Parse of a name it
// has fails (42P05), as does one it cannot parse, plan or type, and one
// skipped after an earlier error in the pipeline; the name then keeps
// what it held. The proxy records a named Parse when it forwards it, and
// keeps the record it replaced (replaced) until the server has answered:
// the first lookup of the name after that settles it, keeping the new
// record if the server confirmed the Parse and going back to the one
// before otherwise. Without that, a client that ignored the error had its
// later Binds of the name rendered for the refused text and run by the
// server's old statement: IDs appended in the wrong places, or left out.
//
// A Parse of a name the proxy has a record for, of a statement that
// needs none (passed as it is), gets a placeholder record that holds the
// one it replaced; lookups see the name as recordless until the server
// refused the Parse. Until the answer reaches the proxy, lookups see the
// new record: a Bind behind the Parse before its Sync runs only if the
// Parse succeeded, but one sent after that Sync, before the answer came
// back, is still rendered for the new text (the proxy does not wait).

// recordNamed records rec (nil: a statement passed as it is) as the
// named statement name, and returns the record whose Parse confirmation
// the owed entry of the Parse carries (nil when there is none to keep).
func (p *clientPump) recordNamed(name string, rec *stmtRec) *stmtRec {
	old := p.stmts[name]
	if old != nil && old.unsettled {
		// Settled first where the server answered: refused Parses of a
		// name that nothing looks up in between would pile up otherwise.
		p.settle(name, old)
		old = p.stmts[name]
	}
	if rec == nil && old == nil {
		return nil
	}
	if rec == nil {
		rec = &stmtRec{pl: plan.Passthrough, placeholder: true}
	}
	rec.unsettled, rec.replaced = true, old
	if p.stmts == nil {
		p.stmts = map[string]*stmtRec{}
	}
	p.stmts[name] = rec
	return rec
}

// confirmation is where the server pump notes the answer to rec's Parse.
func (rec *stmtRec) confirmation() *parseConfirm {
	if rec == nil {
		return nil
	}
	return &rec.parsed
}

// settle resolves the record rec of the named statement name, whose
// Parse replaced another, once the server answered it, and returns what
// a lookup of the name sees. Answers come in order: when a record's Parse
// is answered, so are those of the records it replaced.
func (p *clientPump) settle(name string, rec *stmtRec) *stmtRec {
	for rec != nil && rec.unsettled {
		p.sh.mu.Lock()
		done, ok := rec.parsed.done, rec.parsed.ok
		p.sh.mu.Unlock()
		if !done {
			break
		}
		rec.unsettled = false
		prev := rec.replaced
		rec.replaced = nil
		if ok {
			p.dropRecords(prev)
			if rec.placeholder {
				delete(p.stmts, name)
				return nil
			}
			return rec
		}
		p.dropRecord(rec)
		if prev == nil {
			delete(p.stmts, name)
		} else {
			p.stmts[name] = prev
		}
		rec = prev
	}
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
