package pgmsg

// Close is a Close ('C') body: what to close, 'S' (a prepared statement)
// or 'P' (a portal), and its name.
type Close struct {
	Kind byte
	Name []byte
}

// ReadClose reads a Close body; ok is false when it is malformed. Kind is
// not checked: the server reports a wrong one.
func ReadClose(body []byte) (m Close, ok bool) {
	kind, name, ok := readTarget(body)
	return Close{Kind: kind, Name: name}, ok
}

// Append appends the whole message.
func (m Close) Append(dst []byte) []byte {
	return appendTarget(dst, TypeClose, m.Kind, m.Name)
}

// AppendClose appends a Close of kind ('S' or 'P') and name without
// building a view (name may be a string constant).
func AppendClose[S ~string | ~[]byte](dst []byte, kind byte, name S) []byte {
	return appendTarget(dst, TypeClose, kind, name)
}
