package pgmsg

// Query is a simple-protocol Query ('Q') body: one SQL string.
type Query struct {
	SQL []byte // without its NUL
}

// ReadQuery reads a Query body; ok is false unless the body is exactly one
// NUL-terminated string.
func ReadQuery(body []byte) (q Query, ok bool) {
	sql, ok := onlyCString(body)
	return Query{SQL: sql}, ok
}

// Append appends the whole message.
func (q Query) Append(dst []byte) []byte {
	dst, start := Begin(dst, TypeQuery)
	return Finish(AppendCString(dst, q.SQL), start)
}

// BeginQuery starts a Query whose text the caller appends (rendered in
// place); FinishQuery ends it.
func BeginQuery(dst []byte) ([]byte, int) { return Begin(dst, TypeQuery) }

// FinishQuery terminates the text begun with BeginQuery and the message.
func FinishQuery(dst []byte, start int) []byte { return Finish(append(dst, 0), start) }
