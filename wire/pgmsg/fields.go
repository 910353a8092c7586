package pgmsg

// Fields is an ErrorResponse ('E') or NoticeResponse ('N') body: fields,
// each a code byte and a NUL-terminated string, ended by a zero byte.
type Fields struct {
	b []byte // the fields and their end, as sent
}

// ReadFields reads an ErrorResponse or NoticeResponse body; ok is false
// when it is malformed (a field without its NUL, no end, bytes after it).
func ReadFields(body []byte) (m Fields, ok bool) {
	i := 0
	for i < len(body) && body[i] != 0 {
		_, rest, ok := CString(body[i+1:])
		if !ok {
			return Fields{}, false
		}
		i = len(body) - len(rest)
	}
	if i != len(body)-1 {
		return Fields{}, false
	}
	return Fields{b: body}, true
}

// Get returns the value of the first field with code, and whether there
// is one. Codes: 'S' and 'V' severity, 'C' SQLSTATE, 'M' message, 'P'
// position, 'W' context...
func (m Fields) Get(code byte) ([]byte, bool) {
	for it := m.Iter(); ; {
		c, v, ok := it.Next()
		if !ok {
			return nil, false
		}
		if c == code {
			return v, true
		}
	}
}

// Fatal reports whether the severity is FATAL or PANIC: the server ends
// the session after it.
func (m Fields) Fatal() bool {
	v, ok := m.Get('V') // not localised; 'S' on servers before 9.6
	if !ok {
		v, _ = m.Get('S')
	}
	return string(v) == "FATAL" || string(v) == "PANIC"
}

// Iter walks the fields in order.
func (m Fields) Iter() FieldIter { return FieldIter{b: m.b} }

// FieldIter walks the fields of a Fields.
type FieldIter struct{ b []byte }

// Next returns the next field's code and value; ok is false at the end.
func (it *FieldIter) Next() (code byte, value []byte, ok bool) {
	if len(it.b) < 2 || it.b[0] == 0 {
		return 0, nil, false
	}
	code = it.b[0]
	value, it.b, _ = CString(it.b[1:])
	return code, value, true
}

// AppendReplaced appends the body (not the message) with the value of the
// first field with code replaced by value, or that field removed when
// drop is true.
func (m Fields) AppendReplaced(dst []byte, code byte, value []byte, drop bool) []byte {
	done := false
	for it := m.Iter(); ; {
		c, v, ok := it.Next()
		if !ok {
			return append(dst, 0)
		}
		if c == code && !done {
			done = true
			if drop {
				continue
			}
			v = value
		}
		dst = append(dst, c)
		dst = AppendCString(dst, v)
	}
}

// Append appends the whole message of type typ ('E' or 'N').
func (m Fields) Append(dst []byte, typ byte) []byte {
	dst, start := Begin(dst, typ)
	return Finish(append(dst, m.b...), start)
}
