package pgmsg

import "strconv"

// Values walks a list of values as Bind and DataRow carry them: an int32
// length (-1 for NULL) then that many bytes. The list was checked when its
// message was read.
type Values struct {
	n int
	b []byte
}

// Len is how many values are left.
func (v *Values) Len() int { return v.n }

// Next returns the next value; null reports a NULL. It must not be called
// once Len is 0.
func (v *Values) Next() (value []byte, null bool) {
	l := int(int32At(v.b, 0))
	v.n--
	if l < 0 {
		v.b = v.b[4:]
		return nil, true
	}
	value, v.b = v.b[4:4+l], v.b[4+l:]
	return value, false
}

// splitValues splits n values off the start of b: the values and the
// rest; ok is false when they do not fit or a length is below -1
// (PostgreSQL refuses it too).
func splitValues(b []byte, n int) (values, rest []byte, ok bool) {
	end := 0
	for range n {
		if end+4 > len(b) {
			return nil, nil, false
		}
		l := int(int32At(b, end))
		end += 4
		if l < -1 || l > len(b)-end {
			return nil, nil, false
		}
		end += max(l, 0)
	}
	return b[:end], b[end:], true
}

// AppendNullParam appends a NULL value.
func AppendNullParam(dst []byte) []byte { return AppendInt32(dst, -1) }

// AppendInt64Param appends an int8 value, in binary or in text.
func AppendInt64Param(dst []byte, v int64, binary bool) []byte {
	if binary {
		dst = AppendInt32(dst, 8)
		return append(dst, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
			byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	at := len(dst)
	dst = strconv.AppendInt(AppendInt32(dst, 0), v, 10)
	putInt32(dst[at:], len(dst)-at-4)
	return dst
}

func putInt32(b []byte, v int) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}
