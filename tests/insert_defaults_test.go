package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// Column defaults on the fast path (wire/defaults.go):
// INSERT ... VALUES into a table whose column defaults to snowflake.nextval
// gets the value from the proxy's generator, for the default's own
// sequence, so the server never runs the shim's nextval. Whether the shim
// ran is measured on the server (pgtest.ShimWorkSQL: its slow path's calls,
// counted with track_functions = 'pl' as internal/pgserver sets it, and the
// block sequences its per-row path draws), inside a transaction, and with
// pg_stat_user_functions for the ORM-style loop.

const insertNode = 3

// newInsertEnv starts a proxy with node insertNode, installs the extension
// through it (as a superuser: the event triggers that report DDL made
// elsewhere are installed too) and runs setup directly on the server.
func newInsertEnv(t *testing.T, setup string) *testEnv {
	t.Helper()
	e := newEnv(t, insertNode)
	e.installExtension(t)
	if setup != "" {
		e.execDirect(t, setup)
	}
	return e
}

// shimWork reads pgtest.ShimWorkSQL on conn.
func shimWork(t testing.TB, conn *pgx.Conn) (slow int64, blocks string) {
	t.Helper()
	if err := conn.QueryRow(context.Background(), pgtest.ShimWorkSQL).Scan(&slow, &blocks); err != nil {
		t.Fatal(err)
	}
	return slow, blocks
}

// shimCalls runs fn inside a transaction on conn and returns how many times
// the server ran snowflake.nextval's slow path meanwhile, plus one if it
// drew a block.
func shimCalls(t testing.TB, conn *pgx.Conn, fn func()) int64 {
	t.Helper()
	mustRun(t, conn, "BEGIN")
	slow0, blocks0 := shimWork(t, conn)
	fn()
	slow1, blocks1 := shimWork(t, conn)
	mustRun(t, conn, "COMMIT")
	n := slow1 - slow0
	if blocks1 != blocks0 {
		n++
	}
	return n
}

// waitFastDefaults waits until an INSERT into table (which must accept
// DEFAULT VALUES) is filled by the proxy: the proxy serves defaults only once
// its catalog watch of the database is armed, shortly after the extension is
// installed or the proxy started.
func waitFastDefaults(t testing.TB, conn *pgx.Conn, table string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		mustRun(t, conn, "INSERT INTO "+table+" DEFAULT VALUES")
		n := shimCalls(t, conn, func() { mustRun(t, conn, "INSERT INTO "+table+" DEFAULT VALUES") })
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("INSERT INTO %s DEFAULT VALUES still runs the shim's nextval after 15s", table)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// flushedNextvalCalls ends conn's session and returns the server's
// cumulative count of snowflake.nextval's slow-path calls (the per-row
// path's draws are seen in shimWork's blocks) once that session's function
// statistics are visible: a backend flushes them when it exits, and the
// marker function called last shows when that has happened.
func flushedNextvalCalls(t *testing.T, e *testEnv, conn *pgx.Conn) int64 {
	t.Helper()
	ctx := context.Background()
	mustRun(t, conn, "SELECT stats_marker()")
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	direct := e.connectDirect(t)
	var want int64 = 1
	_ = direct.QueryRow(ctx, "SELECT calls FROM pg_stat_user_functions WHERE funcname = 'stats_marker'").Scan(&want)
	deadline := time.Now().Add(15 * time.Second)
	for {
		mustRun(t, direct, "SELECT pg_stat_clear_snapshot()")
		var marker, calls int64
		err := direct.QueryRow(ctx, `SELECT
			coalesce((SELECT calls FROM pg_stat_user_functions WHERE funcname = 'stats_marker'), 0),
			coalesce((SELECT calls FROM pg_stat_user_functions WHERE schemaname = 'snowflake' AND funcname = '_nextval_slow'), 0)`).Scan(&marker, &calls)
		if err != nil {
			t.Fatal(err)
		}
		if marker >= want {
			return calls
		}
		if time.Now().After(deadline) {
			t.Fatal("function statistics of the closed session never appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The check the issue names: an ORM-style INSERT ... RETURNING id loop in
// pgx's default mode runs snowflake.nextval zero times on the server.
func TestInsertDefaultsPgxLoopRunsNoShimNextval(t *testing.T) {
	e := newInsertEnv(t, `
		CREATE FUNCTION stats_marker() RETURNS int LANGUAGE plpgsql AS $$BEGIN RETURN 1; END$$;
		CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), payload text)`)
	warm := e.connect(t, pgx.QueryExecModeCacheStatement)
	waitFastDefaults(t, warm, "orders")
	base := flushedNextvalCalls(t, e, warm)
	_, blocks := shimWork(t, e.connectDirect(t))

	conn := e.connect(t, pgx.QueryExecModeCacheStatement)
	start := time.Now()
	var ids []int64
	for i := 0; i < 200; i++ {
		var id int64
		if err := conn.QueryRow(context.Background(), "INSERT INTO orders (payload) VALUES ($1) RETURNING id", fmt.Sprint("p", i)).Scan(&id); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
		ids = append(ids, id)
	}
	checkIDs(t, "RETURNING id", ids, insertNode)
	checkPlausibleTime(t, ids[0], start)
	if got := flushedNextvalCalls(t, e, conn); got != base {
		t.Errorf("snowflake.nextval ran %d times on the server for 200 INSERT ... VALUES, want 0", got-base)
	}
	if _, after := shimWork(t, e.connectDirect(t)); after != blocks {
		t.Errorf("snowflake.nextval drew blocks on the server for 200 INSERT ... VALUES (%s, then %s)", blocks, after)
	}
	direct := e.connectDirect(t)
	if n := mustInt64(t, direct, "SELECT count(DISTINCT id) FROM orders WHERE payload LIKE 'p%'"); n != 200 {
		t.Errorf("%d distinct ids stored, want 200", n)
	}
}

// Every INSERT ... VALUES form, in the simple protocol and prepared, takes
// its values from the default's own sequence without the shim.
func TestInsertDefaultsForms(t *testing.T) {
	e := newInsertEnv(t, `
		CREATE SEQUENCE order_seq;
		CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake.nextval('order_seq'::regclass), note text, qty int DEFAULT 1);
		CREATE TABLE lines (line_id bigint DEFAULT snowflake.nextval(), order_id bigint, n int)`)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		waitFastDefaults(t, conn, "orders")
		waitFastDefaults(t, conn, "lines")
		for _, c := range []struct {
			sql  string
			rows int
		}{
			{"INSERT INTO orders (note) VALUES ('a'), ('b'), ('c') RETURNING id", 3},
			{"INSERT INTO orders (id, note) VALUES (DEFAULT, 'd'), (DEFAULT, 'e') RETURNING id", 2},
			{"INSERT INTO orders VALUES (DEFAULT, 'f') RETURNING id", 1},
			{"INSERT INTO orders DEFAULT VALUES RETURNING id", 1},
			{"INSERT INTO orders AS o (note) VALUES ('g') ON CONFLICT (id) DO NOTHING RETURNING o.id", 1},
			{"INSERT INTO orders (note) VALUES ('h') ON CONFLICT (id) DO UPDATE SET note = EXCLUDED.note RETURNING id", 1},
			{"WITH new AS (INSERT INTO orders (note) VALUES ('i') RETURNING id) SELECT id FROM new", 1},
			{"WITH x AS (SELECT 'j' AS note) INSERT INTO orders (note) VALUES ((SELECT note FROM x)) RETURNING id", 1},
		} {
			var ids []int64
			n := shimCalls(t, conn, func() { ids = mustInt64s(t, conn, c.sql) })
			if n != 0 {
				t.Errorf("%s: the server ran snowflake.nextval %d times, want 0", c.sql, n)
			}
			if len(ids) != c.rows {
				t.Fatalf("%s: %d rows, want %d", c.sql, len(ids), c.rows)
			}
			checkIDs(t, c.sql, ids, insertNode)
			// The value came from order_seq: it is that sequence's currval.
			if cur := mustInt64(t, conn, "SELECT snowflake.currval('order_seq')"); cur != ids[len(ids)-1] {
				t.Errorf("%s: currval('order_seq') = %d, want the last id %d", c.sql, cur, ids[len(ids)-1])
			}
		}
		// The same prepared statement, executed many times, gets fresh ids.
		var ids []int64
		n := shimCalls(t, conn, func() {
			for i := 0; i < 5; i++ {
				ids = append(ids, mustInt64(t, conn, "INSERT INTO lines (order_id, n) VALUES ($1, $2) RETURNING line_id", int64(7), i))
			}
		})
		if n != 0 {
			t.Errorf("re-executed INSERT: the server ran snowflake.nextval %d times, want 0", n)
		}
		checkIDs(t, "re-executed INSERT", ids, insertNode)
		if cur := mustInt64(t, conn, "SELECT snowflake.currval()"); cur != ids[len(ids)-1] {
			t.Errorf("currval() after a default-filled insert = %d, want %d", cur, ids[len(ids)-1])
		}
	})
	// The sequence's last_value covers what the fast path issued from it
	// once the proxy has stopped (it trails by up to one lease before).
	e.closeProxy(t, cancelledContext())
	direct := e.connectDirect(t)
	if max, last := mustInt64(t, direct, "SELECT max(id) FROM orders"), mustInt64(t, direct, "SELECT last_value FROM order_seq"); last < max {
		t.Errorf("order_seq.last_value %d is below the largest id issued from it %d", last, max)
	}
}

// INSERT ... SELECT keeps the server's default: the shim's per-row path
// evaluates it (docs/state-model.md, "Blocks") and every row gets its own
// id.
func TestInsertDefaultsInsertSelectUsesTheShim(t *testing.T) {
	e := newInsertEnv(t, `CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), n int)`)
	conn := e.connect(t, pgx.QueryExecModeCacheStatement)
	waitFastDefaults(t, conn, "t")
	var ids []int64
	n := shimCalls(t, conn, func() {
		ids = mustInt64s(t, conn, "INSERT INTO t (n) SELECT g FROM generate_series(1, 5) g RETURNING id")
	})
	if n == 0 {
		t.Errorf("INSERT ... SELECT of 5 rows did not run the server's default")
	}
	checkIDs(t, "INSERT ... SELECT", ids, insertNode)
	// A VALUES insert after it shares the one state model: no duplicate.
	// (Not necessarily larger: the shim issues above the proxy's live
	// lease, and the proxy continues inside its lease; see docs/state-model.md.)
	later := mustInt64(t, conn, "INSERT INTO t (n) VALUES (6) RETURNING id")
	for _, id := range ids {
		if id == later {
			t.Errorf("fast-path id %d repeats an id the shim issued", later)
		}
	}
}

// Regression: a named statement prepared before the catalog watch was armed
// (the first INSERT after the proxy starts always is) kept its server-default
// text forever, because a statement without parameter types was not marked
// for revalidation.
func TestInsertDefaultsStatementPreparedBeforeTheWatchIsArmed(t *testing.T) {
	e := newInsertEnv(t, `CREATE TABLE t (id bigint DEFAULT snowflake.nextval(), v int)`)
	conn := e.connect(t, pgx.QueryExecModeCacheStatement)
	const ins = "INSERT INTO t DEFAULT VALUES RETURNING id"
	first := mustInt64(t, conn, ins) // epoch 0: the server's default
	checkIDs(t, "first insert", []int64{first}, insertNode)
	waitFastDefaults(t, conn, "t")
	var id int64
	if n := shimCalls(t, conn, func() { id = mustInt64(t, conn, ins) }); n != 0 {
		t.Errorf("the statement prepared at epoch 0 still runs the shim (%d calls)", n)
	}
	checkIDs(t, "same statement, fast path", []int64{id}, insertNode)
}

// twoSchemasSQL makes a table items in schemas a and b, whose defaults
// use each schema's own sequence s.
const twoSchemasSQL = `
		CREATE SCHEMA a; CREATE SCHEMA b;
		CREATE SEQUENCE a.s; CREATE SEQUENCE b.s;
		CREATE TABLE a.items (id bigint DEFAULT snowflake.nextval('a.s'), src text DEFAULT 'a');
		CREATE TABLE b.items (id bigint DEFAULT snowflake.nextval('b.s'), src text DEFAULT 'b')`

// insertItem inserts a row into the unqualified table items, with its
// defaults, and returns the row's id and src.
func insertItem(t *testing.T, conn *pgx.Conn) (id int64, src string) {
	t.Helper()
	if err := conn.QueryRow(context.Background(), "INSERT INTO items (src) VALUES (DEFAULT) RETURNING id, src").Scan(&id, &src); err != nil {
		t.Fatal(err)
	}
	return id, src
}

// Unqualified targets resolve with the session's search_path, changed mid-
// session, and each table's default uses its own sequence.
func TestInsertDefaultsFollowSearchPath(t *testing.T) {
	e := newInsertEnv(t, twoSchemasSQL)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		waitFastDefaults(t, conn, "a.items")
		waitFastDefaults(t, conn, "b.items")
		for _, schema := range []string{"a", "b", "a"} {
			mustRun(t, conn, "SET search_path = "+schema+", public")
			// Every row goes to the schema's table with its sequence's ID.
			// The fast path fills them once the session knows the table:
			// a move of the privilege epoch (roles are the server's, and
			// tests running beside this one change them) drops what the
			// session knew, and the next INSERT may take the server's
			// default, which is right too.
			deadline := time.Now().Add(15 * time.Second)
			for {
				var id int64
				var src string
				n := shimCalls(t, conn, func() { id, src = insertItem(t, conn) })
				if src != schema {
					t.Fatalf("search_path %s: row went to %s.items", schema, src)
				}
				if cur := mustInt64(t, conn, "SELECT snowflake.currval('"+schema+".s')"); cur != id {
					t.Fatalf("search_path %s: currval('%s.s') = %d, want %d", schema, schema, cur, id)
				}
				if n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("search_path %s: INSERT INTO items still runs the shim's default after 15s (%d calls)", schema, n)
				}
			}
		}
		mustRun(t, conn, "RESET search_path")
	})
}

// A partitioned table's own default applies to INSERTs through it.
func TestInsertDefaultsPartitionedTable(t *testing.T) {
	e := newInsertEnv(t, `
		CREATE TABLE events (id bigint DEFAULT snowflake.nextval(), day int NOT NULL) PARTITION BY RANGE (day);
		CREATE TABLE events_1 PARTITION OF events FOR VALUES FROM (1) TO (100);
		CREATE TABLE events_2 PARTITION OF events FOR VALUES FROM (100) TO (200);
		CREATE TABLE probe (id bigint DEFAULT snowflake.nextval())`)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		waitFastDefaults(t, conn, "probe")
		var ids []int64
		n := shimCalls(t, conn, func() {
			ids = mustInt64s(t, conn, "INSERT INTO events (day) VALUES (5), (150), (6) RETURNING id")
		})
		if n != 0 {
			t.Errorf("partitioned INSERT ran the shim's nextval %d times, want 0", n)
		}
		checkIDs(t, "partitioned INSERT", ids, insertNode)
	})
}

// A role without USAGE on the default's sequence gets the server's error,
// in every mode, even though the proxy could have generated a value.
func TestInsertDefaultsWithoutUsageGetTheServersError(t *testing.T) {
	e := newInsertEnv(t, "")
	role := "nousage_" + e.db
	pgtestExecCluster(t, e, fmt.Sprintf("CREATE ROLE %s LOGIN", role))
	t.Cleanup(func() {
		e.execDirect(t, "DROP OWNED BY "+role) // its grants, so that the role can go
		pgtestExecCluster(t, e, "DROP ROLE IF EXISTS "+role)
	})
	e.execDirect(t, fmt.Sprintf(`CREATE SEQUENCE secret_seq;
		CREATE TABLE guarded (id bigint DEFAULT snowflake.nextval('secret_seq'), v int);
		GRANT INSERT, SELECT ON guarded TO %[1]s;
		CREATE TABLE open_t (id bigint DEFAULT snowflake.nextval(), v int);
		GRANT INSERT, SELECT ON open_t TO %[1]s`, role))
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connectWith(t, mode, func(c *pgx.ConnConfig) { c.User = role })
		waitFastDefaults(t, conn, "open_t")
		for _, sql := range []string{
			"INSERT INTO guarded (v) VALUES (1) RETURNING id",
			"INSERT INTO guarded VALUES (DEFAULT, 1) RETURNING id",
			"INSERT INTO guarded DEFAULT VALUES RETURNING id",
		} {
			_, err := queryInt64s(context.Background(), conn, sql)
			wantError(t, sql+" without USAGE", err, "42501", "permission denied for sequence secret_seq")
		}
	})
}

// DDL made by a direct connection while the proxy runs: a default changed
// away from snowflake stops being filled (also for a statement pgx keeps
// prepared), and a table created meanwhile is picked up.
func TestInsertDefaultsSeeDDLMadeElsewhere(t *testing.T) {
	e := newInsertEnv(t, `CREATE TABLE t (id bigint DEFAULT snowflake.nextval(), v int)`)
	conn := e.connect(t, pgx.QueryExecModeCacheStatement)
	waitFastDefaults(t, conn, "t")
	const ins = "INSERT INTO t (v) VALUES ($1) RETURNING id"
	checkIDs(t, "before DDL", []int64{mustInt64(t, conn, ins, 1)}, insertNode)

	e.execDirect(t, "ALTER TABLE t ALTER COLUMN id SET DEFAULT 0")
	deadline := time.Now().Add(15 * time.Second)
	for mustInt64(t, conn, ins, 2) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("after SET DEFAULT 0 made elsewhere, the prepared INSERT still gets snowflakes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := 0; i < 3; i++ {
		if id := mustInt64(t, conn, ins, 3); id != 0 {
			t.Fatalf("after SET DEFAULT 0: id %d, want 0", id)
		}
	}
	simple := e.connect(t, pgx.QueryExecModeSimpleProtocol)
	if id := mustInt64(t, simple, "INSERT INTO t (v) VALUES (4) RETURNING id"); id != 0 {
		t.Errorf("simple protocol after SET DEFAULT 0: id %d, want 0", id)
	}

	e.execDirect(t, "CREATE TABLE created_later (id bigint DEFAULT snowflake.nextval(), v int)")
	deadline = time.Now().Add(15 * time.Second)
	for {
		var id int64
		n := shimCalls(t, conn, func() { id = mustInt64(t, conn, "INSERT INTO created_later (v) VALUES ($1) RETURNING id", 1) })
		checkIDs(t, "table created later", []int64{id}, insertNode)
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a table created by a direct connection is never served by the fast path")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A function that sets search_path for the session (set_config(..., false)
// in its body) changes where unqualified names resolve, unseen by the
// proxy, which parses only the calling statement. PostgreSQL 18 reports
// search_path (ParameterStatus), and the session drops what it resolved
// with the old one; before, the next INSERT's default was filled from the
// sequence of the table the old search_path named while the row went to
// the other one, whose own sequence could later issue the same ID
// (regression). Earlier servers do not report it (docs/compatibility.md).
func TestInsertDefaultsFollowSearchPathSetInAFunction(t *testing.T) {
	e := newInsertEnv(t, twoSchemasSQL+`;
		CREATE FUNCTION public.use_schema(s text) RETURNS void LANGUAGE plpgsql
			AS $$BEGIN PERFORM set_config('search_path', s || ', public', false); END$$`)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		if v := serverVersionNum(t, conn); v < 180000 {
			t.Skipf("server_version_num %d: search_path is reported from PostgreSQL 18", v)
		}
		waitFastDefaults(t, conn, "a.items")
		waitFastDefaults(t, conn, "b.items")
		for _, schema := range []string{"a", "b", "a"} {
			mustRun(t, conn, "SELECT public.use_schema('"+schema+"')")
			id, src := insertItem(t, conn)
			if src != schema {
				t.Fatalf("search_path %s: row went to %s.items", schema, src)
			}
			if cur := mustInt64(t, conn, "SELECT snowflake.currval('"+schema+".s')"); cur != id {
				t.Errorf("search_path %s: currval('%s.s') = %d, want the row's id %d", schema, schema, cur, id)
			}
			// An explicit call with an unqualified name, which the proxy
			// answers itself.
			mustRun(t, conn, "SELECT public.use_schema('"+map[string]string{"a": "b", "b": "a"}[schema]+"')")
			mustRun(t, conn, "SELECT public.use_schema('"+schema+"')")
			got := mustInt64(t, conn, "SELECT snowflake.nextval('s')")
			if cur := mustInt64(t, conn, "SELECT snowflake.currval('"+schema+".s')"); cur != got {
				t.Errorf("search_path %s: nextval('s') = %d, currval('%s.s') = %d", schema, got, schema, cur)
			}
		}
		mustRun(t, conn, "RESET search_path")
	})
}
