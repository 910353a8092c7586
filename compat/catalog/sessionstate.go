package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The catalog knowledge of a proxy session: what it must know of its server
// session before it may issue an ID itself (the node, the transaction's
// read-only state, the role, whether the shim is installed, how each
// sequence name the statement calls resolves), and which columns of an
// INSERT's targets default to a plain snowflake.nextval call. The session
// runs StateQuery's SQL on its own server connection at a safe point (the
// answer must be its session's: search_path, role, uncommitted DDL) and
// hands the row back to Decode; wire does the sending, this file knows the
// catalog.
//
// Every function in the query is qualified with pg_catalog so that the
// client's search_path cannot redirect it, its string literals are valid
// whatever standard_conforming_strings says, and nothing in it can raise
// for names the rewriter validated. Per-name answers are JSON objects
// decoded by key, so that a field added to one cannot shift the others.

// StateQuery asks for a session's state and the resolution of some names.
type StateQuery struct {
	// Sequences are regclass texts of sequence names the statement calls.
	Sequences []string
	// Targets are regclass texts of INSERT target relations.
	Targets []string
}

// SessionState is the answer to a StateQuery.
type SessionState struct {
	Node       int    // snowflake.node; 0 when unset or not a number
	ReadOnly   bool   // transaction_read_only is not off
	Role       string // current_user
	Shim       bool   // snowflake._currval exists: the shim is installed
	Isolation  string // transaction_isolation
	BackendPID uint32 // pg_backend_pid(): behind a pooler, not the BackendKeyData's
	Sequences  []SequenceState
	Targets    []TargetState
}

// SequenceState is how one sequence name resolves in the session.
type SequenceState struct {
	OID uint32 // 0: the name resolves to no sequence
	// Usable: a sequence the current role may use (USAGE or UPDATE).
	Usable bool
	// Increment is pg_sequence.seqincrement as the session sees it, its own
	// uncommitted ALTER SEQUENCE included: the extension reads it on every
	// call.
	Increment int64
}

// TargetState is what one INSERT target name resolves to.
type TargetState struct {
	// Table: the name resolves to a table or a partitioned table (whose own
	// defaults apply to an INSERT into it). Nothing else is filled by the
	// proxy.
	Table bool
	// AllInsertable: the role may INSERT into the whole table.
	AllInsertable bool
	// Defaults are the columns whose default is exactly a call of
	// snowflake.nextval(regclass), without argument or with a regclass
	// constant, in column order.
	Defaults []ColumnDefault
}

// ColumnDefault is one column with a snowflake default.
type ColumnDefault struct {
	Name       string // attname
	Quoted     string // quote_ident(attname)
	Position   int    // among the table's live columns, from 0
	SeqOID     uint32 // the default's sequence
	Seq        string // its schema-qualified, quoted name
	SeqUsable  bool   // USAGE or UPDATE on it
	Insertable bool   // INSERT on the column
	Increment  int64  // the sequence's INCREMENT
	// Int8: the column's type is bigint, whose binary COPY form the
	// proxy writes (wire/copyin.go).
	Int8 bool
}

// ErrStateRow is the error of a row that is not the answer to the query.
var ErrStateRow = errors.New("session state row")

// The query's leading columns, before one per sequence and one per target.
const (
	colNode = iota
	colReadOnly
	colRole
	colShim
	colIsolation
	colPID
	fixedCols
)

const stateHead = "SELECT pg_catalog.current_setting('snowflake.node', true), " +
	"pg_catalog.current_setting('transaction_read_only'), current_user, " +
	"EXISTS (SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace " +
	"WHERE n.nspname = 'snowflake' AND p.proname = '_currval'), " +
	"pg_catalog.current_setting('transaction_isolation'), pg_catalog.pg_backend_pid()"

// sequenceColumnHead is one sequence name's column: NULL when the name
// resolves to no relation, else {"oid", "kind": relkind, "usable",
// "increment"} (usable and increment null for a relation that is not a
// sequence).
const (
	sequenceColumnHead = ", (SELECT pg_catalog.json_build_object('oid', c.oid::pg_catalog.int8, 'kind', c.relkind, " +
		"'usable', CASE WHEN c.relkind = 'S' THEN pg_catalog.has_sequence_privilege(c.oid, 'USAGE') OR pg_catalog.has_sequence_privilege(c.oid, 'UPDATE') END, " +
		"'increment', (SELECT s.seqincrement FROM pg_catalog.pg_sequence s WHERE s.seqrelid = c.oid)) " +
		"FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass("
	sequenceColumnTail = "))"
)

// targetColumnHead is one target name's column: NULL unless the name
// resolves to a table or partitioned table, else {"insert": INSERT on the
// whole table, "columns": [{...}, ...] or null}, one object per column
// whose default is exactly a call of snowflake.nextval(regclass) with no
// argument or a regclass constant.
//
// The default's shape is read from the stored node tree (adbin), whose
// text form has been stable across PostgreSQL releases; a cast, a domain,
// a dynamic argument or any other expression does not match and stays with
// the server. The sequence is the default's regclass constant, found
// through pg_depend (a constant records a dependency on its relation), or
// for a call without argument the function's own default (pg_depend of the
// function). The regular expressions hold no backslash or quote.
const (
	targetColumnHead = ", (SELECT pg_catalog.json_build_object('insert', pg_catalog.has_table_privilege(c.oid, 'INSERT'), 'columns', " +
		"(SELECT pg_catalog.json_agg(pg_catalog.json_build_object('name', a.attname, 'quoted', pg_catalog.quote_ident(a.attname), " +
		"'position', (SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute b WHERE b.attrelid = a.attrelid AND b.attnum > 0 AND b.attnum < a.attnum AND NOT b.attisdropped), " +
		"'seq_oid', s.oid::pg_catalog.int8, 'seq', pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(s.relname), " +
		"'seq_usable', pg_catalog.has_sequence_privilege(s.oid, 'USAGE') OR pg_catalog.has_sequence_privilege(s.oid, 'UPDATE'), " +
		"'insertable', pg_catalog.has_column_privilege(a.attrelid, a.attnum, 'INSERT'), " +
		"'int8', a.atttypid = 'pg_catalog.int8'::pg_catalog.regtype, " +
		"'increment', (SELECT q.seqincrement FROM pg_catalog.pg_sequence q WHERE q.seqrelid = s.oid)) ORDER BY a.attnum) " +
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
	targetColumnTail = "))"
)

// AppendSQL appends the query's text to dst.
func (q StateQuery) AppendSQL(dst []byte) []byte {
	dst = append(dst, stateHead...)
	for _, name := range q.Sequences {
		dst = append(dst, sequenceColumnHead...)
		dst = AppendLiteral(dst, name)
		dst = append(dst, sequenceColumnTail...)
	}
	for _, name := range q.Targets {
		dst = append(dst, targetColumnHead...)
		dst = AppendLiteral(dst, name)
		dst = append(dst, targetColumnTail...)
	}
	return dst
}

// Columns is how many columns the query's row has.
func (q StateQuery) Columns() int { return fixedCols + len(q.Sequences) + len(q.Targets) }

// Decode reads the query's one row: the text of each column, nil for NULL.
func (q StateQuery) Decode(row []*string) (SessionState, error) {
	if len(row) != q.Columns() {
		return SessionState{}, fmt.Errorf("%w: %d columns, want %d", ErrStateRow, len(row), q.Columns())
	}
	text := func(i int) string {
		if row[i] == nil {
			return ""
		}
		return *row[i]
	}
	var st SessionState
	st.Node, _ = strconv.Atoi(text(colNode)) // unset or not a number: no node
	st.ReadOnly = text(colReadOnly) != "off"
	st.Role = text(colRole)
	st.Shim = text(colShim) == "t"
	st.Isolation = text(colIsolation)
	pid, err := strconv.ParseUint(text(colPID), 10, 32)
	if err != nil {
		return SessionState{}, fmt.Errorf("%w: backend pid %q", ErrStateRow, text(colPID))
	}
	st.BackendPID = uint32(pid)
	st.Sequences = make([]SequenceState, len(q.Sequences))
	for i := range q.Sequences {
		if st.Sequences[i], err = decodeSequence(row[fixedCols+i]); err != nil {
			return SessionState{}, fmt.Errorf("%w: sequence %s: %w", ErrStateRow, q.Sequences[i], err)
		}
	}
	st.Targets = make([]TargetState, len(q.Targets))
	for i := range q.Targets {
		if st.Targets[i], err = decodeTarget(row[fixedCols+len(q.Sequences)+i]); err != nil {
			return SessionState{}, fmt.Errorf("%w: target %s: %w", ErrStateRow, q.Targets[i], err)
		}
	}
	return st, nil
}

func decodeSequence(v *string) (SequenceState, error) {
	if v == nil {
		return SequenceState{}, nil // no relation of that name
	}
	var c struct {
		OID       *uint32 `json:"oid"`
		Kind      string  `json:"kind"`
		Usable    *bool   `json:"usable"`
		Increment *int64  `json:"increment"`
	}
	if err := json.Unmarshal([]byte(*v), &c); err != nil {
		return SequenceState{}, err
	}
	if c.OID == nil {
		return SequenceState{}, errors.New("no oid")
	}
	if c.Kind != "S" {
		return SequenceState{}, nil // a relation, but no sequence: nothing to serve
	}
	if c.Usable == nil || c.Increment == nil {
		return SequenceState{}, errors.New("a sequence without privilege or increment")
	}
	return SequenceState{OID: *c.OID, Usable: *c.Usable && *c.OID != 0, Increment: *c.Increment}, nil
}

func decodeTarget(v *string) (TargetState, error) {
	if v == nil {
		return TargetState{}, nil // not a table
	}
	var c struct {
		Insert  *bool `json:"insert"`
		Columns []struct {
			Name       *string `json:"name"`
			Quoted     *string `json:"quoted"`
			Position   *int    `json:"position"`
			SeqOID     *uint32 `json:"seq_oid"`
			Seq        *string `json:"seq"`
			SeqUsable  *bool   `json:"seq_usable"`
			Insertable *bool   `json:"insertable"`
			Increment  *int64  `json:"increment"`
			Int8       *bool   `json:"int8"`
		} `json:"columns"`
	}
	if err := json.Unmarshal([]byte(*v), &c); err != nil {
		return TargetState{}, err
	}
	if c.Insert == nil {
		return TargetState{}, errors.New("no table privilege")
	}
	t := TargetState{Table: true, AllInsertable: *c.Insert}
	for i, col := range c.Columns {
		if col.Name == nil || col.Quoted == nil || col.Position == nil || col.SeqOID == nil || col.Seq == nil ||
			col.SeqUsable == nil || col.Insertable == nil || col.Increment == nil {
			return TargetState{}, fmt.Errorf("column %d incomplete", i)
		}
		if *col.Position < 0 || *col.SeqOID == 0 || *col.Name == "" || *col.Quoted == "" || *col.Seq == "" {
			return TargetState{}, fmt.Errorf("column %d invalid", i)
		}
		t.Defaults = append(t.Defaults, ColumnDefault{
			Name: *col.Name, Quoted: *col.Quoted, Position: *col.Position, SeqOID: *col.SeqOID, Seq: *col.Seq,
			SeqUsable: *col.SeqUsable, Insertable: *col.Insertable, Increment: *col.Increment,
			Int8: col.Int8 != nil && *col.Int8,
		})
	}
	return t, nil
}

// AppendLiteral quotes s as a string literal valid whatever
// standard_conforming_strings says.
func AppendLiteral(dst []byte, s string) []byte {
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
