package wire

import (
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// Regression (found in review): each refused Parse of a name that nothing
// looked up in between added a record to the chain of replaced records.
func TestRefusedNamedParsesDoNotPileUp(t *testing.T) {
	p := &clientPump{sh: newShared(true)}
	first := &stmtRec{pl: plan.Passthrough}
	p.stmts = map[string]*stmtRec{"x": first}
	for i := 0; i < 100; i++ {
		rec := p.recordNamed("x", &stmtRec{pl: plan.Passthrough}, nil)
		rec.parsed.done = true // answered without ParseComplete: refused
	}
	n := 0
	for r := p.stmts["x"]; r != nil; r = r.replaced {
		n++
	}
	if n != 2 {
		t.Fatalf("chain of %d records after 100 refused Parses, want 2 (the last, unsettled, and the first)", n)
	}
	if got := p.stmt([]byte("x")); got != first {
		t.Fatal("the name does not keep its first record")
	}
}

// What a lookup sees once the server answered a change of a statement's
// record: the new record when confirmed, the old one when the message was
// skipped or refused, none when the server ran and refused a Parse of the
// unnamed statement (it drops the unnamed statement first).
func TestSettledRecords(t *testing.T) {
	answered := func(ok, failed bool) parseConfirm { return parseConfirm{ok: ok, failed: failed, done: true} }
	parse := func(p *clientPump, rec *stmtRec) *parseConfirm { return p.recordNamed("x", rec, nil).confirmation() }
	deallocateAll := func(p *clientPump, _ *stmtRec) *parseConfirm {
		pl := &plan.Plan{Statements: []plan.Statement{{DeallocateAll: true}}, Touches: plan.TouchPrepared}
		c := dropConfirms(pl)
		p.effects(pl, c)
		return c[0]
	}
	closeUnnamed := func(p *clientPump, _ *stmtRec) *parseConfirm { return p.closeUnnamed() }
	parseUnnamed := func(p *clientPump, rec *stmtRec) *parseConfirm { return p.recordUnnamed(rec).confirmation() }
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
			name := []byte("x")
			if c.unnamed {
				p.unnamed, name = old, nil
			} else {
				p.stmts = map[string]*stmtRec{"x": old}
			}
			*c.change(p, parsed) = c.answer
			want := map[string]*stmtRec{"old": old, "new": parsed, "none": nil}[c.want]
			if got := p.stmt(name); got != want {
				t.Fatalf("lookup: %p, want the %s record %p (old %p, new %p)", got, c.want, want, old, parsed)
			}
		})
	}
}
