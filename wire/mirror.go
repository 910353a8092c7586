package wire

import (
	"strconv"
	"strings"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// mirror is the client pump's copy of the server session state the fast
// path depends on. The server session is the source of truth: the mirror is
// filled by hidden queries at safe points and dropped whenever a statement,
// a ParameterStatus or a transaction end may have changed that state.
type mirror struct {
	fresh    bool // node, readOnly, role and shim are known
	node     int
	readOnly bool
	role     string
	shim     bool
	// pid is pg_backend_pid() at the last refresh: the server process
	// that answered, which behind a pooler is not the one the session's
	// BackendKeyData names, and changes between transactions.
	pid     uint32
	seqs    map[string]seqInfo // regclass text -> resolution, per search_path and role
	currval map[uint32]int64   // the latest fast-path value per sequence OID
	// reqs is values' scratch (ids.go): the fast-path IDs of one
	// execution, kept so that issuing them allocates nothing.
	reqs []generator.Request

	// INSERT targets (defaults.go).
	isolation string                        // transaction_isolation at the last refresh
	rels      map[string]relInfo            // target regclass text -> its snowflake defaults
	tmpls     map[*plan.Plan]*plan.Template // built INSERT templates, valid while rels is
	relEpoch  uint64                        // Snowflakes.CatalogEpoch when rels was started
	relsTx    bool                          // rels has skip entries of the current transaction
	gen       uint64                        // counts dropRels: prepared INSERTs compare it
}

// seqInfo is how a sequence name resolves in the session.
type seqInfo struct {
	oid    uint32 // 0: not a sequence
	usable bool   // a sequence the current role may use (USAGE or UPDATE)
	// inc is pg_sequence.seqincrement as the session sees it, its own
	// uncommitted ALTER SEQUENCE included: the extension reads it on every
	// call. The statements that may change it touch the catalog, which
	// drops the entry.
	inc int64
}

// invalidate drops what the touches may have changed.
func (m *mirror) invalidate(t plan.Touch) {
	if t&touchSettings != 0 {
		m.fresh = false
	}
	if t&(plan.TouchSearchPath|plan.TouchRole|plan.TouchCatalog|plan.TouchAll) != 0 {
		clear(m.seqs)
		m.dropRels()
	}
}

// hiddenQuery is the result of a hidden query, filled by the server pump.
type hiddenQuery struct {
	row  []*string // nil entries are SQL NULL
	rows int
	err  error
	fail string // SQLSTATE of an ErrorResponse, if any
}

// Columns of the hidden mirror query before the per-sequence ones.
const (
	hqNode = iota
	hqReadOnly
	hqRole
	hqShim
	hqIsolation
	hqPID
	hqFixed
)

// seqCols are the columns of the hidden query per sequence name.
var seqCols = [...]string{"c.oid", "c.relkind",
	"CASE WHEN c.relkind = 'S' THEN pg_catalog.has_sequence_privilege(c.oid, 'USAGE') OR pg_catalog.has_sequence_privilege(c.oid, 'UPDATE') END",
	"(SELECT s.seqincrement FROM pg_catalog.pg_sequence s WHERE s.seqrelid = c.oid)"}

// mirrorSQL builds the hidden query: the settings, then four columns per
// sequence name (oid, relkind, privilege, increment), then one per INSERT
// target name
// (defaults.go). Every function is qualified with pg_catalog so the
// client's search_path cannot redirect it, and nothing in it can raise for
// names the rewriter validated.
func mirrorSQL(dst []byte, names, rels []string) []byte {
	dst = append(dst, "SELECT pg_catalog.current_setting('snowflake.node', true), "+
		"pg_catalog.current_setting('transaction_read_only'), current_user, "+
		"EXISTS (SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "+
		"WHERE n.nspname = 'snowflake' AND p.proname = '_currval'), "+
		"pg_catalog.current_setting('transaction_isolation'), pg_catalog.pg_backend_pid()"...)
	for _, name := range names {
		for _, col := range seqCols {
			dst = append(dst, ", (SELECT "+col+" FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass("...)
			dst = appendLiteral(dst, name)
			dst = append(dst, "))"...)
		}
	}
	for _, name := range rels {
		dst = appendRelColumn(dst, name)
	}
	return dst
}

// appendLiteral quotes s as a string literal valid whatever
// standard_conforming_strings says.
func appendLiteral(dst []byte, s string) []byte {
	if strings.ContainsRune(s, '\\') {
		dst = append(dst, 'E')
	}
	dst = append(dst, '\'')
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\'':
			dst = append(dst, '\'', '\'')
		case '\\':
			dst = append(dst, '\\', '\\')
		default:
			dst = append(dst, s[i])
		}
	}
	return append(dst, '\'')
}

// apply reads the result of mirrorSQL(names, rels).
func (m *mirror) apply(row []*string, names, rels []string) bool {
	if len(row) != hqFixed+len(seqCols)*len(names)+len(rels) {
		return false
	}
	get := func(i int) string {
		if row[i] == nil {
			return ""
		}
		return *row[i]
	}
	m.node, _ = strconv.Atoi(get(hqNode))
	m.readOnly = get(hqReadOnly) != "off"
	m.role = get(hqRole)
	m.shim = get(hqShim) == "t"
	m.isolation = get(hqIsolation)
	pid, _ := strconv.ParseUint(get(hqPID), 10, 32)
	m.pid = uint32(pid)
	m.fresh = true
	if m.seqs == nil {
		m.seqs = map[string]seqInfo{}
	}
	for i, name := range names {
		c := hqFixed + len(seqCols)*i
		oid, _ := strconv.ParseUint(get(c), 10, 32)
		inc, err := strconv.ParseInt(get(c+3), 10, 64)
		if get(c+1) != "S" {
			oid = 0 // a relation, but no sequence: nothing to serve
		}
		m.seqs[name] = seqInfo{oid: uint32(oid), usable: oid != 0 && get(c+2) == "t" && err == nil, inc: inc}
	}
	for i, name := range rels {
		if !m.applyRel(name, row[hqFixed+len(seqCols)*len(names)+i]) {
			return false
		}
	}
	return true
}
