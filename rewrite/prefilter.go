package rewrite

import "strings"

// NeedsParse reports whether sql may concern the proxy, without parsing and
// without allocating. It returns true when the text contains "snowflake" or
// "set_config" (ASCII case-insensitive), when its first keyword (after
// blanks, comments and opening parentheses) may change session or catalog
// state (SET RESET DISCARD DEALLOCATE BEGIN START CREATE ALTER DROP GRANT
// REVOKE COMMENT TRUNCATE SECURITY REASSIGN IMPORT REFRESH DO) or may be an
// INSERT whose column defaults the session fills (INSERT, WITH), or when the
// text may hold more than one statement. False positives only cost a parse;
// a false negative would hide a state change, so every rule errs towards
// true.
func NeedsParse(sql string) bool {
	if containsKeyText(sql) {
		return true
	}
	if firstKeywordTouches(sql) {
		return true
	}
	return mayBeMulti(sql)
}

// containsKeyText reports whether sql contains "snowflake", "set_config" or
// "setval" (a sequence set outside the snowflake paths: plan.TouchSequence),
// ignoring ASCII case. It looks for a rare byte of each word with
// strings.IndexByte (vectorised) and compares around each hit.
func containsKeyText(sql string) bool {
	return containsFold(sql, "snowflake", 3) || containsFold(sql, "set_config", 3) ||
		containsFold(sql, "setval", 3)
}

// containsFold reports whether s contains needle (lower-case ASCII)
// ignoring ASCII case, searching for needle[pivot] in both cases.
func containsFold(s, needle string, pivot int) bool {
	c := needle[pivot]
	for _, b := range [2]byte{c, c &^ 0x20} {
		for off := 0; off < len(s); {
			i := strings.IndexByte(s[off:], b)
			if i < 0 {
				break
			}
			p := off + i - pivot
			if p >= 0 && hasFoldPrefix(s[p:], needle) {
				return true
			}
			off += i + 1
		}
		if c&^0x20 == c { // no other case ('_')
			break
		}
	}
	return false
}

// hasFoldPrefix reports whether s starts with lower (all lower-case ASCII
// letters or '_'), ignoring ASCII case in s.
func hasFoldPrefix(s, lower string) bool {
	if len(s) < len(lower) {
		return false
	}
	for j := 0; j < len(lower); j++ {
		c := s[j]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[j] {
			return false
		}
	}
	return true
}

// touchKeywords are the first keywords of statements that may change state
// the proxy mirrors (session settings, prepared statements, the catalog).
// DO is not in the original list of the design: a DO block may run DDL or
// SET search_path, so it is parsed too.
var touchKeywords = [...]string{
	"set", "reset", "discard", "deallocate", "begin", "start", "create",
	"alter", "drop", "grant", "revoke", "comment", "truncate", "security",
	"reassign", "import", "refresh", "do",
	// Not state changes: INSERT ... VALUES (also inside WITH) may omit a
	// column that defaults to snowflake.nextval, which the text does not
	// show. Plans are cached by text, so a repeated INSERT costs one
	// cache hit.
	"insert", "with",
	// COPY FROM into a table whose column defaults to snowflake.nextval,
	// EXECUTE of a prepared statement, CALL of a procedure may issue IDs in
	// the server's shim (plan.TouchShim).
	"copy", "execute", "call",
	// SHOW snowflake.node must answer 0 when the node is set nowhere.
	"show",
}

func firstKeywordTouches(sql string) bool {
	i := skipBlanks(sql, 0, true)
	j := i
	for j < len(sql) && isIdentChar(sql[j]) {
		j++
	}
	word := sql[i:j]
	if len(word) < 2 || len(word) > 10 {
		return false
	}
	for _, k := range touchKeywords {
		if len(k) == len(word) && hasFoldPrefix(word, k) {
			return true
		}
	}
	return false
}

// mayBeMulti reports whether sql may hold more than one statement: some
// ';' is followed by text other than blanks and comments. It looks at the
// first ';' only, and answers true as soon as another ';' follows it: if
// everything after the first ';' is blanks and comments without ';', no
// real statement separator can be followed by a statement, whether that
// first ';' is a separator or sits inside a literal.
func mayBeMulti(sql string) bool {
	p := strings.IndexByte(sql, ';')
	if p < 0 {
		return false
	}
	if strings.IndexByte(sql[p+1:], ';') >= 0 {
		return true
	}
	return skipBlanks(sql, p+1, false) < len(sql)
}

// skipBlanks returns the index of the first byte at or after i that is not
// whitespace or part of a comment (and not '(' when parens is set). Block
// comments nest, as in PostgreSQL; an unterminated one runs to the end.
func skipBlanks(s string, i int, parens bool) int {
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case parens && c == '(':
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			i += 2
			for i < len(s) && s[i] != '\n' && s[i] != '\r' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			i += 2
			depth := 1
			for i < len(s) && depth > 0 {
				switch {
				case s[i] == '*' && i+1 < len(s) && s[i+1] == '/':
					depth--
					i += 2
				case s[i] == '/' && i+1 < len(s) && s[i+1] == '*':
					depth++
					i += 2
				default:
					i++
				}
			}
		default:
			return i
		}
	}
	return i
}

func isIdentChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c >= 0x80
}
