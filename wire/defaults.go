package wire

import (
	"strconv"

	"github.com/snowflake-proxy/snowflake-proxy/compat/catalog"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

// Column defaults on the fast path (docs/architecture.md).
//
// A plan with Inserts names the target relations of its INSERT ... VALUES
// statements. The session learns, with a hidden query at a safe point, which
// columns of each target default to a plain snowflake.nextval(<sequence>)
// call (relInfo), and builds the template with one Nextval slot per omitted
// or DEFAULT item of such a column (plan.Inserts.Template). The values then
// come from the generator like those of explicit calls (ids.go), so the
// same checks apply: node, transaction state, shim, and USAGE or UPDATE on
// the default's sequence (seqInfo).
//
// What the session knows is valid for its search_path, role and the
// catalog. It is dropped (mirror.dropRels) on any statement of this session
// that may change them (plan.TouchSearchPath, TouchRole, TouchCatalog,
// TouchAll) and whenever Snowflakes.CatalogEpoch of the database moves:
// DDL made elsewhere. An epoch of 0 means that DDL made elsewhere cannot be
// seen (no event trigger in that database); defaults are then left to the
// server altogether, because a cache that cannot be invalidated could keep
// filling a column whose default was changed.

// relInfo is what the session knows about one INSERT target name.
type relInfo struct {
	// defs are the snowflake defaults in position order; nil when the name
	// does not resolve to a table or the table has none.
	defs []plan.ColumnDefault
	// skip: learned inside a REPEATABLE READ or SERIALIZABLE transaction,
	// whose snapshot may predate DDL the INSERT itself would see. Not used,
	// forgotten when the transaction ends.
	skip bool
}

// maxTemplates bounds the per-session cache of built INSERT templates.
const maxTemplates = 512

// dropRels forgets every relation and template the session knows.
func (m *mirror) dropRels() {
	clear(m.rels)
	clear(m.tmpls)
	m.relsTx = false
	m.gen++
}

// checkEpoch drops what DDL or role changes made elsewhere may have made
// stale: relation defaults and sequence resolutions. It returns the
// catalog epoch.
func (p *clientPump) checkEpoch() uint64 {
	m := &p.mirror
	e, pe := p.cfg.Snowflakes.CatalogEpochs(p.db)
	if e != m.relEpoch || pe != m.privEpoch {
		m.dropRels()
		clear(m.seqs)
		m.relEpoch, m.privEpoch = e, pe
	}
	return e
}

// awaitBlocks waits, once after the session's own DDL has committed, for
// the per-row blocks that no event trigger made with it
// (Snowflakes.AwaitBlocks), before a statement that may evaluate snowflake
// column defaults in the server (INSERT, COPY FROM, EXECUTE, a DO block):
// planned without them, it would run every row in the shim's slow path.
// Where the catalog epoch is not 0 the event triggers made them with the
// DDL. On a loop thread it returns errHandover, before anything changed.
func (p *clientPump) awaitBlocks(pl *plan.Plan) error {
	m := &p.mirror
	if !m.blocksDue || p.cfg.Snowflakes == nil || (pl.Inserts == nil && pl.Touches&plan.TouchShim == 0) {
		return nil
	}
	safe, status := p.state()
	if !safe || status != 'I' {
		return nil // the DDL may not have committed yet
	}
	if e, _ := p.cfg.Snowflakes.CatalogEpochs(p.db); e != 0 {
		m.blocksDue = false
		return nil
	}
	if p.onLoop() {
		return errHandover
	}
	m.blocksDue = false
	netloop.MayWait("AwaitBlocks")
	p.cfg.Snowflakes.AwaitBlocks(p.db)
	return nil
}

// insertTemplate returns the template to send for pl: pl.Template, or the
// one built from pl.Inserts with the targets' snowflake defaults when the
// session knows them. hiddenOK says whether a hidden query may run now to
// learn about unknown targets.
//
// shim, when not 0, says that the server may fill snowflake defaults of pl
// in its shim because the session does not know every target, and why
// (ids.go fences after such statements; Stats.Fallbacks counts them). It
// goes with the template: whoever keeps one keeps both.
//
// On a loop thread err is errHandover, before any record changed, when a
// hidden query would have to run.
func (p *clientPump) insertTemplate(pl *plan.Plan, hiddenOK bool) (t *plan.Template, shim Fallback, err error) {
	if pl.Inserts == nil {
		return pl.Template, 0, nil
	}
	if p.cfg.Snowflakes == nil {
		return pl.Template, FallbackDisabled, nil
	}
	safe, status := p.state()
	m := &p.mirror
	if m.relsTx && status == 'I' {
		m.dropRels()
	}
	if status == 'E' {
		return pl.Template, FallbackFailedTransaction, nil
	}
	if p.checkEpoch() == 0 {
		return pl.Template, FallbackCatalogUnwatched, nil
	}
	if cached, ok := m.tmpls[pl]; ok {
		return cached, 0, nil
	}
	targets := pl.Inserts.Targets
	var missing []string
	for i := range targets {
		if _, ok := m.rels[targets[i].Rel]; !ok && !contains(missing, targets[i].Rel) {
			missing = append(missing, targets[i].Rel)
		}
	}
	if len(missing) > 0 && safe && hiddenOK {
		if p.onLoop() {
			return nil, 0, errHandover // a hidden query waits for the server
		}
		p.refresh(nil, missing)
		if status == 'T' && m.isolation != "read committed" {
			for _, name := range missing {
				if info, ok := m.rels[name]; ok {
					info.skip = true
					m.rels[name] = info
					m.relsTx = true
				}
			}
		}
	}
	defs := make([][]plan.ColumnDefault, len(targets))
	for i := range targets {
		info, ok := m.rels[targets[i].Rel]
		switch {
		case !ok:
			shim = FallbackStateUnknown
			continue
		case info.skip:
			if shim == 0 {
				shim = FallbackRepeatableRead
			}
			continue
		}
		defs[i] = info.defs
	}
	t = pl.Inserts.Template(defs)
	if t == nil {
		t = pl.Template
	}
	if shim == 0 {
		if m.tmpls == nil || len(m.tmpls) >= maxTemplates {
			m.tmpls = map[*plan.Plan]*plan.Template{}
		}
		m.tmpls[pl] = t
	}
	return t, shim, nil
}

// applyRel records what the hidden query says of target name, and the
// resolution of each default's sequence for ids.go.
func (m *mirror) applyRel(name string, t catalog.TargetState) {
	if m.rels == nil {
		m.rels = map[string]relInfo{}
	}
	var info relInfo
	for _, c := range t.Defaults {
		info.defs = append(info.defs, plan.ColumnDefault{
			Name: c.Name, Quoted: c.Quoted, Position: c.Position, Seq: c.Seq,
			Insertable: c.Insertable, AllInsertable: t.AllInsertable, Int8: c.Int8,
			// The fallback call names the sequence by OID: exactly the default's.
			Arg: "'" + strconv.FormatUint(uint64(c.SeqOID), 10) + "'::pg_catalog.regclass",
		})
		if m.seqs == nil {
			m.seqs = map[string]seqInfo{}
		}
		m.seqs[c.Seq] = seqInfo{oid: c.SeqOID, usable: c.SeqUsable, inc: c.Increment}
	}
	m.rels[name] = info
}
