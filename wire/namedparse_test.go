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
		rec := p.recordNamed("x", &stmtRec{pl: plan.Passthrough})
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
