package wire

import (
	"encoding/json"
	"strconv"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// Column defaults on the fast path (DESIGN.md, "INSERT defaults").
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

// checkEpoch drops what DDL made elsewhere may have made stale: relation
// defaults and sequence resolutions.
func (p *clientPump) checkEpoch() uint64 {
	m := &p.mirror
	e := p.cfg.Snowflakes.CatalogEpoch(p.db)
	if e != m.relEpoch {
		m.dropRels()
		clear(m.seqs)
		m.relEpoch = e
	}
	return e
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

// relColumn is the hidden query's column for one target name: NULL unless
// the name resolves to a table or partitioned table (the target's own
// defaults apply to an INSERT into a partitioned table), else a JSON object
// {"t": INSERT on the whole table, "c": [column, ...] or null} where each
// column whose default is exactly a call of snowflake.nextval(regclass)
// with no argument or a regclass constant is [attname, quoted attname,
// position, sequence OID, sequence name, USAGE or UPDATE on it, INSERT on
// the column, the sequence's INCREMENT].
//
// The default's shape is read from the stored node tree (adbin), whose
// text form has been stable across PostgreSQL releases; a cast, a domain,
// a dynamic argument or any other expression does not match and stays with
// the server. The sequence is the default's regclass constant, found
// through pg_depend (a constant records a dependency on its relation), or
// for a call without argument the function's own default (pg_depend of the
// function). The regular expressions hold no backslash or quote, so the
// text is valid whatever standard_conforming_strings says.
const (
	relColumnHead = ", (SELECT pg_catalog.json_build_object('t', pg_catalog.has_table_privilege(c.oid, 'INSERT'), 'c', " +
		"(SELECT pg_catalog.json_agg(pg_catalog.json_build_array(a.attname, pg_catalog.quote_ident(a.attname), " +
		"(SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute b WHERE b.attrelid = a.attrelid AND b.attnum > 0 AND b.attnum < a.attnum AND NOT b.attisdropped), " +
		"s.oid::pg_catalog.int8, pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(s.relname), " +
		"pg_catalog.has_sequence_privilege(s.oid, 'USAGE') OR pg_catalog.has_sequence_privilege(s.oid, 'UPDATE'), " +
		"pg_catalog.has_column_privilege(a.attrelid, a.attnum, 'INSERT'), " +
		"(SELECT q.seqincrement FROM pg_catalog.pg_sequence q WHERE q.seqrelid = s.oid)) ORDER BY a.attnum) " +
		"FROM pg_catalog.pg_attrdef d " +
		"JOIN pg_catalog.pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum AND NOT a.attisdropped AND a.attgenerated = '' " +
		"JOIN pg_catalog.pg_proc f ON f.oid = pg_catalog.to_regprocedure('snowflake.nextval(pg_catalog.regclass)') AND pg_catalog.has_function_privilege(f.oid, 'EXECUTE') " +
		"JOIN pg_catalog.pg_class s ON s.relkind = 'S' AND s.oid = CASE " +
		"WHEN d.adbin::text OPERATOR(pg_catalog.~) ('^[{]FUNCEXPR :funcid ' OPERATOR(pg_catalog.||) f.oid OPERATOR(pg_catalog.||) ' [^{}]* :args <> :location -?[0-9]+[}]$') " +
		"THEN (SELECT dp.refobjid FROM pg_catalog.pg_depend dp WHERE dp.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND dp.objid = f.oid " +
		"AND dp.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass LIMIT 1) " +
		"WHEN d.adbin::text OPERATOR(pg_catalog.~) ('^[{]FUNCEXPR :funcid ' OPERATOR(pg_catalog.||) f.oid OPERATOR(pg_catalog.||) " +
		"' [^{}]* :args [(][{]CONST :consttype 2205 [^{}]* :constisnull false [^{}]*[}][)] :location -?[0-9]+[}]$') " +
		"THEN (SELECT dp.refobjid FROM pg_catalog.pg_depend dp WHERE dp.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass AND dp.objid = d.oid " +
		"AND dp.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND dp.refobjid <> d.adrelid LIMIT 1) END " +
		"JOIN pg_catalog.pg_namespace n ON n.oid = s.relnamespace " +
		"WHERE d.adrelid = c.oid)) " +
		"FROM pg_catalog.pg_class c WHERE c.relkind IN ('r', 'p') AND c.oid = pg_catalog.to_regclass("
	relColumnTail = "))"
)

// appendRelColumn appends the hidden query's column for target name.
func appendRelColumn(dst []byte, name string) []byte {
	dst = append(dst, relColumnHead...)
	dst = appendLiteral(dst, name)
	return append(dst, relColumnTail...)
}

// applyRel records the hidden query's answer for target name (nil: SQL
// NULL), and the resolution of each default's sequence for ids.go. It
// reports false for an answer it cannot read.
func (m *mirror) applyRel(name string, v *string) bool {
	if m.rels == nil {
		m.rels = map[string]relInfo{}
	}
	if v == nil {
		m.rels[name] = relInfo{}
		return true
	}
	var r struct {
		T bool                `json:"t"`
		C [][]json.RawMessage `json:"c"`
	}
	if err := json.Unmarshal([]byte(*v), &r); err != nil {
		return false
	}
	var info relInfo
	for _, c := range r.C {
		var d plan.ColumnDefault
		var oid uint32
		var usable bool
		var inc int64
		if len(c) != 8 || json.Unmarshal(c[0], &d.Name) != nil || json.Unmarshal(c[1], &d.Quoted) != nil ||
			json.Unmarshal(c[2], &d.Position) != nil || json.Unmarshal(c[3], &oid) != nil ||
			json.Unmarshal(c[4], &d.Seq) != nil || json.Unmarshal(c[5], &usable) != nil ||
			json.Unmarshal(c[6], &d.Insertable) != nil || json.Unmarshal(c[7], &inc) != nil {
			return false
		}
		d.AllInsertable = r.T
		// The fallback call names the sequence by OID: exactly the default's.
		d.Arg = "'" + strconv.FormatUint(uint64(oid), 10) + "'::pg_catalog.regclass"
		info.defs = append(info.defs, d)
		if m.seqs == nil {
			m.seqs = map[string]seqInfo{}
		}
		m.seqs[d.Seq] = seqInfo{oid: oid, usable: usable, inc: inc}
	}
	m.rels[name] = info
	return true
}
