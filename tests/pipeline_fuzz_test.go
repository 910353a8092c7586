package tests

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Differential test of the extended protocol: a pipeline of Parse, Bind,
// Describe, Execute, Close, Sync and Query messages, with statements the
// proxy rewrites, ones it passes, ones the server refuses and the messages
// it then skips, gets through the proxy the answers it gets from the
// server alone (message types, SQLSTATEs, command tags, parameter counts),
// and leaves the same rows. The proxy keeps records of the client's
// statements (wire/namedparse.go); wherever they part from the server's
// statements, a Bind gets the wrong IDs and the answers differ.
//
// Each pipeline is sent twice: each Sync group (and each Query) alone and
// answered before the next, and all groups at once.

// fuzzParseTexts are the statements a Parse may carry: INSERTs with one
// and two IDs per row, a statement passed as it is, a syntax error, one
// that fails when it runs with 0, a DEALLOCATE, a call the proxy answers.
var fuzzParseTexts = []string{
	pairsInsert,
	twinInsert,
	"SELECT $1::int AS v",
	"SELEC 1",
	"SELECT 10 / $1::int AS q",
	"DEALLOCATE a",
	"SELECT snowflake.nextval() > 0 AS ok",
	"SELECT snowflake.nextval() AS id",
	"SELECT snowflake.currval() AS c",
	"SELECT generate_series(1, 3) AS g",
}

// fuzzQueries are the simple Queries of the pipeline.
var fuzzQueries = []string{
	"DEALLOCATE a",
	"DEALLOCATE ALL",
	"SELECT 1/0; DEALLOCATE a",
	"DEALLOCATE a; SELECT 1/0",
	"BEGIN",
	"ROLLBACK",
	"DISCARD ALL",
	"INSERT INTO pairs (a) VALUES (99)",
	"SELECT snowflake.nextval() AS id", // answered by the proxy
}

var fuzzNames = []string{"", "a", "b"}

// fuzzMessages decodes data into Sync groups of messages: each byte picks
// a message (its low 3 bits; bit 3: Execute one row, Describe the
// portal), the next one its arguments. Every group ends with a Sync or is
// one Query.
func fuzzMessages(data []byte) [][]pgproto3.FrontendMessage {
	const maxMessages = 48
	var groups [][]pgproto3.FrontendMessage
	var cur []pgproto3.FrontendMessage
	end := func(m pgproto3.FrontendMessage) {
		cur = append(cur, m)
		groups = append(groups, cur)
		cur = nil
	}
	n := 0
	for i := 0; i < len(data) && n < maxMessages; i, n = i+2, n+1 {
		op, arg := data[i], byte(0)
		if i+1 < len(data) {
			arg = data[i+1]
		}
		name := fuzzNames[int(arg>>4)%len(fuzzNames)]
		switch op % 8 {
		case 0:
			cur = append(cur, &pgproto3.Parse{Name: name, Query: fuzzParseTexts[int(arg&15)%len(fuzzParseTexts)]})
		case 1, 2:
			params := make([][]byte, int(arg&3)%3)
			for j := range params {
				params[j] = []byte(strconv.Itoa(int(arg>>2&3) + j)) // 0 for a division by zero
			}
			cur = append(cur, &pgproto3.Bind{PreparedStatement: name, Parameters: params},
				&pgproto3.Execute{MaxRows: uint32(op >> 3 & 1)})
		case 3:
			cur = append(cur, &pgproto3.Close{ObjectType: 'S', Name: name})
		case 4:
			if op>>3&1 == 1 {
				cur = append(cur, &pgproto3.Describe{ObjectType: 'P'})
			} else {
				cur = append(cur, &pgproto3.Describe{ObjectType: 'S', Name: name})
			}
		case 5:
			if cur != nil {
				end(&pgproto3.Sync{})
			}
			groups = append(groups, []pgproto3.FrontendMessage{&pgproto3.Query{String: fuzzQueries[int(arg)%len(fuzzQueries)]}})
		default:
			end(&pgproto3.Sync{})
		}
	}
	if cur != nil {
		end(&pgproto3.Sync{})
	}
	return groups
}

// answers sends the groups on pc and returns what came back, one line per
// message: its type, and what must agree (SQLSTATE, tag, counts); the
// values of rows differ (IDs) and are left out. Each group is sent when
// the one before it has been answered, or, pipelined, all at once with
// pipelineEnd after them.
func answers(t *testing.T, pc *pgconn.PgConn, groups [][]pgproto3.FrontendMessage, pipelined bool) []string {
	t.Helper()
	if pipelined {
		var msgs []pgproto3.FrontendMessage
		for _, g := range groups {
			msgs = append(msgs, g...)
		}
		seen := false
		return exchange(t, pc, append(msgs, pipelineEnd...), func(m pgproto3.BackendMessage) bool {
			switch m := m.(type) {
			case *pgproto3.DataRow:
				seen = seen || len(m.Values) == 1 && string(m.Values[0]) == pipelineEndRow
			case *pgproto3.ReadyForQuery:
				return seen
			}
			return false
		})
	}
	var out []string
	for _, g := range groups {
		out = append(out, exchange(t, pc, g, readies(1))...)
	}
	return out
}

// exchange sends msgs on pc and returns what came back, one line per
// message (answerLine), up to the message that stop accepts.
func exchange(t *testing.T, pc *pgconn.PgConn, msgs []pgproto3.FrontendMessage, stop func(pgproto3.BackendMessage) bool) []string {
	t.Helper()
	if err := pc.Conn().SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	fe := pc.Frontend()
	for _, m := range msgs {
		fe.Send(m)
	}
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		if line := answerLine(m); line != "" {
			out = append(out, line)
		}
		if stop(m) {
			return out
		}
	}
}

// readies stops exchange at the nth ReadyForQuery.
func readies(n int) func(pgproto3.BackendMessage) bool {
	return func(m pgproto3.BackendMessage) bool {
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			n--
		}
		return n == 0
	}
}

// answerLine renders a server message as answers records it: its type,
// and what must agree (SQLSTATE, tag, counts); "" for the messages left
// out (ParameterStatus, NoticeResponse).
func answerLine(m pgproto3.BackendMessage) string {
	switch m := m.(type) {
	case *pgproto3.ErrorResponse:
		return "error " + m.Code
	case *pgproto3.CommandComplete:
		return "complete " + string(m.CommandTag)
	case *pgproto3.ParameterDescription:
		return fmt.Sprintf("parameters %d", len(m.ParameterOIDs))
	case *pgproto3.RowDescription:
		return fmt.Sprintf("row description %d", len(m.Fields))
	case *pgproto3.DataRow:
		return fmt.Sprintf("row %d", len(m.Values))
	case *pgproto3.ReadyForQuery:
		return "ready " + string(m.TxStatus)
	case *pgproto3.ParameterStatus, *pgproto3.NoticeResponse:
		return ""
	}
	return fmt.Sprintf("%T", m)
}

// pipelineEnd follows the groups of a pipeline: the Sync ends any skip
// after an error, the ROLLBACK a failed transaction (as the end of the
// session would), and the Query's row marks the last answers.
var pipelineEnd = []pgproto3.FrontendMessage{&pgproto3.Sync{}, &pgproto3.Query{String: "ROLLBACK"},
	&pgproto3.Query{String: "SELECT '" + pipelineEndRow + "'"}}

const pipelineEndRow = "end of the pipeline"

// sameAnswers sends groups on proxied (through the proxy) and on direct
// (to the server alone), each when the one before was answered, and fails
// the test where the answers differ.
func sameAnswers(t *testing.T, what string, proxied, direct *pgconn.PgConn, groups [][]pgproto3.FrontendMessage) {
	t.Helper()
	sameAnswersSent(t, what, proxied, direct, groups, false)
}

// sameAnswersSent is sameAnswers with the groups sent pipelined or not.
func sameAnswersSent(t *testing.T, what string, proxied, direct *pgconn.PgConn, groups [][]pgproto3.FrontendMessage, pipelined bool) {
	t.Helper()
	if got, want := answers(t, proxied, groups, pipelined), answers(t, direct, groups, pipelined); !slices.Equal(got, want) {
		t.Fatalf("%s\nthrough the proxy:\n  %s\nfrom the server alone:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// directSession is a raw session on e's database straight on the server,
// with the node the proxy would set.
func directSession(t *testing.T, e *testEnv) *rawSession {
	return newRawSession(t, connectConfig(t, directConfig(t, e)))
}

// fuzzRows is what the pipeline left in the tables, IDs as NULL or not.
func fuzzRows(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT 'pairs ' || coalesce(a::text, '-') || ' ' || coalesce(b::text, '-') || ' ' || (id IS NULL)::text FROM pairs
		UNION ALL SELECT 'twin ' || coalesce(a::text, '-') || ' ' || (id IS NULL)::text || ' ' || (id2 IS NULL)::text || ' ' || (id = id2)::text FROM twin`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got
}

func FuzzPipelineMatchesServer(f *testing.F) {
	for _, seed := range []string{
		// Parse a (pairs), Bind, Execute, Sync; an error, then a skipped
		// Close of a; Bind a again.
		"\x00\x10\x01\x12\x07\x00\x00\x03\x03\x10\x07\x00\x01\x12\x07\x00",
		// The unnamed statement: Parse (twin), Sync, a refused Parse
		// of b then a skipped Parse of it (pairs), Sync, Bind with one.
		"\x00\x01\x07\x00\x00\x23\x00\x00\x07\x00\x01\x01\x07\x00",
		// DEALLOCATE behind a failed statement, then Bind a; DEALLOCATE
		// before one.
		"\x00\x10\x07\x00\x05\x02\x01\x12\x07\x00\x05\x03\x01\x12\x07\x00",
		// A refused Parse of a name it has (42P05), Sync, Describe, Bind.
		"\x00\x10\x07\x00\x00\x11\x07\x00\x04\x10\x01\x12\x07\x00",
		// Execute of DEALLOCATE a in a skipped group; a division by zero.
		"\x00\x10\x07\x00\x00\x03\x00\x05\x01\x00\x07\x00\x00\x24\x01\x21\x07\x00\x01\x12\x07\x00",
	} {
		f.Add([]byte(seed))
	}
	viaProxy := newEnv(f, insertNode)
	viaProxy.installExtension(f)
	viaProxy.execDirect(f, namedParseTables)
	warm := viaProxy.connect(f, pgx.QueryExecModeCacheStatement)
	waitFastDefaults(f, warm, "pairs")
	waitFastDefaults(f, warm, "twin")
	alone := newEnv(f, insertNode)
	alone.installExtension(f)
	alone.execDirect(f, namedParseTables)
	f.Fuzz(func(t *testing.T, data []byte) {
		groups := fuzzMessages(data)
		if len(groups) == 0 {
			return
		}
		// Each group after the answer to the one before, then all at once:
		// a message behind the Sync of a change must find what the
		// server made of it.
		for _, pipelined := range []bool{false, true} {
			for _, e := range []*testEnv{viaProxy, alone} {
				e.execDirect(t, "TRUNCATE pairs, twin")
			}
			proxied := viaProxy.connect(t, pgx.QueryExecModeCacheStatement)
			direct := connectConfig(t, directConfig(t, alone))
			what := fmt.Sprintf("pipelined %v: %s", pipelined, describeGroups(groups))
			sameAnswersSent(t, what, proxied.PgConn(), direct.PgConn(), groups, pipelined)
			// Their transactions end before the next TRUNCATE.
			for _, c := range []*pgx.Conn{proxied, direct} {
				if err := c.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := fuzzRows(t, viaProxy.connectDirect(t)), fuzzRows(t, alone.connectDirect(t)); !slices.Equal(got, want) {
				t.Fatalf("%s\nrows through the proxy %q, from the server alone %q", what, got, want)
			}
		}
	})
}

// directConfig is e's database straight on the server, with the node the
// proxy would set.
func directConfig(t *testing.T, e *testEnv) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(e.srv.URL(e.db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["snowflake.node"] = strconv.Itoa(insertNode)
	return cfg
}

// describeGroups renders the pipeline for a failure message.
func describeGroups(groups [][]pgproto3.FrontendMessage) string {
	var b strings.Builder
	for _, g := range groups {
		b.WriteString("\n ")
		for _, m := range g {
			switch m := m.(type) {
			case *pgproto3.Parse:
				fmt.Fprintf(&b, " Parse %q %q;", m.Name, m.Query)
			case *pgproto3.Bind:
				fmt.Fprintf(&b, " Bind %q %q;", m.PreparedStatement, m.Parameters)
			case *pgproto3.Close:
				fmt.Fprintf(&b, " Close %q;", m.Name)
			case *pgproto3.Describe:
				fmt.Fprintf(&b, " Describe %c %q;", m.ObjectType, m.Name)
			case *pgproto3.Execute:
				fmt.Fprintf(&b, " Execute %d;", m.MaxRows)
			case *pgproto3.Query:
				fmt.Fprintf(&b, " Query %q;", m.String)
			default:
				fmt.Fprintf(&b, " %T;", m)
			}
		}
	}
	return b.String()
}
