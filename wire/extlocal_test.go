package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

func encode(msgs ...pgproto3.FrontendMessage) []byte {
	var b []byte
	for _, m := range msgs {
		b, _ = m.Encode(b)
	}
	return b
}

// send writes msgs in one write and returns the raw answer up to
// ReadyForQuery.
func (s *rawSession) send(msgs ...pgproto3.FrontendMessage) []byte {
	_, _ = s.c.Write(encode(msgs...))
	return s.untilReady()
}

// group is Bind of the unnamed portal, an optional Describe of it, Execute
// and Sync.
func group(stmt string, formats []int16, describe bool, maxRows uint32) []pgproto3.FrontendMessage {
	m := []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: stmt, ResultFormatCodes: formats}}
	if describe {
		m = append(m, &pgproto3.Describe{ObjectType: 'P'})
	}
	return append(m, &pgproto3.Execute{MaxRows: maxRows}, &pgproto3.Sync{})
}

// Local answers in the extended protocol must be byte-identical to the
// server's answer to the same messages for the SELECT with the value as a
// literal: text and binary results, with and without Describe, row limits,
// named and unnamed statements. In a transaction block the group goes to
// the server (its finished portal outlives the Sync), with the same answer.
func TestExtendedLocalAnswerMatchesServer(t *testing.T) {
	srv, db, p, sf := snowflakeSetup(t)
	viaProxy := startRaw(t, p.addr, srv.Superuser(), db)
	direct := startRaw(t, srv.Addr(), srv.Superuser(), db)
	for _, stmt := range []string{"s1", ""} {
		viaProxy.send(&pgproto3.Parse{Name: stmt, Query: "SELECT snowflake.nextval()"}, &pgproto3.Sync{})
		for _, begin := range []bool{false, true} {
			if begin {
				viaProxy.query("BEGIN")
				direct.query("BEGIN")
				if stmt == "" { // the Query destroyed the unnamed statement
					viaProxy.send(&pgproto3.Parse{Name: stmt, Query: "SELECT snowflake.nextval()"}, &pgproto3.Sync{})
				}
			}
			for _, formats := range [][]int16{nil, {0}, {1}} {
				for _, describe := range []bool{false, true} {
					for _, maxRows := range []uint32{0, 5, 0xffffffff} {
						name := fmt.Sprintf("stmt=%q begin=%v formats=%v describe=%v max=%d", stmt, begin, formats, describe, maxRows)
						before := p.Stats()
						got := viaProxy.send(group(stmt, formats, describe, maxRows)...)
						local := uint64(1)
						if begin {
							local = 0
						}
						if st := p.Stats(); st.LocalAnswers != before.LocalAnswers+local || st.LocalIDs != before.LocalIDs+local ||
							st.FastIDs != before.FastIDs+1 {
							t.Fatalf("%s: %d local answers, want %d: %+v\n%q", name, st.LocalAnswers-before.LocalAnswers, local, st, got)
						}
						id := sf.next.Load()<<12 | 5
						direct.send(&pgproto3.Parse{Name: "d", Query: "SELECT " + strconv.FormatInt(id, 10) + "::int8 AS nextval"}, &pgproto3.Sync{})
						want := direct.send(group("d", formats, describe, maxRows)...)
						direct.send(&pgproto3.Close{ObjectType: 'S', Name: "d"}, &pgproto3.Sync{})
						if !bytes.Equal(got, want) {
							t.Fatalf("%s: local answer differs:\n got %q\nwant %q", name, got, want)
						}
					}
				}
			}
			if begin {
				viaProxy.query("COMMIT")
				direct.query("COMMIT")
			}
		}
	}
}

// Groups the proxy must leave to the server: a row limit of 1 (the server
// suspends the portal), a failed transaction, a pipeline with something
// owed, and a Flush instead of a Sync. After a local answer the unnamed
// portal does not exist, as on the server.
func TestExtendedLocalAnswerForwarded(t *testing.T) {
	srv, db, p, _ := snowflakeSetup(t)
	s := startRaw(t, p.addr, srv.Superuser(), db)
	s.send(&pgproto3.Parse{Name: "s1", Query: "SELECT snowflake.nextval()"}, &pgproto3.Sync{})
	local := func() uint64 { return p.Stats().LocalAnswers }
	typesOf := func(b []byte) string {
		var out []byte
		for len(b) >= 5 {
			out = append(out, b[0])
			b = b[1+int(binary.BigEndian.Uint32(b[1:])):]
		}
		return string(out)
	}

	before := local()
	if got := typesOf(s.send(group("s1", nil, true, 1)...)); got != "2TDsZ" || local() != before {
		t.Fatalf("max rows 1: %q, local %d -> %d", got, before, local())
	}

	// Pipeline: Parse of another statement first, so the Bind is not at a
	// safe point.
	msgs := append([]pgproto3.FrontendMessage{&pgproto3.Parse{Name: "s2", Query: "SELECT snowflake.nextval()"}}, group("s1", nil, false, 0)...)
	if got := typesOf(s.send(msgs...)); got != "12DCZ" || local() != before {
		t.Fatalf("pipeline: %q, local %d -> %d", got, before, local())
	}

	// A local answer, then an Execute of the unnamed portal: the server
	// says it does not exist, as it would have after the implicit commit.
	s.send(group("s1", nil, false, 0)...)
	if local() != before+1 {
		t.Fatalf("not answered locally")
	}
	if got := string(s.send(&pgproto3.Execute{}, &pgproto3.Sync{})); !bytes.Contains([]byte(got), []byte("C34000")) {
		t.Fatalf("execute of a finished portal: %q", got)
	}

	// Failed transaction: the server gives 25P02.
	s.query("BEGIN")
	s.query("SELECT 1/0")
	before = local()
	if got := string(s.send(group("s1", nil, true, 0)...)); !bytes.Contains([]byte(got), []byte("C25P02")) || local() != before {
		t.Fatalf("failed transaction: %q", got)
	}
	s.query("ROLLBACK")

	// In a transaction block with a live unnamed portal the server's portal
	// would be replaced: forwarded. After a new transaction, local again.
	s.query("BEGIN")
	s.send(&pgproto3.Bind{PreparedStatement: "s1"}, &pgproto3.Sync{}) // forwarded: has no Execute
	before = local()
	if got := typesOf(s.send(group("s1", nil, false, 0)...)); got != "2DCZ" || local() != before {
		t.Fatalf("live portal: %q", got)
	}
	s.query("COMMIT")
	s.send(group("s1", nil, false, 0)...)
	if local() != before+1 {
		t.Fatalf("not answered locally after commit")
	}

	// A statement whose Parse failed (the name exists on the server) is
	// never answered locally: the name keeps the server's statement, which
	// runs (namedparse.go).
	s.send(&pgproto3.Parse{Name: "s3", Query: "SELECT 1"}, &pgproto3.Sync{})
	s.send(&pgproto3.Parse{Name: "s3", Query: "SELECT snowflake.nextval()"}, &pgproto3.Sync{}) // 42P05
	before = local()
	if got := s.send(group("s3", nil, false, 0)...); local() != before || typesOf(got) != "2DCZ" || !bytes.Contains(got, []byte("SELECT 1")) {
		t.Fatalf("failed parse: %q", got)
	}

	// A simple Query answered locally destroys the unnamed statement for
	// the client: a Bind of it is not answered locally.
	s.send(&pgproto3.Parse{Query: "SELECT snowflake.nextval()"}, &pgproto3.Sync{})
	s.query("SELECT snowflake.nextval()")
	before = local()
	if got := s.send(group("", nil, false, 0)...); local() != before || !bytes.Contains(got, []byte("SERROR")) {
		t.Fatalf("unnamed statement after Query: %q", got)
	}
}
