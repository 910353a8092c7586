package pgcopy

import (
	"encoding/binary"
	"strconv"
)

// Format is the data format of a COPY.
type Format uint8

const (
	Text Format = iota
	CSV
	Binary
)

// MaxExtra bounds the IDs appended to one row.
const MaxExtra = 16

// Options say how the rows are read and what is appended to them.
type Options struct {
	Format Format
	// Delim is the field delimiter (text and csv); Quote and Escape the
	// csv quote and escape characters.
	Delim, Quote, Escape byte
	// Header: the first line is a header line; HeaderText is appended to
	// it (delimiter and names of the added columns, already quoted or
	// escaped for the format) when it has Cols fields.
	Header     bool
	HeaderText []byte
	// Cols is the number of fields of a row as the client sends them;
	// Extra the number of IDs appended to each row (1..MaxExtra).
	Cols, Extra int
	// CSVEndMarker: a line that is exactly \. ends csv data (servers
	// before PostgreSQL 18). In text format \. always ends the data.
	CSVEndMarker bool
}

// IDs is the queue of generated IDs the rewriter takes from, in order.
// The caller refills it when Rewrite asks.
type IDs struct {
	Buf  []int64
	Next int
}

// Len is the number of IDs left.
func (q *IDs) Len() int { return len(q.Buf) - q.Next }

// Reset empties the queue, keeping its array.
func (q *IDs) Reset() { q.Buf, q.Next = q.Buf[:0], 0 }

// Compact moves the IDs left to the front, for a refill to append to.
func (q *IDs) Compact() {
	n := copy(q.Buf, q.Buf[q.Next:])
	q.Buf, q.Next = q.Buf[:n], 0
}

// Rewriter is the state of one COPY's data stream. The zero value is not
// usable: see New. It is a plain value: a copy of it is a snapshot of the
// stream's state that can be restored (wire does, when a message must be
// handled again by another goroutine).
type Rewriter struct {
	o Options
	// ended: the data the server will read is over (end-of-data marker,
	// binary trailer) or cannot be followed (a malformed binary header):
	// the rest passes unchanged.
	ended bool
	// rows counts the rows that got IDs.
	rows int64

	// Text and csv. fields counts the fields of the current line so far
	// (delimiters seen plus one); started: the line has a byte; header:
	// it is the header line.
	fields  int
	started bool
	header  bool
	// afterCR: the previous byte ended a line with \r (a \n after it
	// belongs to the same line end).
	afterCR bool
	// Text: a backslash was read and is held back: it may begin \., in
	// front of which the row's IDs go.
	esc bool
	// Csv: inQuote and lastWasEsc as the server's line reader keeps
	// them; held is how many bytes of a \. at a line's start are held.
	inQuote, lastWasEsc bool
	held                int

	bin binState

	// special marks the bytes the line reader must look at; a run of
	// other bytes is copied as it is (text and csv).
	special [256]bool
}

// New returns a rewriter for a stream read with o.
func New(o Options) Rewriter {
	if o.Format == CSV && o.Escape == o.Quote {
		// The server's line reader: "ignore special escape processing
		// if it's the same as quotec".
		o.Escape = 0
	}
	r := Rewriter{o: o, fields: 1, header: o.Header}
	for _, c := range []byte{'\n', '\r', '\\', o.Delim} {
		r.special[c] = true
	}
	if o.Format == CSV {
		r.special[o.Quote] = true
		r.special[o.Escape] = true
	}
	return r
}

// Rows is the number of rows that got IDs so far.
func (r *Rewriter) Rows() int64 { return r.rows }

// Binary reports whether the stream is in the binary format.
func (r *Rewriter) Binary() bool { return r.o.Format == Binary }

// MinTuple is the size of the smallest binary tuple that gets IDs: no row
// that gets IDs ends in fewer bytes than that, but one begun earlier.
func (r *Rewriter) MinTuple() int { return 2 + 4*r.o.Cols }

// Ended reports whether the data the server reads has ended.
func (r *Rewriter) Ended() bool { return r.ended }

// Rewrite appends to dst what the server is to receive for src, the next
// bytes of the stream. It stops when a row needs more IDs than ids holds:
// need is then true, n is how much of src it consumed, and the caller
// calls again with src[n:] once ids is refilled. Otherwise n is len(src).
func (r *Rewriter) Rewrite(dst, src []byte, ids *IDs) (out []byte, n int, need bool) {
	if r.o.Format == Binary {
		return r.binary(dst, src, ids)
	}
	return r.lines(dst, src, ids)
}

// Finish appends what ends the stream at the client's CopyDone: the IDs of
// a last row without a line end. need as for Rewrite (call again).
func (r *Rewriter) Finish(dst []byte, ids *IDs) (out []byte, need bool) {
	if r.ended || r.o.Format == Binary {
		return dst, false
	}
	if r.held > 0 {
		// \ or \. at the start of the last line, without a line end:
		// data (the server reads \. only before a line end).
		dst = append(dst, `\.`[:r.held]...)
		r.held, r.started = 0, true
	}
	if r.esc {
		r.started = true // a line of its own: "\" is an empty field
	}
	if !r.started || (r.o.Format == CSV && r.inQuote) {
		// No last line, or an unterminated quoted field: the server's
		// error.
		return dst, false
	}
	if r.header {
		dst = r.appendHeader(dst)
	} else if r.fields >= r.o.Cols {
		if ids.Len() < r.o.Extra {
			return dst, true
		}
		dst = r.appendIDs(dst, ids)
	}
	if r.esc {
		// A trailing backslash: the server drops it from the last field,
		// which is then the last ID.
		dst = append(dst, '\\')
		r.esc = false
	}
	r.started = false
	return dst, false
}

// appendIDs appends the row's IDs as text fields.
func (r *Rewriter) appendIDs(dst []byte, ids *IDs) []byte {
	for k := 0; k < r.o.Extra; k++ {
		dst = append(dst, r.o.Delim)
		dst = strconv.AppendInt(dst, ids.Buf[ids.Next], 10)
		ids.Next++
	}
	r.rows++
	return dst
}

func (r *Rewriter) appendHeader(dst []byte) []byte {
	if r.fields == r.o.Cols {
		dst = append(dst, r.o.HeaderText...)
	}
	r.header = false
	return dst
}

// lines rewrites text or csv data.
func (r *Rewriter) lines(dst, src []byte, ids *IDs) ([]byte, int, bool) {
	csv := r.o.Format == CSV
	delim, quote, escape := r.o.Delim, r.o.Quote, r.o.Escape
	run := 0 // src[run:i] is yet to be appended
	for i := 0; i < len(src); i++ {
		if r.ended {
			return append(dst, src[run:]...), len(src), false
		}
		if !r.esc && r.held == 0 && !r.afterCR && !r.special[src[i]] {
			// Ordinary bytes: data of the current field. (In csv they
			// also end an escape sequence, which only an escape or a
			// quote continues.)
			for i < len(src) && !r.special[src[i]] {
				i++
			}
			r.started, r.lastWasEsc = true, false
			if i == len(src) {
				break
			}
		}
		c := src[i]
		if r.afterCR {
			r.afterCR = false
			if c == '\n' {
				continue
			}
		}
		if !csv {
			if r.esc {
				r.esc = false
				if c == '.' {
					// End of data; the line's data before it is a row.
					dst = append(dst, src[run:i]...)
					run = i
					if r.started && !r.header && r.fields >= r.o.Cols {
						if ids.Len() < r.o.Extra {
							r.esc = true
							return dst, i, true
						}
						dst = r.appendIDs(dst, ids)
					}
					r.ended = true
					dst = append(dst, '\\')
					continue
				}
				if run == i {
					dst = append(dst, '\\') // held from the previous call
				}
				r.started = true
				continue // the escaped byte is data, a line end too
			}
			switch c {
			case '\\':
				dst = append(dst, src[run:i]...)
				run = i + 1
				r.esc = true
				continue
			case delim:
				r.fields++
				r.started = true
				continue
			case '\n', '\r':
			default:
				r.started = true
				continue
			}
		} else {
			if r.held > 0 {
				if r.held == 1 && c == '.' {
					r.held = 2
					run = i + 1
					continue
				}
				if r.held == 2 && (c == '\n' || c == '\r') {
					dst = append(dst, `\.`...)
					r.held, r.ended = 0, true
					run = i
					continue
				}
				// Data after all.
				dst = append(dst, `\.`[:r.held]...)
				r.held, r.started = 0, true
				run = i
			}
			if c == '\\' && !r.started && r.o.CSVEndMarker {
				dst = append(dst, src[run:i]...)
				r.held = 1
				run = i + 1
				continue
			}
			if r.inQuote && c == escape {
				r.lastWasEsc = !r.lastWasEsc
			}
			if c == quote && !r.lastWasEsc {
				r.inQuote = !r.inQuote
			}
			if c != escape {
				r.lastWasEsc = false
			}
			if r.inQuote || (c != '\n' && c != '\r') {
				if c == delim && !r.inQuote {
					r.fields++
				}
				r.started = true
				continue
			}
		}
		// A line end at i.
		dst = append(dst, src[run:i]...)
		run = i
		if r.header {
			dst = r.appendHeader(dst)
		} else if r.fields >= r.o.Cols {
			if ids.Len() < r.o.Extra {
				return dst, i, true
			}
			dst = r.appendIDs(dst, ids)
		}
		r.fields, r.started = 1, false
		r.afterCR = c == '\r'
	}
	return append(dst, src[run:]...), len(src), false
}

// putID appends one binary int8 field.
func putID(dst []byte, id int64) []byte {
	dst = binary.BigEndian.AppendUint32(dst, 8)
	return binary.BigEndian.AppendUint64(dst, uint64(id))
}
