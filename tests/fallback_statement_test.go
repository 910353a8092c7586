package tests

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// A client's prepared INSERT is sent to the server with its IDs as
// parameters alone; an execution the proxy leaves to the shim binds to a
// fallback statement of the proxy's (wire/fallbackstmt.go). The table's id
// may be NULL: a NULL bound to the statement without the fallback calls
// would be stored, not refused.
const fallbackTable = `CREATE TABLE loose (id bigint DEFAULT snowflake.nextval(), payload text CHECK (payload <> 'bad'));
	CREATE SEQUENCE other`

const looseInsert = "INSERT INTO loose (payload) VALUES ($1) RETURNING id"

// beginLeftToTheShim opens a transaction in which the proxy leaves IDs to
// the shim: one that set a sequence (wire: FallbackDDLInTransaction).
const beginLeftToTheShim = "BEGIN; SELECT setval('other', 5)"

// preparedTexts returns the server's prepared statements of conn's session
// for looseInsert (the client's), and the proxy's fallback statements.
func preparedTexts(t *testing.T, conn *pgx.Conn) (client, fallback []string) {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT name, statement FROM pg_catalog.pg_prepared_statements ORDER BY name`,
		pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, text string
		if err := rows.Scan(&name, &text); err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasPrefix(name, "snowflake-proxy fallback "):
			fallback = append(fallback, text)
		case strings.HasPrefix(text, "INSERT INTO loose (payload"):
			client = append(client, text)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return client, fallback
}

// insertLeftToTheShim runs looseInsert n times in a transaction that set a
// sequence first, where the proxy leaves IDs to the shim, and returns the
// IDs and how often the shim issued.
func insertLeftToTheShim(t *testing.T, conn *pgx.Conn, n int) ([]int64, int64) {
	t.Helper()
	var ids []int64
	calls := shimCalls(t, conn, func() {
		mustRun(t, conn, "SELECT setval('other', 5)")
		for i := 0; i < n; i++ {
			var id int64
			if err := conn.QueryRow(context.Background(), looseInsert, "left").Scan(&id); err != nil {
				t.Fatalf("INSERT in a transaction that set a sequence: %v", err)
			}
			ids = append(ids, id)
		}
	})
	return ids, calls
}

// newFallbackEnv is newInsertEnv with fallbackTable and a session
// (pgx's default mode) whose INSERTs into loose the proxy fills.
func newFallbackEnv(t *testing.T) (*testEnv, *pgx.Conn) {
	t.Helper()
	e := newInsertEnv(t, fallbackTable)
	conn := e.connect(t, pgx.QueryExecModeCacheStatement)
	waitFastDefaults(t, conn, "loose")
	return e, conn
}

// rawSession drives a connection through pgconn, statement by statement:
// named and unnamed statements stay as the test made them (pgx would
// prepare its own again after a failed batch).
type rawSession struct {
	t  *testing.T
	pc *pgconn.PgConn
}

func newRawSession(t *testing.T, conn *pgx.Conn) *rawSession {
	return &rawSession{t: t, pc: conn.PgConn()}
}

// run sends sql as a simple Query.
func (r *rawSession) run(sql string) {
	r.t.Helper()
	if _, err := r.pc.Exec(context.Background(), sql).ReadAll(); err != nil {
		r.t.Fatalf("%s: %v", sql, err)
	}
}

func (r *rawSession) prepare(name, sql string) {
	r.t.Helper()
	if _, err := r.pc.Prepare(context.Background(), name, sql, nil); err != nil {
		r.t.Fatalf("prepare %q: %v", sql, err)
	}
}

// exec executes statement stmt with text arguments and returns the first
// column of its one row as an integer (0 without a row).
func (r *rawSession) exec(stmt string, args ...string) (int64, error) {
	params := make([][]byte, len(args))
	for i, a := range args {
		params[i] = []byte(a)
	}
	res := r.pc.ExecPrepared(context.Background(), stmt, params, nil, nil).Read()
	if res.Err != nil || len(res.Rows) != 1 {
		return 0, res.Err
	}
	return strconv.ParseInt(string(res.Rows[0][0]), 10, 64)
}

// mustExec is exec that fails the test on an error.
func (r *rawSession) mustExec(stmt string, args ...string) int64 {
	r.t.Helper()
	v, err := r.exec(stmt, args...)
	if err != nil {
		r.t.Fatalf("execute %q: %v", stmt, err)
	}
	return v
}

func noNullIDs(t *testing.T, e *testEnv) {
	t.Helper()
	if n := mustInt64(t, e.connectDirect(t), "SELECT count(*) FROM loose WHERE id IS NULL"); n != 0 {
		t.Fatalf("%d rows of loose have a NULL id", n)
	}
}

func TestClientPreparedInsertBindsItsIDsAlone(t *testing.T) {
	e := newInsertEnv(t, fallbackTable)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		if mode == pgx.QueryExecModeSimpleProtocol {
			t.Skip("no Parse in the simple protocol")
		}
		conn := e.connect(t, mode)
		waitFastDefaults(t, conn, "loose")
		// A role changed by a test beside this one moves the privilege
		// epoch, and the INSERT after it may take the server's default:
		// retried until the proxy fills three in a row.
		deadline := time.Now().Add(15 * time.Second)
		for {
			var ids []int64
			calls := shimCalls(t, conn, func() {
				for i := 0; i < 3; i++ {
					var id int64
					if err := conn.QueryRow(context.Background(), looseInsert, "fast").Scan(&id); err != nil {
						t.Fatal(err)
					}
					ids = append(ids, id)
				}
			})
			checkIDs(t, "prepared INSERT", ids, insertNode)
			if calls == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the shim still issued %d times for INSERTs the proxy fills after 15s", calls)
			}
		}
		if mode != pgx.QueryExecModeCacheStatement {
			return // unnamed statements: replaced by the next Parse
		}
		client, fallback := preparedTexts(t, conn)
		if len(client) != 1 || strings.Contains(client[0], "nextval") || !strings.Contains(client[0], "$2::int8") {
			t.Errorf("the server's statement for the client's INSERT: %q, want the ID as the parameter $2 alone", client)
		}
		if len(fallback) != 0 {
			t.Errorf("fallback statements prepared without a fallback: %q", fallback)
		}
	})
	noNullIDs(t, e)
}

func TestClientPreparedInsertLeftToTheShimUsesItsFallbackStatement(t *testing.T) {
	e := newInsertEnv(t, fallbackTable)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		if mode == pgx.QueryExecModeSimpleProtocol {
			t.Skip("no Parse in the simple protocol")
		}
		conn := e.connect(t, mode)
		waitFastDefaults(t, conn, "loose")
		var all []int64
		for round := 0; round < 3; round++ {
			ids, calls := insertLeftToTheShim(t, conn, 3)
			if calls == 0 {
				t.Fatalf("round %d: the shim issued nothing in a transaction that set a sequence", round)
			}
			all = append(all, ids...)
			_, fallback := preparedTexts(t, conn)
			if len(fallback) != 1 || !strings.Contains(fallback[0], "snowflake.nextval") {
				t.Fatalf("round %d: fallback statements %q, want one with the shim's call", round, fallback)
			}
		}
		checkIDs(t, "prepared INSERT left to the shim", all, insertNode)
	})
	noNullIDs(t, e)
}

// Regression guard: a fallback statement whose Close and Parse the server
// skipped (an error earlier in the pipeline) is not taken for prepared:
// the next execution prepares it again instead of binding to a statement
// the server does not have.
func TestFallbackStatementSkippedAfterAnErrorInThePipeline(t *testing.T) {
	e, conn := newFallbackEnv(t)
	r := newRawSession(t, conn)
	r.prepare("ins", looseInsert)
	r.mustExec("ins", "x")
	r.run(beginLeftToTheShim)
	b := &pgconn.Batch{}
	b.ExecParams("SELECT 1 / $1::int", [][]byte{[]byte("0")}, nil, nil, nil)
	b.ExecPrepared("ins", [][]byte{[]byte("after an error")}, nil, nil)
	_, err := r.pc.ExecBatch(context.Background(), b).ReadAll()
	wantError(t, "SELECT 1 / 0 first in the pipeline", err, "22012", "division by zero")
	r.run("ROLLBACK")
	if _, fallback := preparedTexts(t, conn); len(fallback) != 0 {
		t.Fatalf("fallback statements after the skipped pipeline: %q", fallback)
	}
	r.run(beginLeftToTheShim)
	var ids []int64
	for i := 0; i < 2; i++ {
		id, err := r.exec("ins", "x")
		if err != nil {
			t.Fatalf("INSERT left to the shim after the skipped pipeline: %v", err)
		}
		ids = append(ids, id)
	}
	r.run("COMMIT")
	checkIDs(t, "prepared INSERT left to the shim", ids, insertNode)
	if _, fallback := preparedTexts(t, conn); len(fallback) != 1 {
		t.Errorf("fallback statements: %q, want one", fallback)
	}
	noNullIDs(t, e)
}

// A fallback statement pipelined behind a statement still running in the
// shim (FallbackShimRunning): both in one batch, the second bound before
// the first is answered.
func TestFallbackStatementInAPipeline(t *testing.T) {
	e, conn := newFallbackEnv(t)
	ctx := context.Background()
	// Both statements prepared first, at safe points, where the INSERT
	// gets its ID slot: the batch then sends only Binds.
	const perRow = "SELECT snowflake.nextval() FROM generate_series(1, $1::int)"
	mustRun(t, conn, perRow, 1)
	var warm int64
	if err := conn.QueryRow(ctx, looseInsert, "warm").Scan(&warm); err != nil {
		t.Fatal(err)
	}
	b := &pgx.Batch{}
	b.Queue(perRow, 3)
	for i := 0; i < 3; i++ {
		b.Queue(looseInsert, "pipelined")
	}
	br := conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := 0; i < 3; i++ {
		var id int64
		if err := br.QueryRow().Scan(&id); err != nil {
			t.Fatalf("pipelined INSERT %d: %v", i, err)
		}
		ids = append(ids, id)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	checkIDs(t, "pipelined prepared INSERT", ids, insertNode)
	if _, fallback := preparedTexts(t, conn); len(fallback) != 1 {
		t.Errorf("fallback statements after the pipeline: %q, want one", fallback)
	}
	noNullIDs(t, e)
}

// A client that deallocates the proxy's fallback statement (by name, or
// with DEALLOCATE ALL) does not break the next execution left to the shim.
func TestFallbackStatementDeallocatedByTheClient(t *testing.T) {
	e := newInsertEnv(t, fallbackTable)
	ctx := context.Background()
	t.Run("by_name", func(t *testing.T) {
		conn := e.connect(t, pgx.QueryExecModeCacheStatement)
		waitFastDefaults(t, conn, "loose")
		insertLeftToTheShim(t, conn, 1)
		var name string
		if err := conn.QueryRow(ctx, `SELECT name FROM pg_catalog.pg_prepared_statements
			WHERE name LIKE 'snowflake-proxy fallback %'`, pgx.QueryExecModeSimpleProtocol).Scan(&name); err != nil {
			t.Fatal(err)
		}
		mustRun(t, conn, "DEALLOCATE "+strconv.Quote(name))
		ids, _ := insertLeftToTheShim(t, conn, 2)
		checkIDs(t, "prepared INSERT after DEALLOCATE of its fallback", ids, insertNode)
	})
	t.Run("all_unnamed", func(t *testing.T) {
		conn := e.connect(t, pgx.QueryExecModeCacheStatement)
		waitFastDefaults(t, conn, "loose")
		r := newRawSession(t, conn)
		// Statements the client keeps across the DEALLOCATE ALL are
		// unnamed: a Query would destroy the unnamed statement.
		r.run("BEGIN")
		r.prepare("", "SELECT setval('other', 6)")
		r.mustExec("")
		r.prepare("", looseInsert)
		first := r.mustExec("", "before")
		r.prepare("d", "DEALLOCATE ALL")
		r.mustExec("d")
		second := r.mustExec("", "after")
		r.run("COMMIT")
		ids := []int64{first, second}
		checkIDs(t, "unnamed INSERT across DEALLOCATE ALL", ids, insertNode)
	})
	noNullIDs(t, e)
}

// A fallback statement dropped where the proxy cannot see it (DEALLOCATE
// run by a function) fails at most the next execution that binds to it:
// the error drops the confirmation, and the one after prepares it again.
func TestFallbackStatementDroppedUnseenIsPreparedAgain(t *testing.T) {
	e, conn := newFallbackEnv(t)
	r := newRawSession(t, conn)
	r.prepare("ins", looseInsert)
	r.run(beginLeftToTheShim)
	r.mustExec("ins", "unseen")
	r.run("COMMIT")
	_, fallback := preparedTexts(t, conn)
	if len(fallback) != 1 {
		t.Fatalf("fallback statements: %q, want one", fallback)
	}
	r.run(`DO $$ DECLARE n text; BEGIN
		SELECT name INTO n FROM pg_catalog.pg_prepared_statements WHERE name LIKE 'snowflake-proxy fallback %';
		EXECUTE pg_catalog.format('DEALLOCATE %I', n);
	END $$`)
	failures := 0
	for attempt := 0; attempt < 2; attempt++ {
		r.run(beginLeftToTheShim)
		id, err := r.exec("ins", "unseen")
		if err == nil {
			r.run("COMMIT")
			checkIDs(t, "INSERT after the fallback statement was dropped", []int64{id}, insertNode)
			break
		}
		wantError(t, "the first INSERT after the fallback statement was dropped", err, "26000", "does not exist")
		r.run("ROLLBACK")
		failures++
	}
	if failures > 1 {
		t.Fatalf("the fallback statement was not prepared again")
	}
	noNullIDs(t, e)
}

// Regression: a simple Query destroys the client's unnamed statement, and
// its record went without giving its fallback name back: each unnamed
// INSERT left to the shim between Queries left one more fallback
// statement on the server, for the life of the session.
func TestUnnamedFallbackStatementsDoNotPileUp(t *testing.T) {
	e, conn := newFallbackEnv(t)
	r := newRawSession(t, conn)
	var ids []int64
	for i := 0; i < 4; i++ {
		r.run(beginLeftToTheShim)
		r.prepare("", looseInsert)
		ids = append(ids, r.mustExec("", "unnamed"))
		r.run("COMMIT")
	}
	checkIDs(t, "unnamed INSERTs left to the shim", ids, insertNode)
	if _, fallback := preparedTexts(t, conn); len(fallback) != 1 {
		t.Errorf("%d fallback statements after 4 unnamed INSERTs between Queries, want 1", len(fallback))
	}
	noNullIDs(t, e)
}

// sendRaw writes msgs in one flush and reads until n ReadyForQuery,
// returning the SQLSTATEs of the errors seen.
func (r *rawSession) sendRaw(n int, msgs ...pgproto3.FrontendMessage) []string {
	r.t.Helper()
	fe := r.pc.Frontend()
	for _, m := range msgs {
		fe.Send(m)
	}
	if err := fe.Flush(); err != nil {
		r.t.Fatal(err)
	}
	var codes []string
	for n > 0 {
		m, err := fe.Receive()
		if err != nil {
			r.t.Fatal(err)
		}
		switch m := m.(type) {
		case *pgproto3.ErrorResponse:
			codes = append(codes, m.Code)
		case *pgproto3.ReadyForQuery:
			n--
		}
	}
	return codes
}

// Regression (found in review): two executions left to the shim, each
// with its Sync, sent before the server answered the first, both sent a
// Close and a Parse of the fallback statement. The first one's
// ParseComplete confirmed it; the second one's Close dropped it and its
// Parse failed (the first execution had aborted the transaction). The
// confirmation stayed, and the next valid execution left to the shim
// failed with 26000.
func TestFallbackStatementConfirmationOfAnEarlierParse(t *testing.T) {
	e, conn := newFallbackEnv(t)
	r := newRawSession(t, conn)
	r.prepare("ins", looseInsert)
	r.mustExec("ins", "warm")
	r.run(beginLeftToTheShim)
	codes := r.sendRaw(2,
		&pgproto3.Bind{PreparedStatement: "ins", Parameters: [][]byte{[]byte("bad")}},
		&pgproto3.Execute{}, &pgproto3.Sync{},
		&pgproto3.Bind{PreparedStatement: "ins", Parameters: [][]byte{[]byte("good")}},
		&pgproto3.Execute{}, &pgproto3.Sync{})
	if len(codes) != 2 || codes[0] != "23514" || codes[1] != "25P02" {
		t.Fatalf("pipeline errors %q, want the check's 23514, then 25P02", codes)
	}
	r.run("ROLLBACK")
	r.run(beginLeftToTheShim)
	id, err := r.exec("ins", "valid")
	if err != nil {
		t.Fatalf("a valid execution left to the shim failed: %v", err)
	}
	r.run("COMMIT")
	checkIDs(t, "INSERT left to the shim", []int64{id}, insertNode)
	noNullIDs(t, e)
}
