package pgmsg

// RowDescription is a RowDescription ('T') body: one field description
// per result column.
type RowDescription struct {
	n      int
	fields []byte
}

// Field describes one result column (its name apart).
type Field struct {
	TableOID     uint32
	Attribute    int16
	TypeOID      uint32
	TypeSize     int16
	TypeModifier int32
	Format       int16
}

// fieldFixed is the size of a field description after its name.
const fieldFixed = 4 + 2 + 4 + 2 + 4 + 2

// ReadRowDescription reads a RowDescription body; ok is false when it is
// malformed.
func ReadRowDescription(body []byte) (m RowDescription, ok bool) {
	if len(body) < 2 {
		return RowDescription{}, false
	}
	m = RowDescription{n: uint16At(body, 0), fields: body[2:]}
	rest := m.fields
	for range m.n {
		_, after, ok := CString(rest)
		if !ok || len(after) < fieldFixed {
			return RowDescription{}, false
		}
		rest = after[fieldFixed:]
	}
	if len(rest) != 0 {
		return RowDescription{}, false
	}
	return m, true
}

// NumFields is how many columns are described.
func (m RowDescription) NumFields() int { return m.n }

// Fields walks the descriptions.
func (m RowDescription) Fields() FieldDescs { return FieldDescs{n: m.n, b: m.fields} }

// FieldDescs walks the field descriptions of a RowDescription.
type FieldDescs struct {
	n int
	b []byte
}

// Next returns the next column's name and description; ok is false at
// the end.
func (d *FieldDescs) Next() (name []byte, f Field, ok bool) {
	if d.n == 0 {
		return nil, Field{}, false
	}
	d.n--
	name, b, _ := CString(d.b)
	f = Field{
		TableOID:     uint32(int32At(b, 0)),
		Attribute:    int16At(b, 4),
		TypeOID:      uint32(int32At(b, 6)),
		TypeSize:     int16At(b, 10),
		TypeModifier: int32At(b, 12),
		Format:       int16At(b, 16),
	}
	d.b = b[fieldFixed:]
	return name, f, true
}

// Append appends the whole message.
func (m RowDescription) Append(dst []byte) []byte {
	dst, start := BeginRowDescription(dst, m.n)
	return Finish(append(dst, m.fields...), start)
}

// BeginRowDescription starts a RowDescription of n fields; the caller
// appends them (AppendField) and calls Finish.
func BeginRowDescription(dst []byte, n int) ([]byte, int) {
	dst, start := Begin(dst, TypeRowDescription)
	return AppendInt16(dst, n), start
}

// AppendField appends the description of the column name.
func AppendField[S ~string | ~[]byte](dst []byte, name S, f Field) []byte {
	dst = AppendCString(dst, name)
	dst = AppendInt32(dst, int(f.TableOID))
	dst = AppendInt16(dst, int(f.Attribute))
	dst = AppendInt32(dst, int(f.TypeOID))
	dst = AppendInt16(dst, int(f.TypeSize))
	dst = AppendInt32(dst, int(f.TypeModifier))
	return AppendInt16(dst, int(f.Format))
}
