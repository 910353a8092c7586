package plan

import (
	"sort"
	"strings"
)

// MaxParams is the most parameters a statement may have: the Parse and Bind
// messages count them in an int16.
const MaxParams = 65535

// Edit replaces Text[Start:End] of a statement string by Text, or by a slot
// when IsSlot. Start == End inserts.
type Edit struct {
	Start, End int
	Text       string
	IsSlot     bool
	Slot       Slot
}

// Build assembles a Template from sql and edits (sorted here, stably by
// Start; the slice is reordered). The text between edits is kept byte for
// byte. ok is false when edits overlap or fall outside sql.
func Build(sql string, edits []Edit) (t *Template, ok bool) {
	sort.SliceStable(edits, func(i, j int) bool { return edits[i].Start < edits[j].Start })
	t = &Template{src: sql}
	var part strings.Builder
	var runs []srcRun
	// keep appends text to the current part, remembering where it came
	// from for SourcePos: src >= 0 for text copied from sql, or the offset
	// of the edit that inserted it (inserted).
	keep := func(text string, src int, inserted bool) {
		if text != "" {
			runs = append(runs, srcRun{off: part.Len(), n: len(text), src: src, inserted: inserted})
			part.WriteString(text)
		}
	}
	pos := 0
	for _, e := range edits {
		if e.Start < pos || e.End < e.Start || e.End > len(sql) {
			return nil, false
		}
		keep(sql[pos:e.Start], pos, false)
		if e.IsSlot {
			t.Parts = append(t.Parts, part.String())
			t.spans = append(t.spans, runs)
			part.Reset()
			runs = nil
			t.Slots = append(t.Slots, e.Slot)
			arg := -1
			if e.Slot.Arg != "" {
				if k := strings.Index(sql[e.Start:e.End], e.Slot.Arg); k >= 0 {
					arg = e.Start + k
				}
			}
			t.slotSrc = append(t.slotSrc, srcSlot{start: e.Start, arg: arg})
		} else {
			keep(e.Text, e.Start, true)
		}
		pos = e.End
	}
	keep(sql[pos:], pos, false)
	t.Parts = append(t.Parts, part.String())
	t.spans = append(t.spans, runs)
	return t, true
}

// Inserts describes the INSERT ... VALUES statements of a string whose
// omitted or DEFAULT columns the session may fill with generated values
// (docs/architecture.md, "How IDs are made"). Which columns default to
// snowflake.nextval depends on the catalog, the search_path and the role,
// so the plan keeps what the session needs to build the template itself:
// the text, the plan's own edits, and where each target's columns and
// values are.
type Inserts struct {
	// SQL is the analysed text; every offset below refers to it.
	SQL string
	// Base are the edits of the plan's Template (nil when it has none).
	Base []Edit
	// Targets are the INSERT ... VALUES statements, in text order.
	Targets []Insert
	// Plain: the string is a single INSERT ... VALUES statement without
	// WITH or RETURNING. It returns no rows, so its result shape cannot
	// change with the catalog, and the session may run it as a prepared
	// statement of its own (wire/simpleprep.go).
	Plain bool
}

// Insert is one INSERT ... VALUES or INSERT ... DEFAULT VALUES.
type Insert struct {
	// Rel is the target relation as regclass text that resolves as the
	// server resolves the statement's target (identifiers double-quoted,
	// schema only when the statement names one).
	Rel string
	// Cols are the names of the explicit column list as the server sees
	// them (case-folded); nil without a list. ColsEnd is the offset of the
	// list's closing parenthesis.
	Cols    []string
	ColsEnd int
	// Rows are the VALUES rows; nil for DEFAULT VALUES.
	Rows []Row
	// DefaultValues is the span of the words DEFAULT VALUES, replaced by a
	// column list and one row; zero for VALUES.
	DefaultValues Span
}

// Row is one VALUES row.
type Row struct {
	// End is the offset of the row's closing parenthesis.
	End int
	// Len is the number of items.
	Len int
	// Defaults are the items that are the keyword DEFAULT.
	Defaults []DefaultItem
}

// DefaultItem is a DEFAULT item of a row: its position and its span.
type DefaultItem struct {
	Index int
	Span
}

// Span is a byte range of the text.
type Span struct{ Start, End int }

// ColumnDefault describes a column of a target relation whose default is
// a plain call of snowflake.nextval, as the session learned from the
// catalog.
type ColumnDefault struct {
	// Name is the column name (pg_attribute.attname); Quoted is the same,
	// quoted as an identifier for the text.
	Name, Quoted string
	// Position is the column's index among the relation's columns (not
	// counting dropped ones): its place in a VALUES row without a column
	// list.
	Position int
	// Seq and Arg fill the slot (Slot.Seq and Slot.Arg): the sequence of
	// the default, named so that it resolves to the same sequence whatever
	// the search_path.
	Seq, Arg string
	// Insertable says that the role may name this column in an INSERT;
	// AllInsertable that it may name every column of the relation (an
	// omitted column is then given as DEFAULT to fill a later position).
	Insertable, AllInsertable bool
	// Int8: the column is a bigint (a COPY's rows get its IDs only then).
	Int8 bool
}

// Template returns the template for the statement string when the targets'
// columns have the defaults given (defaults[i] for Targets[i], in Position
// order; nil for a target without any): omitted snowflake columns are
// appended with a Nextval slot per row, DEFAULT items of such columns become
// slots, DEFAULT VALUES becomes a row of slots. Each slot is marked
// Slot.Default: unfilled, it renders as DEFAULT in the simple protocol.
// It returns nil when nothing is to be filled (the plan's own Template then
// applies). A target whose shape the server would reject (row lengths that
// differ, a column named twice) is left to the server.
func (in *Inserts) Template(defaults [][]ColumnDefault) *Template {
	var edits []Edit
	for i := range in.Targets {
		if i < len(defaults) && len(defaults[i]) > 0 {
			edits = in.Targets[i].edits(edits, defaults[i])
		}
	}
	if len(edits) == 0 {
		return nil
	}
	all := make([]Edit, 0, len(in.Base)+len(edits))
	all = append(all, in.Base...)
	all = append(all, edits...)
	t, ok := Build(in.SQL, all)
	if !ok {
		return nil
	}
	return t
}

func slotFor(d *ColumnDefault) Edit {
	return Edit{IsSlot: true, Slot: Slot{Op: Nextval, Seq: d.Seq, Arg: d.Arg, Default: true}}
}

// edits appends the edits that fill the target's snowflake columns.
func (t *Insert) edits(dst []Edit, defs []ColumnDefault) []Edit {
	if t.Rows == nil {
		return t.defaultValues(dst, defs)
	}
	n := t.Rows[0].Len
	for _, r := range t.Rows {
		if r.Len != n {
			return dst // "VALUES lists must all be the same length"
		}
	}
	if t.Cols != nil {
		return t.withColumns(dst, defs, n)
	}
	// No column list: items map to columns by position; omitted trailing
	// columns take their defaults. A snowflake column past the rows' end is
	// appended after DEFAULT items for the columns in between.
	next := n
	for i := range defs {
		d := &defs[i]
		if d.Position < n {
			dst = replaceDefaults(dst, t.Rows, d.Position, d)
			continue
		}
		if !d.AllInsertable {
			break // later positions would need naming this one too
		}
		// Rows are never empty, so every appended item follows a comma.
		pad := strings.Repeat(", DEFAULT", d.Position-next) + ", "
		for _, r := range t.Rows {
			dst = append(dst, Edit{Start: r.End, End: r.End, Text: pad})
			e := slotFor(d)
			e.Start, e.End = r.End, r.End
			dst = append(dst, e)
		}
		next = d.Position + 1
	}
	return dst
}

// withColumns handles a target with a column list of n names.
func (t *Insert) withColumns(dst []Edit, defs []ColumnDefault, n int) []Edit {
	if len(t.Cols) != n {
		return dst // more or fewer expressions than target columns
	}
	seen := make(map[string]bool, len(t.Cols))
	for _, c := range t.Cols {
		if seen[c] {
			return dst // "column specified more than once"
		}
		seen[c] = true
	}
	for i := range defs {
		d := &defs[i]
		idx := -1
		for j, c := range t.Cols {
			if c == d.Name {
				idx = j
				break
			}
		}
		if idx >= 0 {
			dst = replaceDefaults(dst, t.Rows, idx, d)
			continue
		}
		if !d.Insertable {
			continue // naming it would need a privilege the default does not
		}
		dst = append(dst, Edit{Start: t.ColsEnd, End: t.ColsEnd, Text: ", " + d.Quoted})
		for _, r := range t.Rows {
			dst = append(dst, Edit{Start: r.End, End: r.End, Text: ", "})
			e := slotFor(d)
			e.Start, e.End = r.End, r.End
			dst = append(dst, e)
		}
	}
	return dst
}

// replaceDefaults turns the DEFAULT items at index idx into slots.
func replaceDefaults(dst []Edit, rows []Row, idx int, d *ColumnDefault) []Edit {
	for _, r := range rows {
		for _, it := range r.Defaults {
			if it.Index == idx {
				e := slotFor(d)
				e.Start, e.End = it.Start, it.End
				dst = append(dst, e)
			}
		}
	}
	return dst
}

// defaultValues replaces DEFAULT VALUES by (cols) VALUES (slots).
func (t *Insert) defaultValues(dst []Edit, defs []ColumnDefault) []Edit {
	var cols []string
	var use []*ColumnDefault
	for i := range defs {
		if defs[i].Insertable {
			cols = append(cols, defs[i].Quoted)
			use = append(use, &defs[i])
		}
	}
	if len(use) == 0 {
		return dst
	}
	s := t.DefaultValues
	dst = append(dst, Edit{Start: s.Start, End: s.Start, Text: "(" + strings.Join(cols, ", ") + ") VALUES ("})
	for i, d := range use {
		if i > 0 {
			dst = append(dst, Edit{Start: s.Start, End: s.Start, Text: ", "})
		}
		e := slotFor(d)
		e.Start, e.End = s.Start, s.Start
		dst = append(dst, e)
	}
	return append(dst, Edit{Start: s.Start, End: s.End, Text: ")"})
}
