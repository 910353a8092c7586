package pgmsg

// Bind is a Bind ('B') body: a portal, the prepared statement it binds,
// the parameters' format codes, their values and the result columns'
// format codes. The values stay as sent; Params walks them.
type Bind struct {
	Portal, Statement []byte

	formats []byte // 2 bytes per format code
	nparams int
	params  []byte // nparams × (int32 length, bytes)
	results []byte // 2 bytes per format code
}

// BindNames reads only a Bind body's portal and statement names: what a
// message that cannot concern the proxy needs.
func BindNames(body []byte) (portal, statement []byte, ok bool) {
	portal, rest, ok1 := CString(body)
	statement, _, ok2 := CString(rest)
	return portal, statement, ok1 && ok2
}

// ReadBind reads a whole Bind body; ok is false when it is malformed (the
// caller passes it on, and the server reports it).
func ReadBind(body []byte) (m Bind, ok bool) {
	portal, rest, ok1 := CString(body)
	statement, rest, ok2 := CString(rest)
	if !ok1 || !ok2 {
		return Bind{}, false
	}
	m = Bind{Portal: portal, Statement: statement}
	if _, m.formats, rest, ok = count16(rest, 2); !ok || len(rest) < 2 {
		return Bind{}, false
	}
	m.nparams = uint16At(rest, 0)
	if m.params, rest, ok = splitValues(rest[2:], m.nparams); !ok {
		return Bind{}, false
	}
	if _, m.results, rest, ok = count16(rest, 2); !ok || len(rest) != 0 {
		return Bind{}, false
	}
	return m, true
}

// NumFormats is how many parameter format codes were sent: 0 (all text),
// 1 (one for all) or one per parameter.
func (m Bind) NumFormats() int { return len(m.formats) / 2 }

// ParamFormat is the format code of parameter i (0 text, 1 binary; others
// are the server's to refuse).
func (m Bind) ParamFormat(i int) int16 { return formatAt(m.formats, i) }

// NumParams is how many parameter values were sent.
func (m Bind) NumParams() int { return m.nparams }

// Params walks the parameter values.
func (m Bind) Params() Values { return Values{n: m.nparams, b: m.params} }

// NumResultFormats is how many result format codes were sent: 0 (all
// text), 1 (one for all) or one per column.
func (m Bind) NumResultFormats() int { return len(m.results) / 2 }

// ResultFormat is the format code of result column i of a result of any
// width (0 text, 1 binary; others are the server's to refuse).
func (m Bind) ResultFormat(i int) int16 { return formatAt(m.results, i) }

// AppendedParamsBinary reports whether parameters appended by
// AppendWithParams are read by the server in binary: only when one format
// code, binary, applies to every parameter; otherwise they go as text.
func (m Bind) AppendedParamsBinary() bool {
	return m.NumFormats() == 1 && m.ParamFormat(0) == 1
}

// Append appends the whole message.
func (m Bind) Append(dst []byte) []byte {
	dst, start := m.AppendWithParams(dst, 0)
	return m.FinishWithParams(dst, start)
}

// AppendWithParams appends the message with room for extra more
// parameters: the header, the names, the format codes (text for the extra
// ones when there is one code per parameter), the parameter count and the
// values as sent. The caller then appends the extra values (AppendInt64Param,
// AppendNullParam...), in the format AppendedParamsBinary tells, and calls
// FinishWithParams.
func (m Bind) AppendWithParams(dst []byte, extra int) ([]byte, int) {
	dst, start := Begin(dst, TypeBind)
	dst = AppendCString(dst, m.Portal)
	dst = AppendCString(dst, m.Statement)
	n := m.NumFormats()
	if n > 1 {
		dst = AppendInt16(dst, n+extra)
		dst = append(dst, m.formats...)
		for range extra {
			dst = AppendInt16(dst, 0)
		}
	} else {
		dst = AppendInt16(dst, n)
		dst = append(dst, m.formats...)
	}
	dst = AppendInt16(dst, m.nparams+extra)
	return append(dst, m.params...), start
}

// FinishWithParams appends the result format codes and ends the message
// begun by AppendWithParams.
func (m Bind) FinishWithParams(dst []byte, start int) []byte {
	dst = AppendInt16(dst, m.NumResultFormats())
	return Finish(append(dst, m.results...), start)
}

// formatAt is the format code that applies to item i under codes (2 bytes
// each): none means text, one applies to all.
func formatAt(codes []byte, i int) int16 {
	switch len(codes) / 2 {
	case 0:
		return 0
	case 1:
		return int16At(codes, 0)
	}
	if 2*i+2 > len(codes) {
		return 0
	}
	return int16At(codes, 2*i)
}

// BeginBind starts a Bind of statement to portal whose nparams parameters
// are all text and whose results are all text: the caller appends the
// values (AppendInt64Param...) and calls FinishBind.
func BeginBind[P, S ~string | ~[]byte](dst []byte, portal P, statement S, nparams int) ([]byte, int) {
	dst, start := Begin(dst, TypeBind)
	dst = AppendCString(dst, portal)
	dst = AppendCString(dst, statement)
	dst = AppendInt16(dst, 0) // no format codes: all parameters in text
	return AppendInt16(dst, nparams), start
}

// FinishBind ends a Bind begun with BeginBind.
func FinishBind(dst []byte, start int) []byte {
	return Finish(AppendInt16(dst, 0), start) // no format codes: all results in text
}
