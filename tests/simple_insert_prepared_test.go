package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

// Simple-protocol INSERTs with snowflake defaults run as prepared
// statements of the proxy's own from their second use (wire/simpleprep.go).
// The client must see exactly what a Query returns: tags, errors with their
// positions, transaction behaviour; and the statements must be the ones a
// Query would have run.

// simpleExec sends sql as one Query message.
func simpleExec(conn *pgx.Conn, sql string) (pgconn.CommandTag, error) {
	return run(context.Background(), conn, sql, pgx.QueryExecModeSimpleProtocol)
}

// mustSimple is simpleExec that fails the test on error.
func mustSimple(t testing.TB, conn *pgx.Conn, sql string) pgconn.CommandTag {
	t.Helper()
	return mustRun(t, conn, sql, pgx.QueryExecModeSimpleProtocol)
}

// proxyStatements returns the names of the session's prepared statements
// made by the proxy whose text is LIKE pattern. The text is the client's
// with the snowflake columns added as parameters: "INSERT INTO orders
// (note) VALUES ('a')" is prepared as "INSERT INTO orders (note, id)
// VALUES ('a', $1::int8)". The query runs in the simple
// protocol: it works after DISCARD ALL, which drops pgx's statement cache.
func proxyStatements(t testing.TB, conn *pgx.Conn, pattern string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT name FROM pg_prepared_statements WHERE name LIKE 'snowflake-proxy insert %' AND statement LIKE $1 ORDER BY name",
		pgx.QueryExecModeSimpleProtocol, pattern)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func newSimpleInsertEnv(t *testing.T) (*testEnv, *pgx.Conn) {
	e := newInsertEnv(t, `
		CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), note text, k int UNIQUE)`)
	conn := e.connect(t, pgx.QueryExecModeCacheStatement)
	waitFastDefaults(t, conn, "orders")
	return e, conn
}

// The statement a benchmark or a psql script repeats: from the second use
// it runs prepared, with IDs from the proxy, fresh each time.
func TestSimpleInsertRunsPrepared(t *testing.T) {
	_, conn := newSimpleInsertEnv(t)
	const ins = "INSERT INTO orders (note) VALUES ('a')"
	n := shimCalls(t, conn, func() {
		for i := 0; i < 5; i++ {
			if tag := mustSimple(t, conn, ins); tag.String() != "INSERT 0 1" {
				t.Errorf("use %d: tag %q, want INSERT 0 1", i+1, tag)
			}
		}
	})
	if n != 0 {
		t.Errorf("the server ran snowflake.nextval %d times, want 0", n)
	}
	// Every execution binds its IDs: no fallback call of the shim, which
	// the server would set up at every execution.
	if got := proxyStatements(t, conn, `INSERT INTO orders (note, id) VALUES ('a', $1::int8)`); len(got) != 1 {
		t.Fatalf("prepared statements for the INSERT: %q, want one", got)
	}
	ids := mustInt64s(t, conn, "SELECT id FROM orders WHERE note = 'a' ORDER BY id")
	if len(ids) != 5 {
		t.Fatalf("%d rows, want 5", len(ids))
	}
	checkIDs(t, "repeated simple INSERT", ids, insertNode)
	if cur := mustInt64(t, conn, "SELECT snowflake.currval()"); cur != ids[4] {
		t.Errorf("currval() = %d, want the last id %d", cur, ids[4])
	}
	// Texts that return rows or hold several statements stay Queries.
	for i := 0; i < 3; i++ {
		mustSimple(t, conn, "INSERT INTO orders (note) VALUES ('r') RETURNING id")
		mustSimple(t, conn, "INSERT INTO orders (note) VALUES ('m1'); INSERT INTO orders (note) VALUES ('m2')")
	}
	for _, p := range []string{"INSERT INTO orders (note%) VALUES ('r'%", "INSERT INTO orders (note%) VALUES ('m%"} {
		if got := proxyStatements(t, conn, p); len(got) != 0 {
			t.Errorf("%s...: prepared as %q, want a Query", p, got)
		}
	}
}

// Errors reach the client as the Query's would, the caret in the client's
// text, at each stage: Parse (first and later uses), planning at Bind,
// execution; the session goes on.
func TestSimpleInsertPreparedErrors(t *testing.T) {
	_, conn := newSimpleInsertEnv(t)
	for _, c := range []struct {
		sql, code, at string
	}{
		{"INSERT INTO orders (nte) VALUES ('x')", "42703", "nte"},
		{"INSERT INTO orders (note) VALUES ((1/0)::text)", "22012", ""},
		{"INSERT INTO orders (note, k) VALUES ('dup', 1)", "23505", ""},
	} {
		if c.code == "23505" {
			mustSimple(t, conn, c.sql) // the first one goes in
		}
		for i := 0; i < 4; i++ {
			_, err := simpleExec(conn, c.sql)
			wantError(t, fmt.Sprintf("%s, use %d", c.sql, i+1), err, c.code, "")
			var pe *pgconn.PgError
			if c.at != "" && errors.As(err, &pe) {
				if want := int32(strings.Index(c.sql, c.at) + 1); pe.Position != want {
					t.Errorf("%s, use %d: error position %d, want %d", c.sql, i+1, pe.Position, want)
				}
			}
			if got := mustInt64(t, conn, "SELECT 7"); got != 7 {
				t.Fatalf("after the error: SELECT 7 = %d", got)
			}
		}
	}
	// The statement whose Parse succeeded is prepared and reused.
	if got := proxyStatements(t, conn, "INSERT INTO orders (note, k%) VALUES ('dup', 1%"); len(got) != 1 {
		t.Errorf("prepared statements for the duplicate INSERT: %q, want one", got)
	}
}

// Inside a transaction block the prepared INSERT belongs to the
// transaction; in a failed one it fails as a Query does.
func TestSimpleInsertPreparedInTransactions(t *testing.T) {
	_, conn := newSimpleInsertEnv(t)
	const ins = "INSERT INTO orders (note) VALUES ('tx')"
	mustSimple(t, conn, "BEGIN")
	for i := 0; i < 3; i++ {
		mustSimple(t, conn, ins)
	}
	mustSimple(t, conn, "ROLLBACK")
	if n := mustInt64(t, conn, "SELECT count(*) FROM orders WHERE note = 'tx'"); n != 0 {
		t.Errorf("%d rows after ROLLBACK, want 0", n)
	}
	mustSimple(t, conn, "BEGIN")
	_, err := simpleExec(conn, "SELECT 1/0")
	wantError(t, "SELECT 1/0", err, "22012", "")
	_, err = simpleExec(conn, ins)
	wantError(t, "INSERT in a failed transaction", err, "25P02", "")
	mustSimple(t, conn, "ROLLBACK")
	mustSimple(t, conn, "BEGIN")
	mustSimple(t, conn, ins)
	mustSimple(t, conn, "COMMIT")
	if n := mustInt64(t, conn, "SELECT count(*) FROM orders WHERE note = 'tx'"); n != 1 {
		t.Errorf("%d rows after COMMIT, want 1", n)
	}
}

// DISCARD ALL, DEALLOCATE ALL and a DEALLOCATE of the proxy's statement
// by name drop it: the next uses prepare again, under a new name.
func TestSimpleInsertPreparedAfterDiscard(t *testing.T) {
	_, conn := newSimpleInsertEnv(t)
	const ins = "INSERT INTO orders (note) VALUES ('d')"
	const like = "INSERT INTO orders (note%) VALUES ('d'%"
	var names []string
	for _, reset := range []string{"DISCARD ALL", "DEALLOCATE ALL", "DEALLOCATE by name"} {
		for i := 0; i < 3; i++ {
			mustSimple(t, conn, ins)
		}
		got := proxyStatements(t, conn, like)
		if len(got) != 1 {
			t.Fatalf("before %s: prepared %q, want one", reset, got)
		}
		if slices.Contains(names, got[0]) {
			t.Errorf("name %q used again", got[0])
		}
		names = append(names, got[0])
		if reset == "DEALLOCATE by name" {
			reset = `DEALLOCATE "` + got[0] + `"`
		}
		mustSimple(t, conn, reset)
		if got := proxyStatements(t, conn, like); len(got) != 0 {
			t.Fatalf("after %s: %q still prepared", reset, got)
		}
	}
	for i := 0; i < 2; i++ {
		mustSimple(t, conn, ins) // prepared again under a fourth name
	}
	if got := proxyStatements(t, conn, like); len(got) != 1 || slices.Contains(names, got[0]) {
		t.Errorf("after the resets: prepared %q, want one statement named anew (earlier %q)", got, names)
	}
	if n := mustInt64(t, conn, "SELECT count(*) FROM orders WHERE note = 'd'", pgx.QueryExecModeSimpleProtocol); n != 11 {
		t.Errorf("%d rows, want 11", n)
	}
}

// Regression: a DEALLOCATE of one of the proxy's statements made the
// session forget all of them, so the others were prepared again beside
// their old statements, which stayed on the server unused.
func TestSimpleInsertDeallocateForgetsOnlyThatStatement(t *testing.T) {
	_, conn := newSimpleInsertEnv(t)
	const a, b = "INSERT INTO orders (note) VALUES ('da')", "INSERT INTO orders (note) VALUES ('db')"
	const likeA, likeB = "INSERT INTO orders (note%) VALUES ('da'%", "INSERT INTO orders (note%) VALUES ('db'%"
	for i := 0; i < 2; i++ {
		mustSimple(t, conn, a)
		mustSimple(t, conn, b)
	}
	namesA, namesB := proxyStatements(t, conn, likeA), proxyStatements(t, conn, likeB)
	if len(namesA) != 1 || len(namesB) != 1 {
		t.Fatalf("prepared %q and %q, want one statement each", namesA, namesB)
	}
	mustSimple(t, conn, `DEALLOCATE "`+namesA[0]+`"`)
	for i := 0; i < 2; i++ {
		mustSimple(t, conn, a)
		mustSimple(t, conn, b)
	}
	if got := proxyStatements(t, conn, likeB); !slices.Equal(got, namesB) {
		t.Errorf("after DEALLOCATE of %q: statements for the other INSERT %q, want still %q", namesA[0], got, namesB)
	}
	if got := proxyStatements(t, conn, likeA); len(got) != 1 || got[0] == namesA[0] {
		t.Errorf("after DEALLOCATE of %q: statements for its INSERT %q, want one under a new name", namesA[0], got)
	}
	if n := mustInt64(t, conn, "SELECT count(DISTINCT id) FROM orders WHERE note IN ('da', 'db')"); n != 8 {
		t.Errorf("%d distinct ids, want 8", n)
	}
}

// DDL between uses: the server analyses the statement again and the INSERT
// fills the new column's default, as a Query would.
func TestSimpleInsertPreparedAfterDDL(t *testing.T) {
	e, conn := newSimpleInsertEnv(t)
	const ins = "INSERT INTO orders (note) VALUES ('ddl')"
	for i := 0; i < 3; i++ {
		mustSimple(t, conn, ins)
	}
	e.execDirect(t, "ALTER TABLE orders ADD COLUMN extra int DEFAULT 7")
	mustSimple(t, conn, ins)
	mustSimple(t, conn, "ALTER TABLE orders ALTER COLUMN extra SET DEFAULT 8")
	mustSimple(t, conn, ins)
	got := mustInt64s(t, conn, "SELECT coalesce(extra, 0) FROM orders WHERE note = 'ddl' ORDER BY id")
	if want := []int64{7, 7, 7, 7, 8}; !slices.Equal(got, want) {
		t.Errorf("extra = %v, want %v (existing rows get the added column's default)", got, want)
	}
}

// A Query destroys the unnamed statement; Bind of the proxy's statement
// would not, so with one on the server the INSERT stays a Query.
// Regression guard for the stmtLive condition of queryPrepared.
func TestSimpleInsertKeepsQueryWithUnnamedStatement(t *testing.T) {
	_, conn := newSimpleInsertEnv(t)
	ctx := context.Background()
	pc := conn.PgConn()
	const ins = "INSERT INTO orders (note) VALUES ('u')"
	for i := 0; i < 3; i++ {
		if _, err := pc.Prepare(ctx, "", "SELECT 1", nil); err != nil {
			t.Fatal(err)
		}
		mustSimple(t, conn, ins)
		res := pc.ExecPrepared(ctx, "", nil, nil, nil).Read()
		wantError(t, fmt.Sprintf("Bind of the unnamed statement after the Query, use %d", i+1), res.Err, "26000", "")
	}
}

// At most 64 texts of at most 4 KiB are prepared per session; the rest
// stay Queries and still work.
func TestSimpleInsertPreparedBound(t *testing.T) {
	_, conn := newSimpleInsertEnv(t)
	long := "INSERT INTO orders (note) VALUES ('L" + strings.Repeat("x", 4100) + "')"
	for i := 0; i < 3; i++ {
		mustSimple(t, conn, long)
	}
	if got := proxyStatements(t, conn, "INSERT INTO orders (note%) VALUES ('L%"); len(got) != 0 {
		t.Errorf("a %d-byte text was prepared as %q", len(long), got)
	}
	for i := 0; i < 70; i++ {
		ins := fmt.Sprintf("INSERT INTO orders (note) VALUES ('b%02d')", i)
		mustSimple(t, conn, ins)
		mustSimple(t, conn, ins)
	}
	if got := proxyStatements(t, conn, "INSERT INTO orders (note%) VALUES ('b%"); len(got) != 64 {
		t.Errorf("%d texts prepared, want 64", len(got))
	}
	if n := mustInt64(t, conn, "SELECT count(DISTINCT id) FROM orders WHERE note LIKE 'b%' OR note LIKE 'L%'"); n != 143 {
		t.Errorf("%d distinct ids, want 143", n)
	}
}

// On the wire the client gets exactly a Query's response, CommandComplete
// then ReadyForQuery, whether the INSERT went as a Query or prepared, one
// at a time or several Queries sent at once (those after the first are
// not at a safe point and go as Queries).
func TestSimpleInsertPreparedWireResponses(t *testing.T) {
	e, conn := newSimpleInsertEnv(t)
	_, fe := loggedIn(t, e)
	const ins = "INSERT INTO orders (note) VALUES ('w')"
	responses := func(n int) []string {
		t.Helper()
		var got []string
		for ready := 0; ready < n; {
			msg, err := fe.Receive()
			if err != nil {
				t.Fatalf("after %q: %v", got, err)
			}
			switch m := msg.(type) {
			case *pgproto3.CommandComplete:
				got = append(got, "C "+string(m.CommandTag))
			case *pgproto3.ReadyForQuery:
				got = append(got, "Z "+string(m.TxStatus))
				ready++
			default:
				got = append(got, fmt.Sprintf("%T", msg))
			}
		}
		return got
	}
	want := func(n int) []string {
		var w []string
		for range n {
			w = append(w, "C INSERT 0 1", "Z I")
		}
		return w
	}
	for i := 0; i < 3; i++ {
		fe.Send(&pgproto3.Query{String: ins})
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := responses(1); !slices.Equal(got, want(1)) {
			t.Fatalf("use %d: got %q, want %q", i+1, got, want(1))
		}
	}
	for range 6 {
		fe.Send(&pgproto3.Query{String: ins})
	}
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := responses(6); !slices.Equal(got, want(6)) {
		t.Fatalf("six Queries at once: got %q, want %q", got, want(6))
	}
	if n := mustInt64(t, conn, "SELECT count(DISTINCT id) FROM orders WHERE note = 'w'"); n != 9 {
		t.Errorf("%d distinct ids, want 9", n)
	}
}

// wire.Config.QueryInserts (--prepared-inserts=false) keeps every INSERT a
// Query; Stats.PreparedInserts counts the prepared executions otherwise.
func TestSimpleInsertQueryInsertsOption(t *testing.T) {
	for _, queryInserts := range []bool{false, true} {
		t.Run(fmt.Sprint("QueryInserts=", queryInserts), func(t *testing.T) {
			p := newStatsProxyWith(t, insertNode, func(c *wire.Config) { c.QueryInserts = queryInserts })
			setup := p.connect(t, pgx.QueryExecModeSimpleProtocol)
			mustRun(t, setup, "CREATE EXTENSION snowflake")
			mustRun(t, setup, "CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), note text)")
			conn := p.connect(t, pgx.QueryExecModeCacheStatement)
			waitFastDefaults(t, conn, "orders")
			before := p.ws.Stats().PreparedInserts
			for i := 0; i < 5; i++ {
				mustSimple(t, conn, "INSERT INTO orders (note) VALUES ('o')")
			}
			prepared := p.ws.Stats().PreparedInserts - before
			names := proxyStatements(t, conn, "INSERT INTO orders (note%) VALUES ('o'%")
			want, wantNames := uint64(4), 1 // the first use is a Query
			if queryInserts {
				want, wantNames = 0, 0
			}
			if prepared != want || len(names) != wantNames {
				t.Errorf("%d of 5 INSERTs ran prepared, statements %q; want %d and %d statement(s)", prepared, names, want, wantNames)
			}
			if n := mustInt64(t, conn, "SELECT count(DISTINCT id) FROM orders WHERE note = 'o'"); n != 5 {
				t.Errorf("%d distinct ids, want 5", n)
			}
		})
	}
}
