package pgmsg

// ParameterDescription is a ParameterDescription ('t') body: the type OID
// of each parameter of a prepared statement.
type ParameterDescription struct {
	types []byte // 4 bytes per parameter
}

// ReadParameterDescription reads a ParameterDescription body; ok is false
// when it is malformed.
func ReadParameterDescription(body []byte) (m ParameterDescription, ok bool) {
	_, types, rest, ok := count16(body, 4)
	if !ok || len(rest) != 0 {
		return ParameterDescription{}, false
	}
	return ParameterDescription{types: types}, true
}

// NumParams is how many parameters are described.
func (m ParameterDescription) NumParams() int { return len(m.types) / 4 }

// Type is the type OID of parameter i.
func (m ParameterDescription) Type(i int) uint32 { return uint32(int32At(m.types, 4*i)) }

// WithoutLast is the description without its last n parameters (all of
// them when there are fewer).
func (m ParameterDescription) WithoutLast(n int) ParameterDescription {
	keep := max(m.NumParams()-n, 0)
	return ParameterDescription{types: m.types[:4*keep]}
}

// Append appends the whole message.
func (m ParameterDescription) Append(dst []byte) []byte {
	dst, start := Begin(dst, TypeParameterDescription)
	dst = AppendInt16(dst, m.NumParams())
	return Finish(append(dst, m.types...), start)
}
