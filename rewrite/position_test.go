package rewrite

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// Regression (tests/psql errors.sql, equivalence currval.sql): errors in a
// rewritten statement carried the server's cursor position in the
// rewritten text, so psql's caret pointed at the wrong column. SourcePos
// maps a position in the rendered text back to the client's text.
func TestSourcePosMapsBackToTheClientText(t *testing.T) {
	r := New(Config{})
	for _, c := range []struct {
		sql, target string // the server reports the first occurrence of target in the rendered text
		valid       bool
		params      bool
	}{
		{"SELECT snowflake.nextval('no_such_sequence')", "'no_such_sequence'", false, false},
		{"SELECT snowflake.currval('no_such_sequence')", "'no_such_sequence'", false, false},
		{"SELECT snowflake.nextval(), 'abc'::int", "'abc'", true, false},
		{"SELECT 'é€', snowflake.nextval(), 'abc'::int", "'abc'", true, false},
		{"SELECT snowflake.nextval() + $1, 'abc'::int", "'abc'", true, true},
		{"SELECT snowflake.nextval('no_such_sequence')", "'no_such_sequence'", false, true},
		{"VALUES (snowflake.nextval(), 'x'), (snowflake.nextval(), 'abc'::int)", "'abc'", true, false},
	} {
		p := r.Plan(c.sql)
		if p.Template == nil {
			t.Fatalf("%q: no template", c.sql)
		}
		vals := make([]plan.Value, len(p.Template.Slots))
		for i := range vals {
			vals[i] = plan.Value{ID: 514686790318190594, Valid: c.valid}
		}
		var out []byte
		if c.params {
			out = p.Template.RenderParams(nil, p.MaxParam, vals)
		} else {
			out = p.Template.RenderLiteral(nil, vals)
		}
		rendered := string(out)
		k := strings.Index(rendered, c.target)
		if k < 0 {
			t.Fatalf("%q: %q not in rendered %q", c.sql, c.target, rendered)
		}
		pos := utf8.RuneCountInString(rendered[:k]) + 1
		want := utf8.RuneCountInString(c.sql[:strings.Index(c.sql, c.target)]) + 1
		if got := p.Template.SourcePos(pos, vals, p.MaxParam, c.params); got != want {
			t.Errorf("%q rendered %q: position %d maps to %d, want %d", c.sql, rendered, pos, got, want)
		}
	}
}

// A position inside a replaced call that is not its argument maps to the
// start of the call, where the server would point for the original text.
func TestSourcePosInsideAReplacedCall(t *testing.T) {
	p := New(Config{}).Plan("SELECT 1, snowflake.nextval()")
	vals := []plan.Value{{ID: 514686790318190594, Valid: true}}
	rendered := string(p.Template.RenderLiteral(nil, vals))
	pos := strings.Index(rendered, "::int8") + 1
	if got, want := p.Template.SourcePos(pos, vals, 0, false), strings.Index("SELECT 1, snowflake.nextval()", "snowflake")+1; got != want {
		t.Fatalf("got %d, want %d (rendered %q)", got, want, rendered)
	}
	if got := p.Template.SourcePos(len(rendered)+5, vals, 0, false); got != 0 {
		t.Fatalf("past the end: got %d, want 0", got)
	}
}
