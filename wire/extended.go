package wire

import (
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// stmtRec is the proxy's record of a prepared statement whose plan matters
// (portals share the record of their statement).
type stmtRec struct {
	pl   *plan.Plan
	t    *plan.Template // what was sent: pl.Template or an INSERT template (defaults.go)
	base int            // parameters of the client's statement
	ids  int            // parameters the proxy appends, one per ID slot
	// For a named statement with INSERT targets: the mirror generation its
	// template was built at, and the client's parameter types, to prepare
	// it again when the defaults change (reprepare.go).
	gen   uint64
	types []byte
	// shimDefaults, when not 0: snowflake defaults of the INSERT may run
	// in the server's shim (targets unknown when the template was
	// chosen), and why.
	shimDefaults Fallback
	// copy: the statement is a COPY FROM STDIN sent with columns added,
	// whose rows the pump completes when it runs (copyin.go).
	copy *copySpec
	// parsed: the server confirmed the Parse of this record with
	// ParseComplete. Shared state, touched only under shared.mu: the
	// server pump sets it through the Parse's owed entry.
	parsed parseConfirm
	// bound: the template renders without the shim's fallback calls
	// (plan.BoundParams): every execution binds a value to each Nextval
	// slot (a statement the proxy prepared, simpleprep.go), or one that
	// leaves a slot to the server binds to the fallback statement fb,
	// prepared with fbTypes, the client's parameter types
	// (fallbackstmt.go).
	bound   bool
	fb      *fallbackStmt
	fbTypes []byte
	// unsettled: the record is a change the server has not answered yet
	// (namedparse.go).
	unsettled bool
}

// rendering is how the record's template is rendered in its Parse.
func (rec *stmtRec) rendering() plan.Rendering {
	if rec.bound {
		return plan.BoundParams
	}
	return plan.Params
}

func (p *clientPump) portal(name []byte) *stmtRec {
	if len(name) == 0 {
		return p.unnamedPortal
	}
	return p.portals[string(name)]
}

// parse handles Parse: statements with slots are rendered with parameters
// $base+1... for the ID slots, typed int8.
func (p *clientPump) parse() error {
	body, err := p.cr.body()
	if err != nil {
		return err
	}
	msg, ok := pgmsg.ReadParse(body)
	if !ok {
		p.push(owed{kind: owedParse})
		return p.cr.pass(p.sw) // the server reports the malformed message
	}
	name, query := msg.Name, msg.Query
	pl := p.plan(query)
	if err := p.awaitBlocks(pl); err != nil {
		return p.handOver(query, pl, err)
	}
	if pl.Copy != nil && len(name) == 0 {
		if done, err := p.parseCopy(pl, msg); done || err != nil {
			return p.handOver(query, pl, err)
		}
	}
	var rec *stmtRec
	if pl != plan.Passthrough {
		// A hidden query may run now while the session is still at a safe
		// point (the Bind that follows will not be).
		hiddenOK := true // hidden queries leave unnamed statements and portals alone
		t, shim, err := p.insertTemplate(pl, hiddenOK)
		if err != nil {
			return p.handOver(query, pl, err)
		}
		rec = &stmtRec{pl: pl, base: max(pl.MaxParam, msg.NumTypes())}
		rec.setTemplate(t)
		rec.shimDefaults = shim
		rec.gen = p.mirror.gen
		if pl.Inserts != nil && len(name) > 0 {
			// Non-nil even without types: it marks the record for revalidate.
			rec.types = append(make([]byte, 0, len(msg.Types())), msg.Types()...)
		}
	}
	ok = true
	if rec != nil && rec.t != nil {
		// Extension SQL, and a chance to refresh the mirror while the
		// session is still at a safe point (the Bind that follows will not
		// be).
		if _, ok, err = p.values(rec.t, true, false, false); err != nil {
			return p.handOver(query, pl, err)
		}
	}
	// The Parse is handled here for good: record it.
	var confirm *parseConfirm
	if len(name) == 0 {
		confirm = p.recordUnnamed(rec)
		p.stmtLive = true
	} else {
		confirm = p.recordNamed(string(name), rec, nil)
	}
	if rec == nil || rec.t == nil {
		p.push(owed{kind: owedParse, confirm: confirm})
		return p.cr.pass(p.sw)
	}
	if !ok {
		rec.t, rec.ids, rec.types = nil, 0, nil
		rec.pl = &plan.Plan{Statements: pl.Statements, Touches: pl.Touches}
		p.push(owed{kind: owedParse, confirm: confirm})
		return p.cr.pass(p.sw)
	}
	if rec.ids > 0 && p.bindsBound() {
		rec.bound = true
		rec.fbTypes = rec.types
		if rec.fbTypes == nil && len(msg.Types()) > 0 {
			rec.fbTypes = append([]byte(nil), msg.Types()...)
		}
	}
	p.out = p.appendParse(p.out[:0], name, rec, msg.Types(), rec.rendering())
	p.cr.consume()
	p.push(owed{kind: owedParse, pos: newPosMap(rec.t, p.vals, rec.base, rec.rendering()), confirm: confirm})
	_, err = p.sw.Write(p.out)
	return err
}

// setTemplate makes t the statement's template; one whose parameters would
// not fit in a Parse message is replaced by the plan's own.
func (rec *stmtRec) setTemplate(t *plan.Template) {
	if t != nil && t != rec.pl.Template && rec.base+t.IDSlots() > plan.MaxParams {
		t = rec.pl.Template
	}
	rec.t, rec.ids = t, 0
	if t != nil {
		rec.ids = t.IDSlots()
	}
}

// appendParse appends a Parse of the statement's template rendered as r:
// the client's parameter types (4 bytes each), unspecified types up to
// base, then int8 for each injected parameter.
func (p *clientPump) appendParse(dst, name []byte, rec *stmtRec, types []byte, r plan.Rendering) []byte {
	dst, start := pgmsg.BeginParse(dst, name)
	dst = rec.t.Render(dst, r, rec.base, p.vals)
	dst = pgmsg.EndParseText(dst, rec.base+rec.ids)
	dst = append(dst, types...)
	for i := len(types) / 4; i < rec.base; i++ {
		dst = pgmsg.AppendInt32(dst, 0)
	}
	for i := 0; i < rec.ids; i++ {
		dst = pgmsg.AppendInt32(dst, int8OID)
	}
	return pgmsg.Finish(dst, start)
}

// bind handles Bind: for a statement with ID slots, one value per slot is
// appended, generated now (every Execute of the portal's statement gets
// fresh IDs), in the format the client's format codes imply.
func (p *clientPump) bind() error {
	body, err := p.cr.body()
	if err != nil {
		return err
	}
	portal, stmt, named := pgmsg.BindNames(body)
	var rec *stmtRec
	if named {
		if rec, err = p.answered(stmt); err != nil {
			return err
		}
	}
	p.idleSeen = false
	// What may wait comes first: on a loop thread it returns errHandover
	// before the Bind changed anything.
	if rec != nil && rec.types != nil && !rec.unsettled {
		// Not while its Parse is unanswered (namedparse.go): the server
		// may answer it before the safe point revalidate looks for, and
		// the name may keep the statement it held.
		if err := p.revalidate(stmt, rec); err != nil {
			return err
		}
	}
	// Only a Bind that gets IDs is read whole.
	var msg pgmsg.Bind
	wellFormed := false
	allValid := false
	if rec != nil && rec.ids != 0 {
		msg, wellFormed = pgmsg.ReadBind(body)
		if wellFormed {
			if allValid, _, err = p.values(rec.t, true, true, false); err != nil {
				return err
			}
		}
	}
	// The Bind is handled here for good. Its portal is live unless a
	// state() above found the safe point in 'I' that ends it (as when the
	// record came first: portal records predate the checks).
	if named {
		p.setPortal(portal, rec, !p.idleSeen)
	}
	if rec == nil || rec.ids == 0 {
		if rec != nil {
			p.srv.countFallback(p.executionFallback(rec.shimDefaults, false, rec.pl))
		}
		p.push(owed{kind: owedBind})
		return p.cr.pass(p.sw)
	}
	if !wellFormed {
		p.push(owed{kind: owedBind})
		return p.cr.pass(p.sw) // the server reports the malformed message
	}
	left := p.noteShimSlots(rec.t)
	p.srv.countFallback(p.executionFallback(rec.shimDefaults, left, rec.pl))
	if allValid && rec.pl.Local != nil && len(portal) == 0 {
		if done, err := p.bindLocally(rec, msg); done || err != nil {
			return err
		}
	}
	p.out = p.out[:0]
	var fbConfirm *parseConfirm
	if left && rec.bound && !p.abortedNow() {
		msg.Statement, fbConfirm = p.appendFallbackPrep(rec)
	}
	var start int
	p.out, start = msg.AppendWithParams(p.out, rec.ids)
	p.out = appendIDParams(p.out, rec.t, p.vals, msg.AppendedParamsBinary())
	p.out = msg.FinishWithParams(p.out, start)
	p.cr.consume()
	p.push(owed{kind: owedBind, confirm: fbConfirm})
	_, err = p.sw.Write(p.out)
	return err
}

func (p *clientPump) setPortal(name []byte, rec *stmtRec, live bool) {
	if len(name) == 0 {
		p.unnamedPortal, p.portalLive = rec, live
	} else if rec != nil {
		if p.portals == nil {
			p.portals = map[string]*stmtRec{}
		}
		p.portals[string(name)] = rec
	} else if p.portals != nil {
		delete(p.portals, string(name))
	}
}

// appendIDParams appends Bind parameter values for the ID slots of t, in
// slot order: NULL for a value the proxy has not (the server's shim then
// issues it), else int8 in binary or text.
func appendIDParams(dst []byte, t *plan.Template, vals []plan.Value, bin bool) []byte {
	for i, s := range t.Slots {
		if !s.Op.IsID() {
			continue
		}
		if v := vals[i]; v.Valid {
			dst = pgmsg.AppendInt64Param(dst, v.ID, bin)
		} else {
			dst = pgmsg.AppendNullParam(dst)
		}
	}
	return dst
}

// describe handles Describe: for a statement with injected parameters the
// server pump strips them from the ParameterDescription.
func (p *clientPump) describe() error {
	body, err := p.cr.body()
	if err != nil {
		return err
	}
	o := owed{kind: owedDescribePortal}
	if msg, ok := pgmsg.ReadDescribe(body); ok && msg.Kind == 'S' {
		o.kind = owedDescribeStmt
		rec, err := p.answered(msg.Name)
		if err != nil {
			return err
		}
		if rec != nil {
			o.strip = rec.ids
		}
	}
	p.push(o)
	return p.cr.pass(p.sw)
}

// execute handles Execute: the command tag may be renamed, and the
// statement's effects apply.
func (p *clientPump) execute() error {
	body, err := p.cr.body()
	if err != nil {
		return err
	}
	o := owed{kind: owedExecute}
	if msg, ok := pgmsg.ReadExecute(body); ok {
		if rec := p.portal(msg.Portal); rec != nil && rec.copy != nil {
			o.stmts, o.copyCols = rec.pl.Statements, rec.copy.opts.Extra
			p.copyEffects(rec.pl)
			p.startCopy(rec.copy)
		} else if rec != nil {
			o.stmts = rec.pl.Statements
			confirms := dropConfirms(rec.pl)
			if confirms != nil {
				o.confirm = confirms[0] // one statement
			}
			p.effects(rec.pl, confirms)
			if rec.shimDefaults != 0 {
				p.markShim()
			}
		}
	}
	p.push(o)
	return p.cr.pass(p.sw)
}

// closeMsg handles Close of a statement or portal: its record goes once
// the server has run the Close (namedparse.go).
func (p *clientPump) closeMsg() error {
	body, err := p.cr.body()
	if err != nil {
		return err
	}
	o := owed{kind: owedClose}
	if msg, ok := pgmsg.ReadClose(body); ok {
		switch msg.Kind {
		case 'S':
			if len(msg.Name) == 0 {
				o.confirm = p.closeUnnamed()
			} else {
				o.confirm = p.recordNamed(string(msg.Name), nil, nil)
				p.fallbacksDropped(msg.Name, false)
			}
		case 'P':
			p.setPortal(msg.Name, nil, false)
		}
	}
	p.push(o)
	return p.cr.pass(p.sw)
}
