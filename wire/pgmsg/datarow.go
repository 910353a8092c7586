package pgmsg

// DataRow is a DataRow ('D', from the server) body: one row's column
// values, each an int32 length (-1 for NULL) and its bytes.
type DataRow struct {
	n      int
	values []byte
}

// ReadDataRow reads a DataRow body; ok is false when it is malformed.
func ReadDataRow(body []byte) (m DataRow, ok bool) {
	if len(body) < 2 {
		return DataRow{}, false
	}
	n := uint16At(body, 0)
	values, rest, ok := splitValues(body[2:], n)
	if !ok || len(rest) != 0 {
		return DataRow{}, false
	}
	return DataRow{n: n, values: values}, true
}

// NumColumns is how many values the row has.
func (m DataRow) NumColumns() int { return m.n }

// Values walks the row's values.
func (m DataRow) Values() Values { return Values{n: m.n, b: m.values} }

// Append appends the whole message.
func (m DataRow) Append(dst []byte) []byte {
	dst, start := BeginDataRow(dst, m.n)
	return Finish(append(dst, m.values...), start)
}

// BeginDataRow starts a DataRow of n values; the caller appends them
// (AppendInt64Param, AppendNullParam: a column value is encoded as a
// parameter value is) and calls Finish.
func BeginDataRow(dst []byte, n int) ([]byte, int) {
	dst, start := Begin(dst, TypeDataRow)
	return AppendInt16(dst, n), start
}
