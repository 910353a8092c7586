package pgmsg

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestBindWithParams checks the Bind the proxy sends for a statement with
// injected parameters against pgproto3's encoding of the same Bind.
func TestBindWithParams(t *testing.T) {
	const id = int64(1234567890123)
	for _, tc := range []struct {
		name    string
		in      pgproto3.Bind
		binary  bool
		formats []int16
	}{
		{"no format codes: text", pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("x")}}, false, nil},
		{"one binary code for all", pgproto3.Bind{ParameterFormatCodes: []int16{1}, Parameters: [][]byte{make([]byte, 4)}}, true, []int16{1}},
		{"one text code for all", pgproto3.Bind{ParameterFormatCodes: []int16{0}, Parameters: [][]byte{[]byte("7")}}, false, []int16{0}},
		{"a code per parameter: the new ones text", pgproto3.Bind{DestinationPortal: "p", ParameterFormatCodes: []int16{1, 0},
			Parameters: [][]byte{make([]byte, 8), nil}, ResultFormatCodes: []int16{1}}, false, []int16{1, 0, 0, 0}},
		{"no parameters of its own", pgproto3.Bind{ResultFormatCodes: []int16{0, 1}}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := ReadBind(encoded(t, &tc.in))
			if !ok {
				t.Fatal("ReadBind refused pgproto3's Bind")
			}
			if m.AppendedParamsBinary() != tc.binary {
				t.Fatalf("AppendedParamsBinary = %v", m.AppendedParamsBinary())
			}
			dst, start := m.AppendWithParams([]byte("x"), 2)
			dst = AppendInt64Param(dst, id, m.AppendedParamsBinary())
			dst = AppendNullParam(dst)
			dst = m.FinishWithParams(dst, start)
			want := tc.in
			want.ParameterFormatCodes = tc.formats
			idValue := []byte("1234567890123")
			if tc.binary {
				idValue = []byte{0, 0, 0x01, 0x1f, 0x71, 0xfb, 0x04, 0xcb}
			}
			want.Parameters = append(append([][]byte(nil), tc.in.Parameters...), idValue, nil)
			wantMsg, err := want.Encode([]byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, wantMsg) {
				t.Fatalf("got  % x\nwant % x", dst, wantMsg)
			}
		})
	}
}

func TestFieldsFatal(t *testing.T) {
	for _, tc := range []struct {
		e    pgproto3.ErrorResponse
		want bool
	}{
		{pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01"}, true},
		{pgproto3.ErrorResponse{Severity: "PANIC", Code: "XX000"}, true},
		{pgproto3.ErrorResponse{Severity: "ERREUR", SeverityUnlocalized: "ERROR", Code: "42601"}, false},
		{pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "ERROR"}, false},
		// Regression: the proxy's first reader looked at whichever of S
		// and V came first, and the server sends S (localised) first.
		{pgproto3.ErrorResponse{Severity: "ВАЖНО", SeverityUnlocalized: "FATAL", Code: "57P01"}, true},
		{pgproto3.ErrorResponse{Code: "42601"}, false},
	} {
		m, ok := ReadFields(encoded(t, &tc.e))
		if !ok {
			t.Fatalf("%+v: ReadFields refused it", tc.e)
		}
		if m.Fatal() != tc.want {
			t.Errorf("%+v: Fatal() = %v", tc.e, m.Fatal())
		}
	}
}

func TestBeginBind(t *testing.T) {
	dst, start := BeginBind([]byte("x"), "", "stmt", 2)
	dst = AppendInt64Param(dst, -5, false)
	dst = AppendNullParam(dst)
	dst = FinishBind(dst, start)
	want, _ := (&pgproto3.Bind{PreparedStatement: "stmt", Parameters: [][]byte{[]byte("-5"), nil}}).Encode([]byte("x"))
	if !bytes.Equal(dst, want) {
		t.Fatalf("got  % x\nwant % x", dst, want)
	}
}

func TestSplit(t *testing.T) {
	sync := AppendEmpty(nil, TypeSync)
	stream := AppendExecute(append([]byte(nil), sync...), "", 0)
	typ, body, rest, ok := Split(stream)
	if !ok || typ != TypeSync || len(body) != 0 || !bytes.Equal(rest, stream[len(sync):]) {
		t.Fatalf("Split(Sync, Execute) = %c % x % x %v", typ, body, rest, ok)
	}
	if typ, body, rest, ok = Split(rest); !ok || typ != TypeExecute || !bytes.Equal(body, []byte{0, 0, 0, 0, 0}) || len(rest) != 0 {
		t.Fatalf("Split(Execute) = %c % x % x %v", typ, body, rest, ok)
	}
	for _, b := range [][]byte{nil, sync[:4], stream[len(sync) : len(stream)-1], {'S', 0, 0, 0, 3}} {
		if _, _, _, ok := Split(b); ok {
			t.Errorf("Split(% x) accepted a cut or ill-framed message", b)
		}
	}
}

func TestMalformedBodiesAreRefused(t *testing.T) {
	bind := encoded(t, &pgproto3.Bind{Parameters: [][]byte{[]byte("1")}})
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"bind with a byte after it", func() bool { _, ok := ReadBind(append(bind[:len(bind):len(bind)], 0)); return ok }()},
		{"bind cut short", func() bool { _, ok := ReadBind(bind[:len(bind)-1]); return ok }()},
		{"bind with length -2", func() bool {
			_, ok := ReadBind([]byte{0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe, 0, 0})
			return ok
		}()},
		{"parse with a missing type", func() bool { _, ok := ReadParse([]byte{'s', 0, 'q', 0, 0, 1}); return ok }()},
		{"execute without row limit", func() bool { _, ok := ReadExecute([]byte{0}); return ok }()},
		{"describe with a byte after the name", func() bool { _, ok := ReadDescribe([]byte{'S', 0, 0}); return ok }()},
		{"fields without end", func() bool { _, ok := ReadFields([]byte("Mx\x00")); return ok }()},
		{"query without nul", func() bool { _, ok := ReadQuery([]byte("SELECT 1")); return ok }()},
		{"ready with two bytes", func() bool { _, ok := ReadReadyForQuery([]byte("II")); return ok }()},
	} {
		if tc.ok {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// TestViewsDoNotAllocate: reading a message and writing one back costs no
// allocation (the relay path's rule).
func TestViewsDoNotAllocate(t *testing.T) {
	bind := encoded(t, &pgproto3.Bind{PreparedStatement: "s", ParameterFormatCodes: []int16{1}, Parameters: [][]byte{make([]byte, 8)}})
	parse := encoded(t, &pgproto3.Parse{Name: "s", Query: "SELECT $1", ParameterOIDs: []uint32{20}})
	errBody := encoded(t, &pgproto3.ErrorResponse{Severity: "ERROR", Code: "42601", Message: "m", Position: 3})
	dst := make([]byte, 0, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		m, _ := ReadBind(bind)
		d, start := m.AppendWithParams(dst[:0], 1)
		d = AppendInt64Param(d, 42, m.AppendedParamsBinary())
		d = m.FinishWithParams(d, start)
		p, _ := ReadParse(parse)
		d = p.Append(d)
		e, _ := ReadFields(errBody)
		_, _ = e.Get('P')
		d = e.AppendReplaced(d, 'P', []byte("1"), false)
		dst = d
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run", allocs)
	}
}
