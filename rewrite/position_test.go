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
		render      plan.Rendering
	}{
		{"SELECT snowflake.nextval('no_such_sequence')", "'no_such_sequence'", false, plan.Literals},
		{"SELECT snowflake.currval('no_such_sequence')", "'no_such_sequence'", false, plan.Literals},
		{"SELECT snowflake.nextval(), 'abc'::int", "'abc'", true, plan.Literals},
		{"SELECT 'é€', snowflake.nextval(), 'abc'::int", "'abc'", true, plan.Literals},
		{"SELECT snowflake.nextval() + $1, 'abc'::int", "'abc'", true, plan.Params},
		{"SELECT snowflake.nextval('no_such_sequence')", "'no_such_sequence'", false, plan.Params},
		{"VALUES (snowflake.nextval(), 'x'), (snowflake.nextval(), 'abc'::int)", "'abc'", true, plan.Literals},
		{"VALUES (snowflake.nextval(), 'x'), (snowflake.nextval(), 'abc'::int)", "'abc'", true, plan.BoundParams},
		{"SELECT snowflake.nextval() + $1, snowflake.currval(), 'abc'::int", "'abc'", true, plan.BoundParams},
	} {
		p := r.Plan(c.sql)
		if p.Template == nil {
			t.Fatalf("%q: no template", c.sql)
		}
		vals := make([]plan.Value, len(p.Template.Slots))
		for i := range vals {
			vals[i] = plan.Value{ID: 514686790318190594, Valid: c.valid}
		}
		base := 0
		if c.render != plan.Literals {
			base = p.MaxParam
		}
		rendered := string(p.Template.Render(nil, c.render, base, vals))
		k := strings.Index(rendered, c.target)
		if k < 0 {
			t.Fatalf("%q: %q not in rendered %q", c.sql, c.target, rendered)
		}
		pos := utf8.RuneCountInString(rendered[:k]) + 1
		want := utf8.RuneCountInString(c.sql[:strings.Index(c.sql, c.target)]) + 1
		if got := p.Template.SourcePos(pos, vals, base, c.render); got != want {
			t.Errorf("%q rendered %q: position %d maps to %d, want %d", c.sql, rendered, pos, got, want)
		}
	}
}

// A template rendered for a statement that always binds its IDs has the
// parameters alone, numbered as Params numbers them: no fallback call of
// the shim that the server would set up for every execution.
func TestBoundParamsHaveNoFallback(t *testing.T) {
	p := New(Config{}).Plan("SELECT snowflake.nextval(), $1, snowflake.currval(), snowflake.nextval('s')")
	vals := make([]plan.Value, len(p.Template.Slots))
	bound := string(p.Template.Render(nil, plan.BoundParams, p.MaxParam, vals))
	if want := "SELECT $2::int8 AS nextval, $1, " + plan.CurrvalFunc + "('snowflake.id_seq', $3::int8) AS currval, $4::int8 AS nextval"; bound != want {
		t.Errorf("BoundParams: %q, want %q", bound, want)
	}
	params := string(p.Template.Render(nil, plan.Params, p.MaxParam, vals))
	if !strings.Contains(params, "COALESCE($2::int8, "+plan.NextvalFunc+"(") || !strings.Contains(params, "COALESCE($4::int8, ") {
		t.Errorf("Params: %q, want the fallback of both Nextval slots", params)
	}
}

// A position inside a replaced call that is not its argument maps to the
// start of the call, where the server would point for the original text.
func TestSourcePosInsideAReplacedCall(t *testing.T) {
	p := New(Config{}).Plan("SELECT 1, snowflake.nextval()")
	vals := []plan.Value{{ID: 514686790318190594, Valid: true}}
	rendered := string(p.Template.RenderLiteral(nil, vals))
	pos := strings.Index(rendered, "::int8") + 1
	if got, want := p.Template.SourcePos(pos, vals, 0, plan.Literals), strings.Index("SELECT 1, snowflake.nextval()", "snowflake")+1; got != want {
		t.Fatalf("got %d, want %d (rendered %q)", got, want, rendered)
	}
	if got := p.Template.SourcePos(len(rendered)+5, vals, 0, plan.Literals); got != 0 {
		t.Fatalf("past the end: got %d, want 0", got)
	}
}
