// Package plan holds the result of analysing one SQL string: what the proxy
// must do with it. It is pure Go (no cgo) so that wire can depend on it while
// only rewrite imports the PostgreSQL parser.
//
// A Plan is immutable once built and is shared between sessions through the
// rewriter's cache: callers must never modify one.
package plan

import (
	"strconv"
)

// SlotOp says what value fills a slot of a Template.
type SlotOp uint8

const (
	// Nextval is a snowflake.nextval(Seq) call evaluated once per execution.
	Nextval SlotOp = iota + 1
	// Currval is a snowflake.currval(Seq) call evaluated once per execution.
	Currval
	// CreateExtension stands for a whole CREATE EXTENSION snowflake statement;
	// it is filled with the shim's install SQL (a single DO statement).
	CreateExtension
	// DropExtension stands for DROP EXTENSION snowflake.
	DropExtension
	// AlterExtension stands for ALTER EXTENSION snowflake UPDATE.
	AlterExtension
)

// IsID reports whether the slot is filled with a generated int8.
func (op SlotOp) IsID() bool { return op == Nextval || op == Currval }

// DefaultSequence is the sequence snowflake.nextval() uses without argument.
const DefaultSequence = "snowflake.id_seq"

// Slot is one place in a Template that the session fills at execution time.
type Slot struct {
	Op SlotOp
	// Seq is the regclass text of the sequence argument for Nextval and
	// Currval, exactly as the server would parse it (orders_id_seq,
	// public."Orders_seq"); DefaultSequence when the call has none.
	Seq string
	// Arg is the SQL text of the argument expression as written, to put back
	// into a rendered Currval call ('orders_id_seq'::regclass); for a call
	// without argument it is 'snowflake.id_seq' (an untyped literal).
	Arg string
	// Ext carries the options of an extension statement.
	Ext *ExtensionOptions
	// Default marks a Nextval slot that stands for a column default of an
	// INSERT (Inserts.Template): unfilled, it renders as DEFAULT in the
	// simple protocol, so the server evaluates the column's own default
	// with its own checks and errors.
	Default bool
}

// ExtensionOptions are the parsed options of CREATE/DROP/ALTER EXTENSION.
type ExtensionOptions struct {
	IfNotExists bool   // CREATE ... IF NOT EXISTS
	IfExists    bool   // DROP ... IF EXISTS
	Cascade     bool   // CREATE/DROP ... CASCADE
	Schema      string // CREATE ... SCHEMA x ("" when absent)
	Version     string // CREATE ... VERSION 'v' / ALTER ... UPDATE TO 'v'
	// Others are the other extensions a DROP EXTENSION names besides
	// snowflake, as quoted identifiers: dropped in the same statement.
	Others []string
}

// Template is SQL text with holes: Parts[0] Slot[0] Parts[1] ... Parts[n].
// len(Parts) == len(Slots)+1 always.
type Template struct {
	Parts []string
	Slots []Slot

	// Set by Build, for SourcePos (position.go): the analysed text, where
	// each run of each part came from, where each slot's call was.
	src     string
	spans   [][]srcRun
	slotSrc []srcSlot
}

// Touch is a bit set of session or catalog state a statement may change.
// The session treats its mirror of that state as stale after such a
// statement and re-reads it from the server at the next safe point.
type Touch uint16

const (
	TouchNode       Touch = 1 << iota // snowflake.node (SET/RESET/set_config/DISCARD/RESET ALL)
	TouchSearchPath                   // search_path
	TouchReadOnly                     // transaction read-only state (BEGIN READ ONLY, SET TRANSACTION ...)
	TouchCatalog                      // DDL, GRANT/REVOKE: catalog caches are stale
	TouchRole                         // SET ROLE, SET SESSION AUTHORIZATION
	TouchPrepared                     // DEALLOCATE / DISCARD ALL: prepared statements gone
	TouchAll                          // DISCARD ALL / RESET ALL
	// TouchShim: the text keeps calls that issue IDs in the server's shim
	// (per-row snowflake.nextval, convert_sequence_to_snowflake). Until it
	// completes the session issues nothing on the fast path (the order of
	// IDs in the session must follow execution order); afterwards the
	// fast path fences (Snowflakes.Fence) so it continues above them.
	TouchShim
	// TouchSequence: the text may set a sequence outside the snowflake
	// paths (setval, ALTER SEQUENCE): afterwards the fast path fences and
	// continues above the sequence's last_value, as the pgEdge rule does.
	TouchSequence
)

// Local describes a statement the proxy answers without the server: a
// SELECT whose every output column is a Nextval or Currval slot.
type Local struct {
	// Columns are the output column names, one per slot, in slot order.
	Columns []string
}

// Statement describes one statement of a (possibly multi-statement) string,
// in order.
type Statement struct {
	// Tag, when not empty, replaces the command tag of this statement's
	// CommandComplete (the shim runs CREATE EXTENSION as DO, for example).
	Tag string
	// Deallocate names the prepared statement this statement removes
	// (DEALLOCATE name); DeallocateAll is set for DEALLOCATE ALL and
	// DISCARD ALL. Prepared statements are not transactional: the
	// statement's CommandComplete says they are gone.
	Deallocate    string `json:",omitempty"`
	DeallocateAll bool   `json:",omitempty"`
}

// Plan is the analysis of one SQL string.
type Plan struct {
	// Template is nil when the text is forwarded unchanged.
	Template *Template
	// Local is non-nil when the whole string can be answered by the proxy.
	Local *Local
	// Statements lists the statements in order; nil for the pass-through plan.
	Statements []Statement
	// MaxParam is the highest $n the text references (0 when none).
	MaxParam int
	// Touches lists what the string may change.
	Touches Touch
	// ShimCalls is set when the text keeps snowflake.nextval calls that
	// did not become slots (evaluated per row, or after a statement that
	// changes what they depend on): the server's shim issues their IDs.
	// The session counts such statements as fast-path fallbacks.
	ShimCalls bool
	// Inserts is non-nil when the string has INSERT ... VALUES statements
	// whose column defaults the session may fill (insert.go).
	Inserts *Inserts
	// Copy is non-nil when the string is one COPY ... FROM STDIN with a
	// column list, whose rows the session may complete (plan.Copy).
	Copy *Copy
}

// Passthrough is the plan for text the proxy does not need to touch.
var Passthrough = &Plan{}

// Unparsed is the plan for text the proxy had to read and could not: newer
// syntax than its parser's (a PostgreSQL 18 statement), or an error the
// server will report. It is forwarded as written, and the session assumes
// the worst of it: that it may have changed the state the session mirrors
// or the catalog, issued IDs in the shim, or set a sequence. Not that it
// removed prepared statements: the session would forget some that still
// exist.
var Unparsed = &Plan{Touches: TouchNode | TouchSearchPath | TouchReadOnly | TouchCatalog | TouchRole | TouchShim | TouchSequence}

// IDSlots counts the slots filled with generated int8 values.
func (t *Template) IDSlots() int {
	n := 0
	for _, s := range t.Slots {
		if s.Op.IsID() {
			n++
		}
	}
	return n
}

// Value fills one slot at execution time.
type Value struct {
	// ID is the generated value of a Nextval slot, or the proxy's last
	// fast-path value for a Currval slot (Valid false: the proxy has none).
	ID    int64
	Valid bool
	// Text is the SQL that replaces an extension slot.
	Text string
}

// CurrvalFunc is the shim function a Currval slot becomes: it returns the
// later of the shim's own session value and the proxy's (second argument),
// so currval is right whichever path issued the latest value.
const CurrvalFunc = "snowflake._currval"

// NextvalFunc is the shim function an unfilled Nextval slot calls.
const NextvalFunc = "snowflake.nextval"

// RenderLiteral appends the template to dst with slots replaced by literal
// values (simple protocol). vals is indexed by slot.
func (t *Template) RenderLiteral(dst []byte, vals []Value) []byte {
	for i, p := range t.Parts {
		dst = append(dst, p...)
		if i == len(t.Slots) {
			break
		}
		s, v := &t.Slots[i], &vals[i]
		switch s.Op {
		case Nextval:
			if !v.Valid && s.Default {
				dst = append(dst, "DEFAULT"...)
				break
			}
			if !v.Valid {
				// The proxy has no value: the server's shim issues it.
				dst = append(dst, NextvalFunc+"("...)
				dst = append(dst, s.Arg...)
				dst = append(dst, ')')
				break
			}
			dst = append(dst, '(')
			dst = strconv.AppendInt(dst, v.ID, 10)
			dst = append(dst, "::int8)"...)
		case Currval:
			dst = append(dst, CurrvalFunc+"("...)
			dst = append(dst, s.Arg...)
			if v.Valid {
				dst = append(dst, ", "...)
				dst = strconv.AppendInt(dst, v.ID, 10)
				dst = append(dst, "::int8)"...)
			} else {
				dst = append(dst, ", NULL::int8)"...)
			}
		default:
			dst = append(dst, v.Text...)
		}
	}
	return dst
}

// Rendering is how a template's ID slots are written.
type Rendering uint8

const (
	// Literals: slots replaced by literal values (simple protocol),
	// RenderLiteral.
	Literals Rendering = iota
	// Params: each ID slot replaced by a parameter $base+1, $base+2, ...
	// in slot order (extended protocol), base being the number of
	// parameters of the client's statement; a NULL bind value of a
	// Nextval slot (no fast-path value for this execution) lets the
	// server's shim issue the ID. Extension slots take vals[i].Text (vals
	// may be nil when the template has none).
	Params
	// BoundParams: Params for a statement every execution of which binds
	// a value to each Nextval slot (a simple-protocol INSERT the proxy
	// prepares only when it generated every ID): the slot is the
	// parameter alone. The server then sets up no fallback call per
	// execution, which for the inlined snowflake.nextval costs about as
	// much as the rest of a one-row INSERT.
	BoundParams
)

// Render appends the template to dst rendered as r says.
func (t *Template) Render(dst []byte, r Rendering, base int, vals []Value) []byte {
	switch r {
	case Params:
		return t.renderParams(dst, base, vals, false)
	case BoundParams:
		return t.renderParams(dst, base, vals, true)
	default:
		return t.RenderLiteral(dst, vals)
	}
}

func (t *Template) renderParams(dst []byte, base int, vals []Value, bound bool) []byte {
	n := base
	for i, p := range t.Parts {
		dst = append(dst, p...)
		if i == len(t.Slots) {
			break
		}
		s := &t.Slots[i]
		switch s.Op {
		case Nextval:
			n++
			if bound {
				dst = append(dst, '$')
				dst = strconv.AppendInt(dst, int64(n), 10)
				dst = append(dst, "::int8"...)
				break
			}
			dst = append(dst, "COALESCE($"...)
			dst = strconv.AppendInt(dst, int64(n), 10)
			dst = append(dst, "::int8, "+NextvalFunc+"("...)
			dst = append(dst, s.Arg...)
			dst = append(dst, "))"...)
		case Currval:
			n++
			dst = append(dst, CurrvalFunc+"("...)
			dst = append(dst, s.Arg...)
			dst = append(dst, ", $"...)
			dst = strconv.AppendInt(dst, int64(n), 10)
			dst = append(dst, "::int8)"...)
		default:
			dst = append(dst, vals[i].Text...)
		}
	}
	return dst
}
