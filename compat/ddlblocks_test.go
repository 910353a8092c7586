package compat

import (
	"fmt"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

// Tests of the blocks that the event trigger makes with a DDL
// (docs/state-model.md, "Blocks made with the DDL").

// slowCallsSQL counts the slow path's calls in the current transaction,
// with those of earlier transactions not yet flushed to the statistics.
const slowCallsSQL = `SELECT coalesce(pg_stat_get_xact_function_calls(
	'snowflake._nextval_slow(regclass)'::regprocedure), 0)`

// insertRows inserts n rows into table (columns id, defaulting to
// snowflake.nextval, and v) in one statement, in the transaction c is in
// (its own when c is in none), and returns the IDs in row order with the
// number of calls that ran the slow path.
func insertRows(t *testing.T, c *testConn, table string, n int) (ids []int64, slow int64) {
	t.Helper()
	before := queryInt(t, c, slowCallsSQL)
	if err := c.QueryRow(ctxT(t), fmt.Sprintf(`WITH i AS (INSERT INTO %s (v) SELECT g FROM generate_series(1, $1) g RETURNING id, v)
		SELECT array_agg(id ORDER BY v) FROM i`, table), n).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	return ids, queryInt(t, c, slowCallsSQL) - before
}

// blockStart is R(seq, node)'s value, negative while a DDL's blocks are
// not yet enabled, or -1 << 62 when R does not exist.
func blockStart(t *testing.T, c *testConn, oid uint32, node int) int64 {
	t.Helper()
	name := fmt.Sprintf("snowflake._blkd_%d_%d", oid, node)
	if queryInt(t, c, "SELECT (to_regclass($1) IS NULL)::int", name) == 1 {
		return -1 << 62
	}
	return queryInt(t, c, "SELECT last_value FROM "+name)
}

// The first INSERT ... SELECT after the CREATE TABLE that names its
// sequence draws from blocks: the event trigger made them with the table,
// and its first call enables them. Each statement planned before was
// slow path only (regression).
func TestBlocksMadeWithTheDDL(t *testing.T) {
	t.Parallel()
	url, c, _, _ := shimDB(t)
	mustExec(t, c, "SET snowflake.node = 3")
	mustExec(t, c, "CREATE SEQUENCE s_ddl")
	oid := seqOID(t, c, "s_ddl")
	mustExec(t, c, "CREATE TABLE t_ddl (id bigint PRIMARY KEY DEFAULT snowflake.nextval('s_ddl'), v int)")
	if r := blockStart(t, c, oid, 3); r >= 0 || r == -1<<62 {
		t.Fatalf("R after the CREATE TABLE is %d, want made and not enabled", r)
	}
	const n = 5000
	ids, slow := insertRows(t, c, "t_ddl", n)
	increasing(t, "first INSERT", ids, 3)
	if slow >= n/2 {
		t.Fatalf("%d of %d rows of the first INSERT ran the slow path", slow, n)
	}
	if r := blockStart(t, c, oid, 3); r <= 0 {
		t.Fatalf("R after the first INSERT is %d, want a block", r)
	}

	// Made in an open transaction: its own calls make no block (nothing
	// else sees B yet), the first statement after its commit does.
	mustExec(t, c, "CREATE SEQUENCE s_tx")
	oid = seqOID(t, c, "s_tx")
	mustExec(t, c, "BEGIN")
	mustExec(t, c, "CREATE TABLE t_tx (id bigint PRIMARY KEY DEFAULT snowflake.nextval('s_tx'), v int)")
	inTx, slow := insertRows(t, c, "t_tx", 200)
	if slow != 200 {
		t.Fatalf("in the DDL's transaction %d of 200 rows ran the slow path", slow)
	}
	if r := blockStart(t, c, oid, 3); r >= 0 {
		t.Fatalf("R in the DDL's transaction is %d, want not enabled", r)
	}
	mustExec(t, c, "COMMIT")
	after, slow := insertRows(t, c, "t_tx", n)
	increasing(t, "the DDL's transaction, then after it", append(inTx, after...), 3)
	if slow >= n/2 {
		t.Fatalf("%d of %d rows after the commit ran the slow path", slow, n)
	}

	// A default set on a table that exists; a role without privileges
	// makes them for its own sequence, none for one it may not setval.
	mustExec(t, c, "CREATE SEQUENCE s_alter")
	mustExec(t, c, "ALTER TABLE t_tx ADD COLUMN w bigint")
	mustExec(t, c, "ALTER TABLE t_tx ALTER COLUMN w SET DEFAULT snowflake.nextval('s_alter')")
	if r := blockStart(t, c, seqOID(t, c, "s_alter"), 3); r >= 0 || r == -1<<62 {
		t.Fatalf("R after SET DEFAULT is %d, want made and not enabled", r)
	}
	mustExec(t, c, "CREATE SEQUENCE s_other")
	user, _ := testRole(t, c, url, "ddl")
	mustExec(t, c, "GRANT CREATE ON SCHEMA public TO "+user)
	mustExec(t, c, "GRANT USAGE ON SEQUENCE s_other TO "+user)
	mustExec(t, c, "SET SESSION AUTHORIZATION "+user)
	mustExec(t, c, "CREATE TABLE t_other (id bigint DEFAULT snowflake.nextval('s_other'), v int)")
	mustExec(t, c, "CREATE SEQUENCE s_own")
	mustExec(t, c, "CREATE TABLE t_own (id bigint DEFAULT snowflake.nextval('s_own'), v int)")
	mustExec(t, c, "RESET SESSION AUTHORIZATION")
	if r := blockStart(t, c, seqOID(t, c, "s_other"), 3); r != -1<<62 {
		t.Fatalf("R of a sequence the DDL's role may not setval is %d, want none", r)
	}
	if r := blockStart(t, c, seqOID(t, c, "s_own"), 3); r >= 0 || r == -1<<62 {
		t.Fatalf("R of the DDL's role's own sequence is %d, want made and not enabled", r)
	}
}

// A session whose caches hold B's name as missing (it called the slow
// path before the DDL, in a transaction still open that holds every lock
// its calls take) finds the blocks once
// another session's call enabled them: its next call takes the live
// block's next ID rather than one above it, which its calls after the
// transaction, planned with B, would go below.
func TestBlocksMadeWithTheDDLFoundByASessionThatMissedThem(t *testing.T) {
	t.Parallel()
	url, c, _, _ := shimDB(t)
	mustExec(t, c, "CREATE SEQUENCE s_miss")
	oid := seqOID(t, c, "s_miss")
	x := connect(t, url)
	mustExec(t, x, "SET snowflake.node = 3")
	mustExec(t, x, "BEGIN")
	// Every lock its calls take held already (the lock's table and index
	// too, which each call otherwise takes again in its sub-block): a call
	// finds B only by the lookup _hw_count's move asks for (rule 3).
	mustExec(t, x, "SET LOCAL enable_seqscan = off")
	mustExec(t, x, "SELECT FROM snowflake._locks WHERE slot = -1 FOR UPDATE")
	ids := []int64{queryInt(t, x, "SELECT snowflake.nextval('s_miss')")}

	mustExec(t, c, "SET snowflake.node = 3")
	mustExec(t, c, "CREATE TABLE t_miss (id bigint DEFAULT snowflake.nextval('s_miss'), v int)")
	y := connect(t, url)
	mustExec(t, y, "SET snowflake.node = 3")
	first := queryInt(t, y, "SELECT snowflake.nextval('s_miss')")
	if r := blockStart(t, c, oid, 3); r != first {
		t.Fatalf("R %v after the first call, want its block at %v", generator.Decode(r), generator.Decode(first))
	}
	// The live block a minute ahead, as a call leaves it, so that it
	// outlives the test's statements.
	d := queryInt(t, c, fmt.Sprintf("SELECT ((%s + 60000) << 22) | (3 << 12)", serverMsSQL))
	mustExec(t, c, fmt.Sprintf("SELECT setval('snowflake._blk_%d_3', %d), setval('snowflake._blkd_%d_3', %d), setval('s_miss', %d)",
		oid, d, oid, d, d+1023))
	if v := queryInt(t, y, "SELECT snowflake.nextval('s_miss')"); v != d+1 {
		t.Fatalf("y drew %v, want %v", generator.Decode(v), generator.Decode(d+1))
	}

	ids = append(ids, queryInt(t, x, "SELECT snowflake.nextval('s_miss')"))
	mustExec(t, x, "COMMIT")
	ids = append(ids, queryInt(t, x, "SELECT snowflake.nextval('s_miss')"))
	increasing(t, "the session that missed B", ids, 3)
	if ids[1] <= d || ids[1] > d+1023 {
		t.Fatalf("x's call in its transaction got %v, want the block's next ID", generator.Decode(ids[1]))
	}
}
