package wire

import (
	"strconv"
	"strings"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgcopy"
)

// How the rows of a COPY the session completes are read (copyin.go): the
// statement's options, and what the session knows of its encoding and its
// server.

// copyOptions returns how the rewriter reads c's rows, or false for data
// it cannot follow byte by byte: an encoding whose characters may contain
// ASCII bytes, or special characters it does not tell apart.
func (p *clientPump) copyOptions(c *plan.Copy, add []*plan.ColumnDefault) (pgcopy.Options, bool) {
	o := pgcopy.Options{Delim: c.Delim, Quote: c.Quote, Escape: c.Escape, Cols: len(c.Cols), Extra: len(add)}
	enc := c.Encoding
	if enc == "" {
		enc = p.sh.parameter("client_encoding")
	}
	if embedsASCII(enc) {
		return o, false
	}
	switch c.Format {
	case plan.CopyBinary:
		o.Format = pgcopy.Binary
		return o, true
	case plan.CopyCSV:
		o.Format = pgcopy.CSV
		o.CSVEndMarker = serverMajor(p.sh.parameter("server_version")) < 18
		// An escape character matters only inside quotes, where the
		// server does not look for the end-of-data marker.
		if strings.ContainsAny(string([]byte{c.Delim, c.Quote}), "\\.\r\n") || strings.ContainsAny(string(c.Escape), ".\r\n") || c.Delim == c.Quote {
			return o, false
		}
	default:
		if strings.IndexByte("\\\r\n.abcdefghijklmnopqrstuvwxyz0123456789", c.Delim) >= 0 {
			return o, false // the server refuses these delimiters
		}
	}
	if c.Header != plan.HeaderNone {
		o.Header = true
		for _, d := range add {
			if strings.ContainsAny(d.Name, "\r\n") {
				return o, false
			}
			o.HeaderText = append(o.HeaderText, c.Delim)
			o.HeaderText = appendHeaderName(o.HeaderText, d.Name, c)
		}
	}
	return o, true
}

// appendHeaderName appends a column name as a header field that the
// server reads back as that name.
func appendHeaderName(dst []byte, name string, c *plan.Copy) []byte {
	if c.Format == plan.CopyCSV {
		if name != c.Null && !strings.ContainsAny(name, string([]byte{c.Delim, c.Quote, c.Escape})) {
			return append(dst, name...)
		}
		dst = append(dst, c.Quote)
		for i := 0; i < len(name); i++ {
			if name[i] == c.Quote || name[i] == c.Escape {
				dst = append(dst, c.Escape)
			}
			dst = append(dst, name[i])
		}
		return append(dst, c.Quote)
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '\\' || name[i] == c.Delim {
			dst = append(dst, '\\')
		}
		dst = append(dst, name[i])
	}
	return dst
}

// embedsASCII reports whether an encoding's multibyte characters may hold
// bytes below 0x80 (the server's client-only encodings): the delimiter,
// a quote or a line end could then be part of a character.
func embedsASCII(enc string) bool {
	n := strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return -1
	}, enc)
	switch n {
	case "sjis", "shiftjis", "mskanji", "windows932", "cp932", "shiftjis2004",
		"big5", "windows950", "cp950", "gbk", "windows936", "cp936",
		"uhc", "windows949", "cp949", "gb18030", "johab":
		return true
	}
	return false
}

// serverMajor is the major version of a server_version parameter.
func serverMajor(v string) int {
	end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(v)
	}
	n, _ := strconv.Atoi(v[:end])
	return n
}
