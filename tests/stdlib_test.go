package tests

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	_ "github.com/lib/pq"              // driver "postgres"
)

// database/sql through the proxy, with the pgx stdlib driver and lib/pq.

var sqlDrivers = []string{"pgx", "postgres"}

// openSQL opens a database/sql pool through the proxy limited to one
// connection, so that session state (currval) and issue order are those of
// one session.
func openSQL(t *testing.T, e *testEnv, driver string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, e.proxyURL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Ping(); err != nil {
		t.Fatalf("%s: ping through the proxy: %v", driver, err)
	}
	return db
}

func sqlInt64s(t *testing.T, q interface {
	Query(string, ...any) (*sql.Rows, error)
}, query string, args ...any) []int64 {
	t.Helper()
	rows, err := q.Query(query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}

func forEachDriver(t *testing.T, fn func(t *testing.T, db *sql.DB)) {
	e := newPgxEnv(t)
	e.execDirect(t, "CREATE SEQUENCE stdseq; CREATE TABLE stdrows (id bigint PRIMARY KEY DEFAULT snowflake.nextval('stdseq'), v text)")
	for _, driver := range sqlDrivers {
		t.Run(driver, func(t *testing.T) { fn(t, openSQL(t, e, driver)) })
	}
}

func TestDatabaseSQLNextvalAndParameters(t *testing.T) {
	forEachDriver(t, func(t *testing.T, db *sql.DB) {
		var ids []int64
		ids = append(ids, sqlInt64s(t, db, "SELECT snowflake.nextval()")...)
		ids = append(ids, sqlInt64s(t, db, "SELECT snowflake.nextval() + $1::int8 * 0", 77)...)
		ids = append(ids, sqlInt64s(t, db, "SELECT snowflake.nextval('stdseq') + $1::int8 * 0", int64(1))...)
		ids = append(ids, sqlInt64s(t, db, "SELECT snowflake.nextval($1::regclass)", "stdseq")...)
		if len(ids) != 4 {
			t.Fatalf("got %d IDs, want 4", len(ids))
		}
		checkIDs(t, "nextval() and nextval() + $1", ids[:2], pgxNode)
		checkIDs(t, "nextval('stdseq')", ids[2:], pgxNode)

		var node, count int
		var epoch, format string
		if _, err := db.Exec("SET TimeZone = 'UTC'"); err != nil {
			t.Fatal(err)
		}
		err := db.QueryRow("SELECT snowflake.get_node($1), snowflake.get_count($1), snowflake.get_epoch($1)::text, snowflake.format($1)::text",
			knownIDs[0]).Scan(&node, &count, &epoch, &format)
		d := decodeID(knownIDs[0])
		if err != nil || node != d.Node || count != d.Count || epoch != expectedEpochText(knownIDs[0]) {
			t.Errorf("decoding %d: node %d count %d epoch %s err %v; want %v epoch %s", knownIDs[0], node, count, epoch, err, d, expectedEpochText(knownIDs[0]))
		}
		if err == nil && format != `{"id": 7, "ts": "2024-01-11 18:08:59.845+00", "count": 42}` {
			t.Errorf("format(%d) = %s", knownIDs[0], format)
		}
		perRow := sqlInt64s(t, db, "SELECT snowflake.nextval() FROM generate_series(1, $1::int)", 10)
		if len(perRow) != 10 {
			t.Fatalf("per-row nextval gave %d rows, want 10", len(perRow))
		}
		checkIDs(t, "per-row nextval", append(ids[1:2], perRow...), pgxNode)
	})
}

func TestDatabaseSQLPreparedStatementsReexecuted(t *testing.T) {
	forEachDriver(t, func(t *testing.T, db *sql.DB) {
		plain, err := db.Prepare("SELECT snowflake.nextval()")
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		withArg, err := db.Prepare("SELECT snowflake.nextval() + $1::int8 * 0")
		if err != nil {
			t.Fatal(err)
		}
		defer withArg.Close()
		insert, err := db.Prepare("INSERT INTO stdrows (v) VALUES ($1) RETURNING id")
		if err != nil {
			t.Fatal(err)
		}
		defer insert.Close()

		var ids, rowIDs []int64
		for i := 0; i < 100; i++ {
			var a, b, r int64
			if err := plain.QueryRow().Scan(&a); err != nil {
				t.Fatal(err)
			}
			if err := withArg.QueryRow(i).Scan(&b); err != nil {
				t.Fatal(err)
			}
			if err := insert.QueryRow("v").Scan(&r); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, a, b)
			rowIDs = append(rowIDs, r)
		}
		checkIDs(t, "prepared nextval statements executed 100 times", ids, pgxNode)
		checkIDs(t, "prepared INSERT ... RETURNING executed 100 times", rowIDs, pgxNode)
		var stored int
		if err := db.QueryRow("SELECT count(DISTINCT id) FROM stdrows WHERE id >= $1", rowIDs[0]).Scan(&stored); err != nil || stored != 100 {
			t.Errorf("distinct stored ids = %d, %v; want 100", stored, err)
		}
	})
}

func TestDatabaseSQLTransactions(t *testing.T) {
	forEachDriver(t, func(t *testing.T, db *sql.DB) {
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }() // the latest one, if a check stops the test
		ids := sqlInt64s(t, tx, "SELECT snowflake.nextval()")
		ids = append(ids, sqlInt64s(t, tx, "SELECT snowflake.nextval() + $1::int8 * 0", 5)...)
		ids = append(ids, sqlInt64s(t, tx, "SELECT snowflake.nextval() FROM generate_series(1,3)")...)
		if cur := sqlInt64s(t, tx, "SELECT snowflake.currval()"); len(cur) != 1 || cur[0] != ids[len(ids)-1] {
			t.Errorf("currval() in the transaction = %v, want %d", cur, ids[len(ids)-1])
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}

		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sqlInt64s(t, tx, "SELECT snowflake.nextval()")...)
		// stdrows.id defaults to nextval('stdseq'): another sequence, whose
		// IDs are compared among themselves.
		stdseqIDs := sqlInt64s(t, tx, "INSERT INTO stdrows (v) VALUES ('rolled back') RETURNING id")
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sqlInt64s(t, db, "SELECT snowflake.nextval()")...)
		stdseqIDs = append(stdseqIDs, sqlInt64s(t, db, "INSERT INTO stdrows (v) VALUES ('kept') RETURNING id")...)
		checkIDs(t, "IDs across commit and rollback", ids, pgxNode)
		checkIDs(t, "stdseq IDs across a rollback", stdseqIDs, pgxNode)

		// Read-only and failed transactions refuse nextval.
		tx, err = db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Query("SELECT snowflake.nextval()")
		wantError(t, "nextval() in a read-only transaction", err, "25006", "read-only transaction")
		_ = tx.Rollback()

		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec("SELECT 1/0")
		wantError(t, "SELECT 1/0", err, "22012", "")
		var id int64
		err = tx.QueryRow("SELECT snowflake.nextval()").Scan(&id)
		wantError(t, "nextval() in a failed transaction", err, "25P02", "current transaction is aborted")
		err = tx.QueryRow("SELECT snowflake.nextval() + $1::int8 * 0", 1).Scan(&id)
		wantError(t, "nextval() + $1 in a failed transaction", err, "25P02", "current transaction is aborted")
		_ = tx.Rollback()
		checkIDs(t, "nextval after the failed transaction", append(ids[len(ids)-1:], sqlInt64s(t, db, "SELECT snowflake.nextval()")...), pgxNode)
	})
}
