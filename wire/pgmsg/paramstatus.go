package pgmsg

// ParameterStatus is a ParameterStatus ('S', from the server) body: a
// setting's name and its value.
type ParameterStatus struct {
	Name, Value []byte
}

// ReadParameterStatus reads a ParameterStatus body; ok is false when it is
// malformed.
func ReadParameterStatus(body []byte) (m ParameterStatus, ok bool) {
	name, rest, ok1 := CString(body)
	value, rest, ok2 := CString(rest)
	if !ok1 || !ok2 || len(rest) != 0 {
		return ParameterStatus{}, false
	}
	return ParameterStatus{Name: name, Value: value}, true
}

// Append appends the whole message.
func (m ParameterStatus) Append(dst []byte) []byte {
	dst, start := Begin(dst, TypeParameterStatus)
	dst = AppendCString(dst, m.Name)
	return Finish(AppendCString(dst, m.Value), start)
}
