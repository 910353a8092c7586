package pgmsg

// Describe is a Describe ('D') body: what to describe, 'S' (a prepared
// statement) or 'P' (a portal), and its name.
type Describe struct {
	Kind byte
	Name []byte
}

// ReadDescribe reads a Describe body; ok is false when it is malformed.
// Kind is not checked: the server reports a wrong one.
func ReadDescribe(body []byte) (m Describe, ok bool) {
	kind, name, ok := readTarget(body)
	return Describe{Kind: kind, Name: name}, ok
}

// Append appends the whole message.
func (m Describe) Append(dst []byte) []byte {
	return appendTarget(dst, TypeDescribe, m.Kind, m.Name)
}

// readTarget reads the body shared by Describe and Close: a kind byte and
// a name, nothing after it.
func readTarget(body []byte) (kind byte, name []byte, ok bool) {
	if len(body) < 2 {
		return 0, nil, false
	}
	name, rest, ok := CString(body[1:])
	if !ok || len(rest) != 0 {
		return 0, nil, false
	}
	return body[0], name, true
}

func appendTarget[S ~string | ~[]byte](dst []byte, typ, kind byte, name S) []byte {
	dst, start := Begin(dst, typ)
	dst = append(dst, kind)
	return Finish(AppendCString(dst, name), start)
}
