package pgmsg

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Fuzz targets of the server messages the proxy reads or rewrites, as for
// the client messages (client_test.go).

func FuzzCommandComplete(f *testing.F) {
	f.Add(encoded(f, &pgproto3.CommandComplete{CommandTag: []byte("INSERT 0 1")}))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := ReadCommandComplete(body)
		if !ok {
			return
		}
		checkRoundTrip(t, TypeCommandComplete, body, m.Append)
		var c pgproto3.CommandComplete
		checkDecodes(t, &c, body)
		if !bytes.Equal(c.CommandTag, m.Tag) {
			t.Fatalf("view %q, pgproto3 %q", m.Tag, c.CommandTag)
		}
	})
}

func FuzzParameterDescription(f *testing.F) {
	f.Add(encoded(f, &pgproto3.ParameterDescription{ParameterOIDs: []uint32{25, 20, 20}}))
	f.Add(encoded(f, &pgproto3.ParameterDescription{}))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := ReadParameterDescription(body)
		if !ok {
			return
		}
		checkRoundTrip(t, TypeParameterDescription, body, m.Append)
		var p pgproto3.ParameterDescription
		checkDecodes(t, &p, body)
		if len(p.ParameterOIDs) != m.NumParams() {
			t.Fatalf("view %d parameters, pgproto3 %d", m.NumParams(), len(p.ParameterOIDs))
		}
		for i, oid := range p.ParameterOIDs {
			if m.Type(i) != oid {
				t.Fatalf("parameter %d: %d, pgproto3 %d", i, m.Type(i), oid)
			}
		}
		for drop := range 3 {
			w := m.WithoutLast(drop)
			if w.NumParams() != max(m.NumParams()-drop, 0) {
				t.Fatalf("WithoutLast(%d) of %d: %d", drop, m.NumParams(), w.NumParams())
			}
			if _, ok := ReadParameterDescription(w.Append(nil)[HeaderSize:]); !ok {
				t.Fatalf("WithoutLast(%d) appends a malformed message", drop)
			}
		}
	})
}

func FuzzFields(f *testing.F) {
	f.Add(encoded(f, &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "42601",
		Message: "syntax error", Position: 12, Where: "PL/pgSQL function snowflake.nextval(regclass) line 3 at RAISE"}))
	f.Add(encoded(f, &pgproto3.ErrorResponse{Severity: "FATAL", Code: "57P01", Message: "terminating connection"}))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := ReadFields(body)
		if !ok {
			return
		}
		checkRoundTrip(t, TypeErrorResponse, body, func(dst []byte) []byte { return m.Append(dst, TypeErrorResponse) })
		var e pgproto3.ErrorResponse
		checkDecodes(t, &e, body)
		if v, _ := m.Get('M'); string(v) != e.Message && countCode(m, 'M') == 1 {
			t.Fatalf("message %q, pgproto3 %q", v, e.Message)
		}
		// Replacing a field with its own value changes nothing; dropping
		// one leaves a well-formed body without it.
		for it := m.Iter(); ; {
			code, v, ok := it.Next()
			if !ok {
				break
			}
			first, _ := m.Get(code)
			if !bytes.Equal(first, v) {
				continue // a repeated code: only the first is replaced
			}
			if same := m.AppendReplaced(nil, code, v, false); !bytes.Equal(same, body) {
				t.Fatalf("replacing %c with its own value: % x, was % x", code, same, body)
			}
			dropped, ok := ReadFields(m.AppendReplaced(nil, code, nil, true))
			if !ok {
				t.Fatalf("dropping %c leaves a malformed body", code)
			}
			if _, still := dropped.Get(code); still && countCode(m, code) < 2 {
				t.Fatalf("dropping %c left it", code)
			}
		}
	})
}

func FuzzReadyForQuery(f *testing.F) {
	f.Add([]byte("I"))
	f.Add([]byte("IT"))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := ReadReadyForQuery(body)
		if !ok {
			return
		}
		checkRoundTrip(t, TypeReadyForQuery, body, m.Append)
		var r pgproto3.ReadyForQuery
		checkDecodes(t, &r, body)
		if r.TxStatus != m.Status {
			t.Fatalf("view %c, pgproto3 %c", m.Status, r.TxStatus)
		}
	})
}

func FuzzParameterStatus(f *testing.F) {
	f.Add(encoded(f, &pgproto3.ParameterStatus{Name: "is_superuser", Value: "off"}))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := ReadParameterStatus(body)
		if !ok {
			return
		}
		checkRoundTrip(t, TypeParameterStatus, body, m.Append)
		var p pgproto3.ParameterStatus
		checkDecodes(t, &p, body)
		if p.Name != string(m.Name) || p.Value != string(m.Value) {
			t.Fatalf("view %q=%q, pgproto3 %+v", m.Name, m.Value, p)
		}
	})
}

func FuzzDataRow(f *testing.F) {
	f.Add(encoded(f, &pgproto3.DataRow{Values: [][]byte{[]byte("on"), nil, []byte(`{"s":[1,2]}`)}}))
	f.Add(encoded(f, &pgproto3.DataRow{}))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := ReadDataRow(body)
		if !ok {
			return
		}
		checkRoundTrip(t, TypeDataRow, body, m.Append)
		var d pgproto3.DataRow
		checkDecodes(t, &d, body)
		vs := m.Values()
		if vs.Len() != len(d.Values) {
			t.Fatalf("view %d values, pgproto3 %d", vs.Len(), len(d.Values))
		}
		for i, want := range d.Values {
			v, null := vs.Next()
			if null != (want == nil) || !bytes.Equal(v, want) {
				t.Fatalf("value %d: % x null %v, pgproto3 % x", i, v, null, want)
			}
		}
	})
}

func FuzzRowDescription(f *testing.F) {
	f.Add(encoded(f, &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{
		{Name: []byte("nextval"), DataTypeOID: 20, DataTypeSize: 8, TypeModifier: -1},
		{Name: []byte("id"), TableOID: 16384, TableAttributeNumber: 1, DataTypeOID: 20, DataTypeSize: 8, TypeModifier: -1, Format: 1}}}))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := ReadRowDescription(body)
		if !ok {
			return
		}
		checkRoundTrip(t, TypeRowDescription, body, m.Append)
		var r pgproto3.RowDescription
		checkDecodes(t, &r, body)
		fs := m.Fields()
		rebuilt, start := BeginRowDescription(nil, m.NumFields())
		for i, want := range r.Fields {
			name, got, ok := fs.Next()
			if !ok || string(name) != string(want.Name) || got.TableOID != want.TableOID || got.Attribute != int16(want.TableAttributeNumber) ||
				got.TypeOID != want.DataTypeOID || got.TypeSize != want.DataTypeSize || got.TypeModifier != want.TypeModifier || got.Format != want.Format {
				t.Fatalf("field %d: %q %+v, pgproto3 %+v", i, name, got, want)
			}
			rebuilt = AppendField(rebuilt, name, got)
		}
		if rebuilt = Finish(rebuilt, start); !bytes.Equal(rebuilt[HeaderSize:], body) {
			t.Fatalf("rebuilt field by field: % x, was % x", rebuilt[HeaderSize:], body)
		}
	})
}

// countCode is how many fields have code (pgproto3 keeps the last of
// repeated ones, the view the first).
func countCode(m Fields, code byte) int {
	n := 0
	for it := m.Iter(); ; {
		c, _, ok := it.Next()
		if !ok {
			return n
		}
		if c == code {
			n++
		}
	}
}
