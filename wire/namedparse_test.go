package wire

import (
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// stmt is the record lookups see for the statement name, without the
// wait of answered.
func (p *clientPump) stmt(name []byte) *stmtRec {
	p.settleAnswered()
	if len(name) == 0 {
		return p.unnamed.current()
	}
	if s := p.stmts[string(name)]; s != nil {
		return s.current()
	}
	return nil
}

// refused marks c answered without a confirmation.
func refused(c *parseConfirm) { c.done = true }

// Regression (found in review): each refused Parse of a name that nothing
// looked up in between added a record to the chain of replaced records.
func TestRefusedNamedParsesDoNotPileUp(t *testing.T) {
	p := &clientPump{sh: newShared(true)}
	first := &stmtRec{pl: plan.Passthrough}
	p.stmts = map[string]*stmtSlot{"x": {name: "x", base: first}}
	for i := 0; i < 100; i++ {
		refused(p.recordNamed("x", &stmtRec{pl: plan.Passthrough}, nil))
	}
	if s := p.stmts["x"]; len(s.pending)-s.head != 1 {
		t.Fatalf("%d pending changes after 100 refused Parses, want 1 (the last, unsettled)", len(s.pending)-s.head)
	}
	if got := p.stmt([]byte("x")); got != first {
		t.Fatal("the name does not keep its first record")
	}
}

// Regression (found in review): a closed name that nothing looked up
// again kept its record, and the record's fallback name, for the life of
// the session (a client that never reuses names, as pgjdbc's S_1, S_2...,
// prepared a new fallback statement for each).
func TestClosedNamesSettleWithoutLookups(t *testing.T) {
	p := &clientPump{sh: newShared(true)}
	for i := 0; i < 100; i++ {
		name := string(rune('a'+i%26)) + string(rune('a'+i/26))
		rec := &stmtRec{pl: plan.Passthrough, fb: &fallbackStmt{name: []byte("fb")}}
		for _, c := range []*parseConfirm{p.recordNamed(name, rec, nil), p.recordNamed(name, nil, nil)} {
			c.ok, c.done = true, true // the Parse, then the Close
		}
	}
	p.recordNamed("last", &stmtRec{pl: plan.Passthrough}, nil)
	if len(p.stmts) != 1 || p.stmts["last"] == nil {
		t.Fatalf("%d names recorded after 100 closed ones and one parsed, want 1", len(p.stmts))
	}
	if n := len(p.fbFree); n != 100 {
		t.Fatalf("%d fallback names given back, want 100", n)
	}
	if n := len(p.changes) - p.changesHead; n != 1 {
		t.Fatalf("%d pending changes, want 1", n)
	}
}

// Regression (found in review): a client one Parse of the unnamed
// statement ahead of the server's answers kept every earlier record.
func TestPipelinedUnnamedParsesSettle(t *testing.T) {
	p := &clientPump{sh: newShared(true)}
	var prev *stmtRec
	for i := 0; i < 10000; i++ {
		rec := &stmtRec{pl: plan.Passthrough}
		p.recordUnnamed(rec)
		if prev != nil {
			prev.parsed.ok, prev.parsed.done = true, true
		}
		prev = rec
	}
	if n := len(p.unnamed.pending) - p.unnamed.head; n > 2 {
		t.Fatalf("%d pending changes of the unnamed statement, want at most 2", n)
	}
	// Regression (found in review): the FIFOs were emptied only when
	// nothing was pending, which a client always one ahead never let
	// happen.
	if len(p.changes) > 200 || len(p.unnamed.pending) > 200 {
		t.Fatalf("FIFOs of %d and %d entries for 2 pending changes", len(p.changes), len(p.unnamed.pending))
	}
}

// Regression (found in review): simple Queries after a pending change of
// the unnamed statement each added a change, which nothing settled while
// the session sent Queries only. Each Query's change now settles with its
// answer, at the next one.
func TestQueriesDoNotPileUpChanges(t *testing.T) {
	p := &clientPump{sh: newShared(true)}
	p.sh.dirty = true // not at a safe point: each Query's drop is pending
	rec := &stmtRec{pl: plan.Passthrough}
	prev := p.recordUnnamed(rec)
	for i := 0; i < 1000; i++ {
		c := p.queryDropsUnnamed()
		if c == nil && i == 0 {
			t.Fatal("the first Query's drop of the unnamed statement is not pending")
		}
		if prev != nil {
			prev.ok, prev.done = true, true
		}
		prev = c
		if n := len(p.changes) - p.changesHead; n > 2 {
			t.Fatalf("%d pending changes after %d Queries, want at most 2", n, i+1)
		}
	}
	prev.ok, prev.done = true, true
	got := p.stmt(nil)
	if n := len(p.changes) - p.changesHead; got != nil || n != 0 || rec.unsettled {
		t.Fatalf("%d pending changes once every Query was answered, want 0 and no record", n)
	}
}

// What a lookup sees once the server answered a change of a statement's
// record: the new record when confirmed, the old one when the message was
// skipped or refused, none when the server ran and refused a Parse of the
// unnamed statement (it drops the unnamed statement first).
func TestSettledRecords(t *testing.T) {
	answered := func(ok, failed bool) parseConfirm { return parseConfirm{ok: ok, failed: failed, done: true} }
	parse := func(p *clientPump, rec *stmtRec) *parseConfirm { return p.recordNamed("x", rec, nil) }
	deallocateAll := func(p *clientPump, _ *stmtRec) *parseConfirm {
		pl := &plan.Plan{Statements: []plan.Statement{{DeallocateAll: true}}, Touches: plan.TouchPrepared}
		c := dropConfirms(pl)
		p.effects(pl, c)
		return c[0]
	}
	closeUnnamed := func(p *clientPump, _ *stmtRec) *parseConfirm { return p.closeUnnamed() }
	parseUnnamed := func(p *clientPump, rec *stmtRec) *parseConfirm { return p.recordUnnamed(rec) }
	for _, c := range []struct {
		name    string
		unnamed bool
		change  func(p *clientPump, rec *stmtRec) *parseConfirm // makes the change, returns its entry's confirmation
		answer  parseConfirm
		want    string // "old", "new" or "none"
	}{
		{"named Parse confirmed", false, parse, answered(true, false), "new"},
		{"named Parse refused", false, parse, answered(false, true), "old"},
		{"named Parse skipped", false, parse, answered(false, false), "old"},
		{"named Parse unanswered", false, parse, parseConfirm{}, "new"},
		{"named Close run", false, func(p *clientPump, _ *stmtRec) *parseConfirm { return parse(p, nil) }, answered(true, false), "none"},
		{"named Close skipped", false, func(p *clientPump, _ *stmtRec) *parseConfirm { return parse(p, nil) }, answered(false, false), "old"},
		{"named Close unanswered", false, func(p *clientPump, _ *stmtRec) *parseConfirm { return parse(p, nil) }, parseConfirm{}, "none"},
		{"DEALLOCATE ALL failed", false, deallocateAll, answered(false, true), "old"},
		{"DEALLOCATE ALL skipped", false, deallocateAll, answered(false, false), "old"},
		{"DEALLOCATE ALL run", false, deallocateAll, answered(true, false), "none"},
		{"unnamed Parse confirmed", true, parseUnnamed, answered(true, false), "new"},
		{"unnamed Parse skipped", true, parseUnnamed, answered(false, false), "old"},
		{"unnamed Parse refused", true, parseUnnamed, answered(false, true), "none"},
		{"unnamed Close run", true, closeUnnamed, answered(true, false), "none"},
		{"unnamed Close skipped", true, closeUnnamed, answered(false, false), "old"},
	} {
		t.Run(c.name, func(t *testing.T) {
			old, parsed := &stmtRec{pl: plan.Passthrough}, &stmtRec{pl: plan.Passthrough}
			p := &clientPump{sh: newShared(true)}
			p.sh.dirty = true // behind unanswered messages: a change the server may skip
			name := []byte("x")
			if c.unnamed {
				p.unnamed.base, name = old, nil
			} else {
				p.stmts = map[string]*stmtSlot{"x": {name: "x", base: old}}
			}
			*c.change(p, parsed) = c.answer
			want := map[string]*stmtRec{"old": old, "new": parsed, "none": nil}[c.want]
			if got := p.stmt(name); got != want {
				t.Fatalf("lookup: %p, want the %s record %p (old %p, new %p)", got, c.want, want, old, parsed)
			}
		})
	}
}

// Regression (found in review): a Parse of the unnamed statement passed
// as it is allocated a placeholder record when the statement before it
// had a record. At a safe point the server cannot skip the Parse, so none
// is needed.
func TestUnnamedParseAtASafePointAllocatesNothing(t *testing.T) {
	p := &clientPump{sh: newShared(true)}
	rec := &stmtRec{pl: plan.Passthrough}
	if n := testing.AllocsPerRun(200, func() {
		p.unnamed.base = rec
		if p.recordUnnamed(nil) != nil || p.stmt(nil) != nil {
			t.Fatal("the unnamed statement kept its record")
		}
	}); n != 0 {
		t.Errorf("%v allocations per Parse, want 0", n)
	}
}
