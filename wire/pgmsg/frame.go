package pgmsg

import "encoding/binary"

// Message type bytes the proxy reads or writes. Some bytes mean one
// message from the client and another from the server ('D', 'C', 'E').
const (
	TypeQuery     byte = 'Q'
	TypeParse     byte = 'P'
	TypeBind      byte = 'B'
	TypeDescribe  byte = 'D'
	TypeExecute   byte = 'E'
	TypeClose     byte = 'C'
	TypeSync      byte = 'S'
	TypeFlush     byte = 'H'
	TypeTerminate byte = 'X'

	TypeParseComplete        byte = '1'
	TypeBindComplete         byte = '2'
	TypeCloseComplete        byte = '3'
	TypeCommandComplete      byte = 'C'
	TypeDataRow              byte = 'D'
	TypeErrorResponse        byte = 'E'
	TypeNoticeResponse       byte = 'N'
	TypeParameterDescription byte = 't'
	TypeParameterStatus      byte = 'S'
	TypeReadyForQuery        byte = 'Z'
	TypeRowDescription       byte = 'T'
)

// HeaderSize is the type byte and the length word.
const HeaderSize = 5

// Begin starts a message of type typ at the end of dst; the caller appends
// the body, then Finish writes the length word.
func Begin(dst []byte, typ byte) ([]byte, int) {
	return append(dst, typ, 0, 0, 0, 0), len(dst)
}

// Finish writes the length word of the message begun at start, whose body
// runs to the end of dst.
func Finish(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start+1:], uint32(len(dst)-start-1))
	return dst
}

// FinishLen writes the length word of the message begun at start for a body
// of bodyLen bytes written elsewhere (sent after the header).
func FinishLen(dst []byte, start, bodyLen int) []byte {
	binary.BigEndian.PutUint32(dst[start+1:], uint32(bodyLen+4))
	return dst
}

// Split splits the first whole message off b, a stream of messages: its
// type, its body and what follows it; ok is false when b does not start
// with a whole, well-framed message.
func Split(b []byte) (typ byte, body, rest []byte, ok bool) {
	if len(b) < HeaderSize {
		return 0, nil, nil, false
	}
	n := binary.BigEndian.Uint32(b[1:])
	if n < 4 || uint64(n)+1 > uint64(len(b)) {
		return 0, nil, nil, false
	}
	return b[0], b[HeaderSize : n+1], b[n+1:], true
}

// AppendEmpty appends a message without a body (Sync, Flush, Terminate,
// ParseComplete, BindComplete, CloseComplete...).
func AppendEmpty(dst []byte, typ byte) []byte {
	return append(dst, typ, 0, 0, 0, 4)
}

// AppendInt16 and AppendInt32 append big-endian integers, as every integer
// of the protocol is sent.
func AppendInt16(dst []byte, v int) []byte { return append(dst, byte(v>>8), byte(v)) }

func AppendInt32(dst []byte, v int) []byte {
	return append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// AppendCString appends s and its terminating NUL.
func AppendCString[S ~string | ~[]byte](dst []byte, s S) []byte {
	return append(append(dst, s...), 0)
}

// CString splits b at its first NUL: the string, and the rest after the
// NUL; ok is false when b holds no NUL.
func CString(b []byte) (s, rest []byte, ok bool) {
	for i, c := range b {
		if c == 0 {
			return b[:i], b[i+1:], true
		}
	}
	return nil, nil, false
}

// onlyCString reads a body that is one NUL-terminated string and nothing
// else.
func onlyCString(body []byte) ([]byte, bool) {
	s, rest, ok := CString(body)
	if !ok || len(rest) != 0 {
		return nil, false
	}
	return s, true
}

// uint16At, int16At and int32At read at off; the caller checked the
// length. Counts are unsigned, as PostgreSQL reads them; format codes and
// value lengths signed.
func uint16At(b []byte, off int) int { return int(binary.BigEndian.Uint16(b[off:])) }

func int16At(b []byte, off int) int16 { return int16(binary.BigEndian.Uint16(b[off:])) }

func int32At(b []byte, off int) int32 { return int32(binary.BigEndian.Uint32(b[off:])) }

// count16 reads an int16 count at the start of b followed by width bytes
// per item: the count, the items and the rest; ok is false when the items
// do not fit.
func count16(b []byte, width int) (n int, items, rest []byte, ok bool) {
	if len(b) < 2 {
		return 0, nil, nil, false
	}
	n = uint16At(b, 0)
	if 2+width*n > len(b) {
		return 0, nil, nil, false
	}
	return n, b[2 : 2+width*n], b[2+width*n:], true
}
