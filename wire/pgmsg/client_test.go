package pgmsg

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Fuzz targets of the client messages: whatever the bytes, reading never
// panics; what is read appends back byte for byte, and agrees with
// pgproto3's decoding. Seeds: testdata/fuzz/Fuzz<Message>.

func FuzzQuery(f *testing.F) {
	f.Add(encoded(f, &pgproto3.Query{String: "SELECT snowflake.nextval()"}))
	f.Add([]byte{0})
	f.Add([]byte("no nul"))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := ReadQuery(body)
		if !ok {
			return
		}
		checkRoundTrip(t, TypeQuery, body, m.Append)
		var q pgproto3.Query
		checkDecodes(t, &q, body)
		if q.String != string(m.SQL) {
			t.Fatalf("SQL %q, pgproto3 %q", m.SQL, q.String)
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add(encoded(f, &pgproto3.Parse{Name: "s1", Query: "INSERT INTO t (v) VALUES ($1)", ParameterOIDs: []uint32{25}}))
	f.Add(encoded(f, &pgproto3.Parse{Query: "SELECT 1"}))
	f.Add(encoded(f, &pgproto3.Parse{Query: "SELECT $1, $2", ParameterOIDs: []uint32{0, 20}}))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := ReadParse(body)
		if !ok {
			return
		}
		checkRoundTrip(t, TypeParse, body, m.Append)
		var p pgproto3.Parse
		checkDecodes(t, &p, body)
		if p.Name != string(m.Name) || p.Query != string(m.Query) || len(p.ParameterOIDs) != m.NumTypes() {
			t.Fatalf("view %q %q %d, pgproto3 %+v", m.Name, m.Query, m.NumTypes(), p)
		}
	})
}

func FuzzBind(f *testing.F) {
	f.Add(encoded(f, &pgproto3.Bind{PreparedStatement: "s", ParameterFormatCodes: []int16{1}, Parameters: [][]byte{make([]byte, 8)}}))
	f.Add(encoded(f, &pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "s", ParameterFormatCodes: []int16{0, 1},
		Parameters: [][]byte{[]byte("12"), nil}, ResultFormatCodes: []int16{1, 0, 1}}))
	f.Add(encoded(f, &pgproto3.Bind{}))
	f.Fuzz(func(t *testing.T, body []byte) {
		portal, stmt, named := BindNames(body)
		m, ok := ReadBind(body)
		if !ok {
			return
		}
		if !named || !bytes.Equal(portal, m.Portal) || !bytes.Equal(stmt, m.Statement) {
			t.Fatalf("BindNames %q %q %v, ReadBind %q %q", portal, stmt, named, m.Portal, m.Statement)
		}
		checkRoundTrip(t, TypeBind, body, m.Append)
		var b pgproto3.Bind
		checkDecodes(t, &b, body)
		if b.DestinationPortal != string(m.Portal) || b.PreparedStatement != string(m.Statement) ||
			len(b.ParameterFormatCodes) != m.NumFormats() || len(b.ResultFormatCodes) != m.NumResultFormats() ||
			len(b.Parameters) != m.NumParams() {
			t.Fatalf("view %q %q %d/%d/%d, pgproto3 %+v", m.Portal, m.Statement, m.NumFormats(), m.NumParams(), m.NumResultFormats(), b)
		}
		vs := m.Params()
		for i, want := range b.Parameters {
			v, null := vs.Next()
			if null != (want == nil) || !bytes.Equal(v, want) {
				t.Fatalf("parameter %d: % x null %v, pgproto3 % x", i, v, null, want)
			}
		}
		if vs.Len() != 0 {
			t.Fatalf("%d values left after the last", vs.Len())
		}
		for i, want := range b.ResultFormatCodes {
			if got := m.ResultFormat(i); got != want {
				t.Fatalf("result format %d: %d, pgproto3 %d", i, got, want)
			}
		}
	})
}

func FuzzDescribe(f *testing.F) {
	f.Add(encoded(f, &pgproto3.Describe{ObjectType: 'S', Name: "s"}))
	f.Add(encoded(f, &pgproto3.Describe{ObjectType: 'P'}))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := ReadDescribe(body)
		if !ok {
			return
		}
		checkRoundTrip(t, TypeDescribe, body, m.Append)
		if m.Kind != 'S' && m.Kind != 'P' {
			return // pgproto3 refuses other kinds; the server reports them
		}
		var d pgproto3.Describe
		checkDecodes(t, &d, body)
		if d.ObjectType != m.Kind || d.Name != string(m.Name) {
			t.Fatalf("view %c %q, pgproto3 %+v", m.Kind, m.Name, d)
		}
	})
}

func FuzzClose(f *testing.F) {
	f.Add(encoded(f, &pgproto3.Close{ObjectType: 'S', Name: "s"}))
	f.Add(encoded(f, &pgproto3.Close{ObjectType: 'P', Name: "portal"}))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := ReadClose(body)
		if !ok {
			return
		}
		checkRoundTrip(t, TypeClose, body, m.Append)
		checkRoundTrip(t, TypeClose, body, func(dst []byte) []byte { return AppendClose(dst, m.Kind, m.Name) })
		if m.Kind != 'S' && m.Kind != 'P' {
			return
		}
		var c pgproto3.Close
		checkDecodes(t, &c, body)
		if c.ObjectType != m.Kind || c.Name != string(m.Name) {
			t.Fatalf("view %c %q, pgproto3 %+v", m.Kind, m.Name, c)
		}
	})
}

func FuzzExecute(f *testing.F) {
	f.Add(encoded(f, &pgproto3.Execute{}))
	f.Add(encoded(f, &pgproto3.Execute{Portal: "p", MaxRows: 1}))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, ok := ReadExecute(body)
		if !ok {
			return
		}
		checkRoundTrip(t, TypeExecute, body, m.Append)
		var e pgproto3.Execute
		checkDecodes(t, &e, body)
		if e.Portal != string(m.Portal) || e.MaxRows != uint32(m.MaxRows) {
			t.Fatalf("view %q %d, pgproto3 %+v", m.Portal, m.MaxRows, e)
		}
	})
}
