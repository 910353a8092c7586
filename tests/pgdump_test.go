package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// A pg_dump of a database that uses snowflake defaults (a snowflake column
// and a serial converted with convert_sequence_to_snowflake) restores into
// a fresh database, and a proxy in front of the restored database issues
// only IDs larger than every ID of the original.
func TestPgDumpRestoreIssuesLargerIDs(t *testing.T) {
	e := newEnv(t, 3)
	e.installExtension(t)
	conn := e.connect(t, pgx.QueryExecModeCacheStatement)
	mustRun(t, conn, "CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), item text)")
	mustRun(t, conn, "CREATE TABLE legacy (id serial PRIMARY KEY, v text)")
	mustRun(t, conn, "INSERT INTO legacy (v) SELECT 'old' || g FROM generate_series(1, 5) g")
	if n := mustInt64(t, conn, "SELECT snowflake.convert_sequence_to_snowflake('legacy_id_seq')"); n != 1 {
		t.Fatalf("convert_sequence_to_snowflake returned %d, want 1", n)
	}
	for i := 0; i < 20; i++ {
		mustRun(t, conn, "INSERT INTO orders (item) VALUES ($1)", "fast"+strconv.Itoa(i))
		mustRun(t, conn, "INSERT INTO legacy (v) VALUES ($1)", "new"+strconv.Itoa(i))
	}
	mustRun(t, conn, "INSERT INTO orders (item) SELECT 'shim' || g FROM generate_series(1, 20) g")
	maxOrders := mustInt64(t, conn, "SELECT max(id) FROM orders")
	maxLegacy := mustInt64(t, conn, "SELECT max(id) FROM legacy")

	r := restoreBehindNewProxy(t, e)
	rc := r.connect(t, pgx.QueryExecModeCacheStatement)
	if got := mustInt64(t, rc, "SELECT count(*) FROM orders"); got != 40 {
		t.Fatalf("restored orders: %d rows, want 40", got)
	}
	for i := 0; i < 20; i++ {
		if id := mustInt64(t, rc, "INSERT INTO orders (item) VALUES ($1) RETURNING id", "after"+strconv.Itoa(i)); id <= maxOrders {
			t.Fatalf("restored database: new orders id %d not above the original's max %d", id, maxOrders)
		}
		if id := mustInt64(t, rc, "INSERT INTO legacy (v) VALUES ($1) RETURNING id", "after"+strconv.Itoa(i)); id <= maxLegacy {
			t.Fatalf("restored database: new legacy id %d not above the original's max %d", id, maxLegacy)
		}
	}
	for _, id := range mustInt64s(t, rc, "SELECT snowflake.nextval() FROM generate_series(1, 10)") {
		if id <= maxOrders {
			t.Fatalf("restored database: shim id %d not above %d", id, maxOrders)
		}
	}
	if got := mustInt64(t, rc, "SELECT count(DISTINCT id) FROM orders"); got != 60 {
		t.Fatalf("orders ids not distinct: %d distinct of 60", got)
	}
}

// restoreBehindNewProxy dumps e's database, restores it into a new one and
// returns a proxy with e's node in front of that (e's proxy is closed
// first: a fresh process, as after moving the data).
func restoreBehindNewProxy(t *testing.T, e *testEnv) *testEnv {
	t.Helper()
	restored, out, err := dumpAndRestore(t, e)
	if err != nil {
		t.Fatalf("restore: %v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.closeProxy(t, ctx)
	r := &testEnv{srv: e.srv, db: restored, node: e.node, app: startProxy(t, e.srv, e.node, "127.0.0.1:0")}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.closeProxy(t, ctx)
	})
	return r
}

// dumpAndRestore dumps the test's database with pg_dump (straight from the
// server) and restores it with psql into a new database; it returns that
// database's name and psql's output and error.
func dumpAndRestore(t *testing.T, e *testEnv) (restored string, out []byte, err error) {
	t.Helper()
	dump := filepath.Join(t.TempDir(), "dump.sql")
	// Binaries fetched from the registry are the server only.
	bin := filepath.Join(e.srv.BinDir(), "pg_dump")
	if _, err := os.Stat(bin); err != nil {
		bin = pgtest.Tool(t, "pg_dump")
	}
	pgDump := exec.Command(bin, "-h", "127.0.0.1",
		"-p", strconv.Itoa(e.srv.Port()), "-U", "postgres", "-f", dump, e.db)
	if out, err := pgDump.CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v: %s", err, out)
	}
	restored = pgtest.NewDatabase(t, e.srv)
	psql := exec.Command(pgtest.Tool(t, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
		"-p", strconv.Itoa(e.srv.Port()), "-U", "postgres", "-d", restored, "-f", dump)
	out, err = psql.CombinedOutput()
	return restored, out, err
}

// A pg_dump of a database in which IDs were issued from sequences
// narrower than a snowflake restores (with the extension, the setval of a
// snowflake above MAXVALUE that pg_dump writes fails until the 2.5.0
// repair), and a proxy in front of the restored database, and the shim on
// a direct connection, continue above every ID issued before: from a
// sequence the fast path widened, and from one only the shim used, whose
// IDs the narrow store holds.
func TestPgDumpRestoreNarrowSequences(t *testing.T) {
	const node = 4
	e := newEnv(t, node)
	e.installExtension(t)
	conn := e.connect(t, pgx.QueryExecModeCacheStatement)
	mustRun(t, conn, "CREATE SEQUENCE leased MAXVALUE 1000000")
	mustRun(t, conn, "CREATE SEQUENCE shimmed AS integer")
	mustRun(t, conn, "CREATE TABLE nt (id bigint PRIMARY KEY DEFAULT snowflake.nextval('shimmed'), v int)")
	direct := e.connectDirect(t)
	mustRun(t, direct, "SET snowflake.node = 4")
	var maxLeased, maxShimmed int64
	for i := 0; i < 5; i++ {
		maxLeased = max(maxLeased, mustInt64(t, conn, "SELECT snowflake.nextval('leased')"))
		for _, id := range mustInt64s(t, conn, "INSERT INTO nt (v) SELECT g FROM generate_series(1, 10) g RETURNING id") {
			maxShimmed = max(maxShimmed, id)
		}
		maxShimmed = max(maxShimmed, mustInt64(t, direct, "SELECT snowflake.nextval('shimmed')"))
	}
	if got := mustInt64(t, direct, "SELECT seqmax FROM pg_sequence WHERE seqrelid = 'shimmed'::regclass"); got != 2147483647 {
		t.Fatalf("shimmed's MAXVALUE is %d: only a lease widens a sequence", got)
	}

	r := restoreBehindNewProxy(t, e)
	rd := r.connectDirect(t)
	mustRun(t, rd, "SET snowflake.node = 4")
	if id := mustInt64(t, rd, "SELECT snowflake.nextval('shimmed')"); id <= maxShimmed {
		t.Fatalf("restored, shim: %s not above %s", decodeID(id), decodeID(maxShimmed))
	}
	rc := r.connect(t, pgx.QueryExecModeCacheStatement)
	for i := 0; i < 3; i++ {
		if id := mustInt64(t, rc, "SELECT snowflake.nextval('leased')"); id <= maxLeased {
			t.Fatalf("restored, fast path: %s not above %s", decodeID(id), decodeID(maxLeased))
		}
		if id := mustInt64(t, rc, "INSERT INTO nt (v) VALUES (0) RETURNING id"); id <= maxShimmed {
			t.Fatalf("restored, INSERT: %s not above %s", decodeID(id), decodeID(maxShimmed))
		}
	}
	if got := mustInt64(t, rc, "SELECT count(DISTINCT id) FROM nt"); got != 53 {
		t.Fatalf("nt: %d distinct ids, want 53", got)
	}
}
