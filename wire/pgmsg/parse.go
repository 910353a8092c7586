package pgmsg

// Parse is a Parse ('P') body: a statement name, its text and the types of
// its first parameters (OIDs, 0 for unspecified).
type Parse struct {
	Name, Query []byte
	types       []byte // 4 bytes per type
}

// ReadParse reads a Parse body; ok is false when it is malformed (the
// caller passes it on, and the server reports it).
func ReadParse(body []byte) (m Parse, ok bool) {
	name, rest, ok1 := CString(body)
	query, rest, ok2 := CString(rest)
	if !ok1 || !ok2 {
		return Parse{}, false
	}
	_, types, rest, ok := count16(rest, 4)
	if !ok || len(rest) != 0 {
		return Parse{}, false
	}
	return Parse{Name: name, Query: query, types: types}, true
}

// NumTypes is how many parameter types the client gave.
func (m Parse) NumTypes() int { return len(m.types) / 4 }

// Types returns the parameter types as sent, 4 bytes each.
func (m Parse) Types() []byte { return m.types }

// Append appends the whole message.
func (m Parse) Append(dst []byte) []byte {
	dst, start := BeginParse(dst, m.Name)
	dst = append(dst, m.Query...)
	dst = EndParseText(dst, m.NumTypes())
	dst = append(dst, m.types...)
	return Finish(dst, start)
}

// BeginParse starts a Parse of statement name whose text the caller appends
// (rendered in place); EndParseText ends the text, then come n parameter
// types (AppendInt32 each), then Finish.
func BeginParse[S ~string | ~[]byte](dst []byte, name S) ([]byte, int) {
	dst, start := Begin(dst, TypeParse)
	return AppendCString(dst, name), start
}

// EndParseText terminates a Parse's text and announces n parameter types.
func EndParseText(dst []byte, n int) []byte {
	return AppendInt16(append(dst, 0), n)
}
