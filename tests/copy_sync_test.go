package tests

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Regression (review): libpq runs COPY FROM STDIN in the extended
// protocol as Parse, Bind, Execute, Sync, the data, CopyDone, Sync. The
// server reads the first Sync during the COPY and ignores it; the proxy
// owed it a ReadyForQuery, took the next one for it, and matched every
// later answer to the message before it: the client got answers to the
// proxy's own messages, and a Bind behind the Sync of a Parse waited for
// an answer that never came.
func TestSyncDuringCopyIsIgnored(t *testing.T) {
	e, r := newNamedParseEnv(t)
	direct := directSession(t, e)
	copyIn := func(name string) func(pc *pgconn.PgConn) []string {
		return func(pc *pgconn.PgConn) []string {
			out := exchange(t, pc, []pgproto3.FrontendMessage{
				&pgproto3.Parse{Name: name, Query: "COPY pairs (a, b) FROM STDIN"},
				&pgproto3.Bind{PreparedStatement: name}, &pgproto3.Execute{}, &pgproto3.Sync{}},
				func(m pgproto3.BackendMessage) bool { _, ok := m.(*pgproto3.CopyInResponse); return ok })
			return append(out, exchange(t, pc, []pgproto3.FrontendMessage{
				&pgproto3.CopyData{Data: []byte("1\t2\n")}, &pgproto3.Sync{}, &pgproto3.CopyDone{}, &pgproto3.Sync{}},
				readies(1))...)
		}
	}
	then := func(name, a, b string) func(pc *pgconn.PgConn) []string {
		return func(pc *pgconn.PgConn) []string {
			return exchange(t, pc, []pgproto3.FrontendMessage{
				&pgproto3.Parse{Name: name, Query: pairsInsert}, &pgproto3.Sync{},
				&pgproto3.Bind{PreparedStatement: name, Parameters: [][]byte{[]byte(a), []byte(b)}},
				&pgproto3.Execute{}, &pgproto3.Sync{}},
				readies(2))
		}
	}
	for i, steps := range [][]func(pc *pgconn.PgConn) []string{
		{copyIn(""), then("c1", "3", "4")},
		{copyIn("cp"), then("c2", "5", "6"), copyIn(""), then("c3", "7", "8")},
	} {
		var got, want []string
		for _, step := range steps {
			got = append(got, step(r.pc)...)
			want = append(want, step(direct.pc)...)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("case %d\nthrough the proxy:\n  %q\nfrom the server alone:\n  %q", i, got, want)
		}
	}
	for _, ab := range [][2]int{{1, 2}, {3, 4}, {5, 6}, {7, 8}} {
		if n := pairsRow(t, e, ab[0], ab[1]); n == 0 {
			t.Errorf("no row (%d, %d) in pairs", ab[0], ab[1])
		}
	}
}
