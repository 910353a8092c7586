package rewrite

import (
	"sort"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// The parse tree records where nodes start, not where they end. The ends
// of calls, target expressions and statements come from the token stream
// of PostgreSQL's own lexer (pg_query.Scan), so that literals, quoted
// identifiers, dollar quotes and nested comments are handled exactly as the
// server handles them. Comments are dropped from the stream.

type token struct {
	start, end int
	kind       pg_query.Token
}

// tokens returns the text's tokens without comments, scanning on first use.
func (a *analyzer) tokens() []token {
	if a.scan {
		return a.toks
	}
	a.scan = true
	res, err := pg_query.Scan(a.sql)
	if err != nil {
		panic(err) // the text parsed, so it scans; recovered by analyze
	}
	a.toks = make([]token, 0, len(res.Tokens))
	for _, t := range res.Tokens {
		if t.Token == pg_query.Token_SQL_COMMENT || t.Token == pg_query.Token_C_COMMENT {
			continue
		}
		a.toks = append(a.toks, token{int(t.Start), int(t.End), t.Token})
	}
	return a.toks
}

// tokenAt returns the index of the first token starting at or after pos.
func (a *analyzer) tokenAt(pos int) int {
	ts := a.tokens()
	return sort.Search(len(ts), func(i int) bool { return ts[i].start >= pos })
}

// matchParen returns the index of the ')' closing the '(' at index open,
// or -1.
func (a *analyzer) matchParen(open int) int {
	ts := a.tokens()
	depth := 0
	for i := open; i < len(ts); i++ {
		switch ts[i].kind {
		case pg_query.Token_ASCII_40:
			depth++
		case pg_query.Token_ASCII_41:
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// afterRelName returns the index of the first token after the name of rv
// (one identifier, or schema '.' name), or -1 when the tokens are not that.
func (a *analyzer) afterRelName(rv *pg_query.RangeVar) int {
	i := a.tokenAt(int(rv.Location)) + 1
	if rv.Schemaname != "" {
		if !tokIs(a.tokens(), i, pg_query.Token_ASCII_46) {
			return -1
		}
		i += 2
	}
	return i
}

// callParens returns the token indexes of the parentheses of the function
// call starting at byte loc (its name), or ok false.
func (a *analyzer) callParens(loc int) (open, close int, ok bool) {
	ts := a.tokens()
	for open = a.tokenAt(loc); open < len(ts); open++ {
		if ts[open].kind == pg_query.Token_ASCII_40 {
			break
		}
	}
	if open >= len(ts) {
		return 0, 0, false
	}
	close = a.matchParen(open)
	return open, close, close > open
}

// exprEnd returns the byte offset just after the expression starting at
// byte loc that is one item of a SELECT target list: it ends before the
// first token, outside parentheses and brackets, that ends a target (a
// comma, an unmatched ')', ';' or a keyword that may follow a target
// list). It returns -1 when it finds no end.
func (a *analyzer) exprEnd(loc int) int {
	ts := a.tokens()
	depth := 0
	last := -1
	for i := a.tokenAt(loc); i < len(ts); i++ {
		switch k := ts[i].kind; {
		case k == pg_query.Token_ASCII_40 || k == pg_query.Token_ASCII_91:
			depth++
		case k == pg_query.Token_ASCII_41 || k == pg_query.Token_ASCII_93:
			if depth == 0 {
				return lastEnd(ts, last)
			}
			depth--
		case depth == 0 && endsTarget(k):
			return lastEnd(ts, last)
		}
		last = i
	}
	return lastEnd(ts, last)
}

func lastEnd(ts []token, i int) int {
	if i < 0 {
		return -1
	}
	return ts[i].end
}

func endsTarget(k pg_query.Token) bool {
	switch k {
	case pg_query.Token_ASCII_44, pg_query.Token_ASCII_59,
		pg_query.Token_FROM, pg_query.Token_INTO, pg_query.Token_WHERE,
		pg_query.Token_GROUP_P, pg_query.Token_HAVING, pg_query.Token_WINDOW,
		pg_query.Token_ORDER, pg_query.Token_LIMIT, pg_query.Token_OFFSET,
		pg_query.Token_FETCH, pg_query.Token_FOR, pg_query.Token_UNION,
		pg_query.Token_INTERSECT, pg_query.Token_EXCEPT, pg_query.Token_ON,
		pg_query.Token_RETURNING:
		return true
	}
	return false
}

// stmtSpan returns the byte range of a raw statement from its first token
// to its last, without surrounding comments, blanks and the semicolon.
func (a *analyzer) stmtSpan(raw *pg_query.RawStmt) (start, end int, ok bool) {
	lo := int(raw.StmtLocation)
	hi := len(a.sql)
	if raw.StmtLen > 0 {
		hi = lo + int(raw.StmtLen)
	}
	ts := a.tokens()
	first := a.tokenAt(lo)
	lastTok := -1
	for i := first; i < len(ts) && ts[i].end <= hi; i++ {
		if ts[i].kind != pg_query.Token_ASCII_59 {
			lastTok = i
		}
	}
	if first >= len(ts) || lastTok < first {
		return 0, 0, false
	}
	return ts[first].start, ts[lastTok].end, true
}
