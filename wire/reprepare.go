package wire

import (
	"slices"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// Prepared INSERTs whose defaults changed. PostgreSQL re-analyses a
// prepared statement after DDL on its table, so a prepared INSERT picks up
// a changed column default. The proxy sent the server a text in which the
// snowflake columns are explicit parameters; after the defaults it was built
// with may have changed (mirror.gen moved: DDL through this session, or a
// new catalog epoch), the next Bind of a named statement rebuilds the
// template and, when the text differs, prepares the statement again under
// the same name before the Bind: Close and Parse whose responses the server
// pump swallows (owedHiddenClose, owedHiddenParse). This is done only at a
// safe point, where nothing the client sent before can make the server skip
// these messages; elsewhere the statement keeps its template until the next
// Bind at a safe point. Unnamed statements are parsed again by the clients
// themselves.

// revalidate re-prepares the named statement of rec when its template is
// stale (see above). On a loop thread it returns errHandover first, before
// anything changed: the new template may need a hidden query.
func (p *clientPump) revalidate(name []byte, rec *stmtRec) error {
	if len(name) == 0 || p.cfg.Snowflakes == nil {
		return nil
	}
	safe, status := p.state()
	p.checkEpoch()
	if rec.gen == p.mirror.gen || !safe || status == 'E' {
		return nil
	}
	if p.onLoop() {
		return errHandover
	}
	t, shim, err := p.insertTemplate(rec.pl, true)
	if err != nil {
		return err
	}
	rec.gen = p.mirror.gen
	// Regression: the flag stayed as at Parse (catalog watch not armed
	// yet), and every execution fenced the generator for the life of the
	// session (TestPreparedInsertFromBeforeTheCatalogWatchStopsFencing).
	rec.shimDefaults = shim
	if t == nil {
		// Without any slot the client's text is the statement.
		t = &plan.Template{Parts: []string{rec.pl.Inserts.SQL}}
	}
	if sameTemplate(t, rec.t) || (rec.t == nil && len(t.Slots) == 0) {
		return nil
	}
	rec.setTemplate(t)
	rec.unconfirmFallback()
	if !rec.bound && rec.ids > 0 && p.bindsBound() {
		// Parsed before the session knew its server (fallbackstmt.go).
		rec.bound, rec.fbTypes = true, rec.types
	}
	// Close of the statement, then Parse under the same name.
	p.out = pgmsg.AppendClose(p.out[:0], 'S', name)
	p.push(owed{kind: owedHiddenClose})
	if _, err := p.sw.Write(p.out); err != nil {
		return err
	}
	p.vals = p.vals[:0]
	p.out = p.appendParse(p.out[:0], name, rec, rec.types, rec.rendering())
	p.push(owed{kind: owedHiddenParse})
	_, err = p.sw.Write(p.out)
	return err
}

// sameTemplate reports whether a and b render the same text.
func sameTemplate(a, b *plan.Template) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil {
		return false
	}
	return slices.Equal(a.Parts, b.Parts) && slices.EqualFunc(a.Slots, b.Slots, func(x, y plan.Slot) bool {
		return x.Op == y.Op && x.Seq == y.Seq && x.Arg == y.Arg && x.Default == y.Default && x.Ext == y.Ext
	})
}
