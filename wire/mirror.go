package wire

import (
	"errors"
	"fmt"

	"github.com/snowflake-proxy/snowflake-proxy/compat/catalog"
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
	// blocksDue: the session ran DDL since it last awaited the per-row
	// blocks (defaults.go).
	blocksDue bool
	// pid is pg_backend_pid() at the last refresh: the server process
	// that answered, which behind a pooler is not the one the session's
	// BackendKeyData names, and changes between transactions.
	pid     uint32
	seqs    map[string]seqInfo // regclass text -> resolution, per search_path and role
	currval map[uint32]int64   // the latest fast-path value per sequence OID
	// ticket is the session's latest fence (Snowflakes.FenceTicket), which
	// its fast-path requests carry: once a lease satisfies it, the check
	// costs nothing.
	ticket uint64
	// reqs is values' scratch (ids.go): the fast-path IDs of one
	// execution, kept so that issuing them allocates nothing.
	reqs []generator.Request

	// INSERT targets (defaults.go).
	isolation string                        // transaction_isolation at the last refresh
	rels      map[string]relInfo            // target regclass text -> its snowflake defaults
	tmpls     map[*plan.Plan]*plan.Template // built INSERT templates, valid while rels is
	relEpoch  uint64                        // Snowflakes.CatalogEpochs when rels was started
	privEpoch uint64                        // the privilege epoch (Snowflakes.CatalogEpochs) when rels and seqs were started
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
	if t&plan.TouchCatalog != 0 {
		m.blocksDue = true
	}
}

// hiddenQuery is the result of a hidden query, filled by the server pump.
type hiddenQuery struct {
	row  []*string // nil entries are SQL NULL
	rows int
	err  error
	fail string // SQLSTATE of an ErrorResponse, if any
}

// state decodes the hidden query's answer to q.
func (hq *hiddenQuery) state(q catalog.StateQuery) (catalog.SessionState, error) {
	switch {
	case hq.err != nil:
		return catalog.SessionState{}, hq.err
	case hq.fail != "":
		return catalog.SessionState{}, errors.New("the server refused it")
	case hq.rows != 1:
		return catalog.SessionState{}, fmt.Errorf("%d rows", hq.rows)
	}
	return q.Decode(hq.row)
}

// apply records the answer to the hidden query of names (sequence names)
// and rels (INSERT target names), decoded by package catalog.
func (m *mirror) apply(st catalog.SessionState, names, rels []string) {
	m.node = st.Node
	m.readOnly = st.ReadOnly
	m.role = st.Role
	m.shim = st.Shim
	m.isolation = st.Isolation
	m.pid = st.BackendPID
	m.fresh = true
	if m.seqs == nil {
		m.seqs = map[string]seqInfo{}
	}
	for i, name := range names {
		s := st.Sequences[i]
		m.seqs[name] = seqInfo{oid: s.OID, usable: s.Usable, inc: s.Increment}
	}
	for i, name := range rels {
		m.applyRel(name, st.Targets[i])
	}
}
