package plan

import "strings"

// CopyFormat is the data format of a COPY.
type CopyFormat uint8

const (
	CopyText CopyFormat = iota
	CopyCSV
	CopyBinary
)

// CopyHeader says whether the data starts with a header line.
type CopyHeader uint8

const (
	HeaderNone  CopyHeader = iota
	HeaderSkip             // HEADER true: the line is skipped
	HeaderMatch            // HEADER MATCH: its fields must be the column names
)

// Copy describes a COPY table (columns) FROM STDIN whose rows the session
// may complete with generated values for snowflake defaults the column
// list omits (docs/architecture.md, "How IDs are made"). Which columns
// default to snowflake.nextval is a catalog fact the session learns, as for
// Inserts; the analysis records the statement's shape and the options that
// say how its rows are read.
type Copy struct {
	// SQL is the analysed text; ColsEnd is the offset in it of the column
	// list's closing parenthesis.
	SQL     string
	ColsEnd int
	// Rel is the target as regclass text (as Insert.Rel).
	Rel string
	// Cols are the listed columns as the server sees them (case-folded).
	Cols []string
	// Format and the options of text and csv: the delimiter, the quote
	// and escape characters (csv), the header line.
	Format        CopyFormat
	Delim         byte
	Quote, Escape byte
	Header        CopyHeader
	// Null is the NULL string; Encoding the ENCODING option ("" when
	// absent: the client_encoding applies).
	Null, Encoding string
}

// Text returns the statement with the columns add (quoted identifiers)
// appended to its column list.
func (c *Copy) Text(add []string) string {
	var b strings.Builder
	b.Grow(len(c.SQL) + 16*len(add))
	b.WriteString(c.SQL[:c.ColsEnd])
	for _, a := range add {
		b.WriteString(", ")
		b.WriteString(a)
	}
	b.WriteString(c.SQL[c.ColsEnd:])
	return b.String()
}
