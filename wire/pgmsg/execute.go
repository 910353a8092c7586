package pgmsg

// Execute is an Execute ('E') body: a portal and the most rows to return
// (0 or less: all of them).
type Execute struct {
	Portal  []byte
	MaxRows int32
}

// ReadExecute reads an Execute body; ok is false when it is malformed.
func ReadExecute(body []byte) (m Execute, ok bool) {
	portal, rest, ok := CString(body)
	if !ok || len(rest) != 4 {
		return Execute{}, false
	}
	return Execute{Portal: portal, MaxRows: int32At(rest, 0)}, true
}

// Append appends the whole message.
func (m Execute) Append(dst []byte) []byte {
	return AppendExecute(dst, m.Portal, m.MaxRows)
}

// AppendExecute appends an Execute of portal without building a view.
func AppendExecute[S ~string | ~[]byte](dst []byte, portal S, maxRows int32) []byte {
	dst, start := Begin(dst, TypeExecute)
	dst = AppendCString(dst, portal)
	return Finish(AppendInt32(dst, int(maxRows)), start)
}
