package rewrite

// validRelName reports whether s is a syntactically valid relation name as
// regclass input accepts it: 1 or 2 identifiers separated by dots, each
// unquoted ([A-Za-z_][A-Za-z0-9_$]*) or double-quoted (non-empty, "" for a
// quote), with optional blanks around each. The session runs hidden
// queries such as to_regclass(Seq) with such names, which must never
// raise; a call with any other literal is left to the server. Three-part
// names (database.schema.name) are left to the server too: to_regclass
// raises "cross-database references are not implemented" for them.
func validRelName(s string) bool {
	i, n := 0, 0
	for {
		i = skipSpaces(s, i)
		if i >= len(s) {
			return false
		}
		switch c := s[i]; {
		case c == '"':
			j := i + 1
			empty := true
			for {
				if j >= len(s) {
					return false // unterminated
				}
				if s[j] == '"' {
					if j+1 < len(s) && s[j+1] == '"' {
						j += 2
						empty = false
						continue
					}
					break
				}
				j++
				empty = false
			}
			if empty {
				return false
			}
			i = j + 1
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_':
			i++
			for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' ||
				s[i] >= '0' && s[i] <= '9' || s[i] == '_' || s[i] == '$') {
				i++
			}
		default:
			return false
		}
		n++
		i = skipSpaces(s, i)
		if i == len(s) {
			return n <= 2
		}
		if s[i] != '.' || n == 2 {
			return false
		}
		i++
	}
}

// skipSpaces skips the blanks PostgreSQL's identifier splitting accepts.
func skipSpaces(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v') {
		i++
	}
	return i
}
