package pgmsg

// ReadyForQuery is a ReadyForQuery ('Z') body: the transaction status, 'I'
// (idle), 'T' (in a transaction block) or 'E' (in a failed one).
type ReadyForQuery struct {
	Status byte
}

// ReadReadyForQuery reads a ReadyForQuery body; ok is false unless it is
// one byte.
func ReadReadyForQuery(body []byte) (m ReadyForQuery, ok bool) {
	if len(body) != 1 {
		return ReadyForQuery{}, false
	}
	return ReadyForQuery{Status: body[0]}, true
}

// Append appends the whole message.
func (m ReadyForQuery) Append(dst []byte) []byte {
	return append(dst, TypeReadyForQuery, 0, 0, 0, 5, m.Status)
}
