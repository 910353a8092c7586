package tests

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // Asia/Kolkata for the format test, whatever the machine has

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// The tests in this file run once per pgx v5 query exec mode, through a proxy
// started with --node 7 in front of a stock server where the extension was
// created through the proxy.
const pgxNode = 7

func newPgxEnv(t *testing.T) *testEnv {
	e := newEnv(t, pgxNode)
	e.installExtension(t)
	return e
}

func TestPgxNextvalIsInt8WithTheProxyNode(t *testing.T) {
	e := newPgxEnv(t)
	start := time.Now()
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		ctx := context.Background()

		rows, err := conn.Query(ctx, "SELECT snowflake.nextval()")
		if err != nil {
			t.Fatal(err)
		}
		fields := rows.FieldDescriptions()
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		if len(fields) != 1 || fields[0].Name != "nextval" || fields[0].DataTypeOID != pgtype.Int8OID {
			t.Errorf("columns = %+v, want one int8 column named nextval", fields)
		}
		if tag := rows.CommandTag().String(); tag != "SELECT 1" {
			t.Errorf("command tag = %q, want SELECT 1", tag)
		}
		if len(ids) != 1 {
			t.Fatalf("got %d rows, want 1", len(ids))
		}
		checkIDs(t, "nextval", ids, pgxNode)
		checkPlausibleTime(t, ids[0], start)

		if node := mustInt64(t, conn, "SELECT snowflake.get_node(snowflake.nextval())::int8"); node != pgxNode {
			t.Errorf("get_node(nextval()) = %d, want %d", node, pgxNode)
		}
		var node int32
		if err := conn.QueryRow(ctx, "SELECT snowflake.get_node(snowflake.nextval())").Scan(&node); err != nil || node != pgxNode {
			t.Errorf("SELECT snowflake.get_node(snowflake.nextval()) = %d, %v; want %d", node, err, pgxNode)
		}
	})
}

func TestPgxNextvalWithABindArgument(t *testing.T) {
	e := newPgxEnv(t)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		var ids []int64
		for _, arg := range []any{int64(0), int64(12345), int32(-7), "42"} {
			ids = append(ids, mustInt64(t, conn, "SELECT snowflake.nextval() + $1::int8 * 0", arg))
		}
		checkIDs(t, "nextval() + $1::int8 * 0", ids, pgxNode)

		// The argument still reaches the server: a non-zero factor shows up.
		base := mustInt64(t, conn, "SELECT snowflake.nextval() + $1::int8 * 0", int64(1))
		sum := mustInt64(t, conn, "SELECT $1::int8 + snowflake.nextval() * 0", int64(987654321))
		if sum != 987654321 {
			t.Errorf("$1::int8 + nextval() * 0 with 987654321 = %d", sum)
		}
		checkIDs(t, "after argument queries", []int64{ids[len(ids)-1], base}, pgxNode)

		// Two arguments around the call, and the call as a function argument.
		var a, b int64
		var node int32
		err := conn.QueryRow(context.Background(),
			"SELECT $1::int8, snowflake.get_node(snowflake.nextval()), $2::int8", int64(11), int64(22)).Scan(&a, &node, &b)
		if err != nil || a != 11 || b != 22 || node != pgxNode {
			t.Errorf("SELECT $1, get_node(nextval()), $2 = %d, %d, %d, %v; want 11, %d, 22", a, node, b, err, pgxNode)
		}
	})
}

func TestPgxRepeatedStatementGivesFreshIncreasingIDs(t *testing.T) {
	e := newPgxEnv(t)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		ctx := context.Background()
		var ids []int64
		for i := 0; i < 200; i++ {
			ids = append(ids, mustInt64(t, conn, "SELECT snowflake.nextval()"))
			ids = append(ids, mustInt64(t, conn, "SELECT snowflake.nextval() + $1::int8 * 0", int64(i)))
		}
		checkIDs(t, "same SQL executed 400 times", ids, pgxNode)

		// An explicitly prepared named statement (pgx then uses it whatever
		// the mode), executed many times.
		name := "next_id_" + modeName(mode)
		if _, err := conn.Prepare(ctx, name, "SELECT snowflake.nextval()"); err != nil {
			t.Fatal(err)
		}
		sd, err := conn.Prepare(ctx, name+"_arg", "SELECT snowflake.nextval('snowflake.id_seq') + $1::int8 * 0")
		if err != nil {
			t.Fatal(err)
		}
		if len(sd.ParamOIDs) != 1 || sd.ParamOIDs[0] != pgtype.Int8OID {
			t.Errorf("prepared statement parameters = %v, want [int8] (injected parameters must be hidden)", sd.ParamOIDs)
		}
		if len(sd.Fields) != 1 || sd.Fields[0].DataTypeOID != pgtype.Int8OID {
			t.Errorf("prepared statement fields = %+v, want one int8", sd.Fields)
		}
		prepared := ids[len(ids)-1:]
		for i := 0; i < 100; i++ {
			prepared = append(prepared, mustInt64(t, conn, name))
			prepared = append(prepared, mustInt64(t, conn, name+"_arg", int64(i)))
		}
		checkIDs(t, "prepared statements executed 100 times each", prepared, pgxNode)

		// A batch: many executions pipelined before one Sync.
		b := &pgx.Batch{}
		for i := 0; i < 20; i++ {
			b.Queue("SELECT snowflake.nextval()")
			b.Queue("SELECT snowflake.nextval() + $1::int8 * 0", int64(i))
		}
		br := conn.SendBatch(ctx, b)
		batched := prepared[len(prepared)-1:]
		for i := 0; i < b.Len(); i++ {
			var id int64
			if err := br.QueryRow().Scan(&id); err != nil {
				t.Fatalf("batch item %d: %v", i, err)
			}
			batched = append(batched, id)
		}
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
		checkIDs(t, "batch of 40 nextval statements", batched, pgxNode)
	})
}

func TestPgxCurrval(t *testing.T) {
	e := newPgxEnv(t)
	e.execDirect(t, "CREATE SEQUENCE curseq")
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		ctx := context.Background()

		_, err := queryInt64s(ctx, conn, "SELECT snowflake.currval()")
		wantError(t, "currval() before nextval()", err, "55000", `currval of sequence "id_seq" is not yet defined in this session`)
		_, err = queryInt64s(ctx, conn, "SELECT snowflake.currval('curseq')")
		wantError(t, "currval('curseq') before nextval('curseq')", err, "55000", `currval of sequence "curseq" is not yet defined in this session`)

		for i := 0; i < 3; i++ {
			id := mustInt64(t, conn, "SELECT snowflake.nextval()")
			if cur := mustInt64(t, conn, "SELECT snowflake.currval()"); cur != id {
				t.Errorf("currval() = %d after nextval() = %d", cur, id)
			}
			if cur := mustInt64(t, conn, "SELECT snowflake.currval('snowflake.id_seq'::regclass)"); cur != id {
				t.Errorf("currval('snowflake.id_seq'::regclass) = %d after nextval() = %d", cur, id)
			}
		}
		// A nextval on one sequence leaves the other's currval alone.
		last := mustInt64(t, conn, "SELECT snowflake.currval()")
		other := mustInt64(t, conn, "SELECT snowflake.nextval('curseq')")
		if cur := mustInt64(t, conn, "SELECT snowflake.currval('curseq')"); cur != other {
			t.Errorf("currval('curseq') = %d after nextval('curseq') = %d", cur, other)
		}
		if cur := mustInt64(t, conn, "SELECT snowflake.currval()"); cur != last {
			t.Errorf("currval() = %d, want %d (unchanged by nextval('curseq'))", cur, last)
		}
		// currval after per-row nextvals is the last one issued.
		ids := mustInt64s(t, conn, "SELECT snowflake.nextval() FROM generate_series(1, 5)")
		if cur := mustInt64(t, conn, "SELECT snowflake.currval()"); len(ids) != 5 || cur != ids[len(ids)-1] {
			t.Errorf("currval() = %d after per-row nextvals %v, want the last", cur, ids)
		}
		// currval is per session: a new session has none.
		fresh := e.connect(t, mode)
		_, err = queryInt64s(ctx, fresh, "SELECT snowflake.currval()")
		wantError(t, "currval() in a new session", err, "55000", "is not yet defined in this session")
	})
}

func TestPgxPerRowNextvalGivesDistinctIDs(t *testing.T) {
	e := newPgxEnv(t)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		before := mustInt64(t, conn, "SELECT snowflake.nextval()")
		ids := mustInt64s(t, conn, "SELECT snowflake.nextval() FROM generate_series(1,10)")
		if len(ids) != 10 {
			t.Fatalf("got %d rows, want 10", len(ids))
		}
		checkIDs(t, "nextval() FROM generate_series(1,10)", append([]int64{before}, ids...), pgxNode)

		withArg := mustInt64s(t, conn, "SELECT snowflake.nextval() + $1::int8 * 0 FROM generate_series(1, $2::int)", int64(0), int64(10))
		if len(withArg) != 10 {
			t.Fatalf("got %d rows, want 10", len(withArg))
		}
		checkIDs(t, "per-row nextval with arguments", append(ids[9:], withArg...), pgxNode)

		// A subquery evaluated per row of the outer query.
		sub := mustInt64s(t, conn, "SELECT (SELECT snowflake.nextval() WHERE g > 0) FROM generate_series(1,5) g")
		seen := map[int64]bool{}
		for _, id := range sub {
			if seen[id] {
				t.Errorf("correlated subquery gave duplicate ID %d: %v", id, sub)
			}
			seen[id] = true
		}
	})
}

func TestPgxNextvalOnACreatedSequence(t *testing.T) {
	e := newPgxEnv(t)
	e.execDirect(t, `CREATE SEQUENCE myseq; CREATE SCHEMA other; CREATE SEQUENCE other."Mixed_Seq"`)
	var issued int64
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		ids := []int64{
			mustInt64(t, conn, "SELECT snowflake.nextval('myseq')"),
			mustInt64(t, conn, "SELECT snowflake.nextval('myseq'::regclass)"),
			mustInt64(t, conn, "SELECT snowflake.nextval('public.myseq')"),
			mustInt64(t, conn, "SELECT snowflake.nextval($1::regclass)", "myseq"),
		}
		checkIDs(t, "nextval('myseq') in its spellings", ids, pgxNode)
		if cur := mustInt64(t, conn, "SELECT snowflake.currval('myseq')"); cur != ids[3] {
			t.Errorf("currval('myseq') = %d, want %d", cur, ids[3])
		}
		mixed := mustInt64s(t, conn, `SELECT snowflake.nextval('other."Mixed_Seq"') FROM generate_series(1,2)`)
		mixed = append(mixed, mustInt64(t, conn, `SELECT snowflake.nextval('other."Mixed_Seq"')`))
		checkIDs(t, `nextval('other."Mixed_Seq"')`, mixed, pgxNode)

		issued = max(issued, ids[3])
	})
	// The sequence's last_value covers what was issued from it once the
	// proxy has stopped (the pgEdge-visible state; docs/state-model.md:
	// it trails the fast path by up to one lease while the proxy runs).
	e.closeProxy(t, cancelledContext())
	if last := mustInt64(t, e.connectDirect(t), "SELECT last_value FROM myseq"); last < issued {
		t.Errorf("myseq.last_value = %d %v is below the issued ID %d %v", last, decodeID(last), issued, decodeID(issued))
	}
}

// knownIDs are IDs with hand-checked fields: 1704996539845 is
// 2024-01-11 18:08:59.845 UTC; 1704996539800 checks that get_epoch keeps
// trailing zeros of its three decimals and 1704996539000 a whole second.
var knownIDs = []int64{
	composeID(1704996539845-snowflakeEpochUnixMs, 7, 42),
	composeID(1704996539800-snowflakeEpochUnixMs, 1023, 4095),
	composeID(1704996539000-snowflakeEpochUnixMs, 1, 0),
	composeID(0, 512, 1),
}

func TestPgxDecodingFunctionsOnKnownIDs(t *testing.T) {
	if got := expectedEpochText(knownIDs[0]); got != "1704996539.845" {
		t.Fatalf("test helper: expectedEpochText = %s", got)
	}
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	e := newPgxEnv(t)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		ctx := context.Background()
		mustRun(t, conn, "SET DateStyle = ISO")
		for _, id := range knownIDs {
			d := decodeID(id)
			rows, err := conn.Query(ctx, "SELECT snowflake.get_epoch($1), snowflake.get_count($1), snowflake.get_node($1), snowflake.format($1)", id)
			if err != nil {
				t.Fatal(err)
			}
			fields := rows.FieldDescriptions()
			rows.Close()
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			wantTypes := []uint32{pgtype.NumericOID, pgtype.Int4OID, pgtype.Int4OID, pgtype.JSONBOID}
			wantNames := []string{"get_epoch", "get_count", "get_node", "format"}
			for i, f := range fields {
				if i < len(wantTypes) && (f.DataTypeOID != wantTypes[i] || f.Name != wantNames[i]) {
					t.Errorf("column %d = %s type %d, want %s type %d", i, f.Name, f.DataTypeOID, wantNames[i], wantTypes[i])
				}
			}

			var epoch string
			var count, node int32
			if err := conn.QueryRow(ctx, "SELECT snowflake.get_epoch($1)::text, snowflake.get_count($1), snowflake.get_node($1)", id).Scan(&epoch, &count, &node); err != nil {
				t.Fatal(err)
			}
			if epoch != expectedEpochText(id) || int(count) != d.Count || int(node) != d.Node {
				t.Errorf("ID %d: get_epoch, get_count, get_node = %s, %d, %d; want %s, %d, %d",
					id, epoch, count, node, expectedEpochText(id), d.Count, d.Node)
			}
			var toTS time.Time
			if err := conn.QueryRow(ctx, "SELECT to_timestamp(snowflake.get_epoch($1))", id).Scan(&toTS); err != nil || !toTS.Equal(d.Time()) {
				t.Errorf("ID %d: to_timestamp(get_epoch) = %s, %v; want %s", id, toTS, err, d.Time())
			}

			for _, loc := range []*time.Location{time.UTC, kolkata} {
				mustRun(t, conn, fmt.Sprintf("SET TimeZone = '%s'", loc))
				if got, want := mustString(t, conn, "SELECT snowflake.format($1)::text", id), expectedFormatText(id, loc); got != want {
					t.Errorf("ID %d, TimeZone %s: format = %s, want %s", id, loc, got, want)
				}
			}
		}
	})
}

func TestPgxColumnDefaultWithReturning(t *testing.T) {
	e := newPgxEnv(t)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		table := "items_" + modeName(mode)
		mustRun(t, conn, fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), v text)", table))

		var returned []int64
		for i := 0; i < 20; i++ {
			returned = append(returned, mustInt64(t, conn, fmt.Sprintf("INSERT INTO %s (v) VALUES ($1) RETURNING id", table), fmt.Sprint("row", i)))
		}
		if cur := mustInt64(t, conn, "SELECT snowflake.currval()"); cur != returned[len(returned)-1] {
			t.Errorf("currval() = %d after INSERT ... RETURNING id = %d", cur, returned[len(returned)-1])
		}
		returned = append(returned, mustInt64s(t, conn, fmt.Sprintf("INSERT INTO %s (v) VALUES ('a'), ('b'), ('c') RETURNING id", table))...)
		returned = append(returned, mustInt64s(t, conn, fmt.Sprintf("INSERT INTO %s VALUES (DEFAULT, 'd') RETURNING id", table))...)
		returned = append(returned, mustInt64s(t, conn, fmt.Sprintf("INSERT INTO %s DEFAULT VALUES RETURNING id", table))...)
		returned = append(returned, mustInt64s(t, conn, fmt.Sprintf("INSERT INTO %s (v) SELECT 'g' || g FROM generate_series(1,5) g RETURNING id", table))...)
		if len(returned) != 30 {
			t.Fatalf("got %d returned ids, want 30", len(returned))
		}
		checkIDs(t, "ids from INSERT ... RETURNING", returned, pgxNode)

		stored := mustInt64s(t, conn, fmt.Sprintf("SELECT id FROM %s ORDER BY id", table))
		if fmt.Sprint(stored) != fmt.Sprint(returned) {
			t.Errorf("stored ids %v differ from returned ids %v", stored, returned)
		}
		tag := mustRun(t, conn, fmt.Sprintf("INSERT INTO %s (v) VALUES ($1), ($2)", table), "x", "y")
		if tag.String() != "INSERT 0 2" {
			t.Errorf("command tag = %q, want INSERT 0 2", tag)
		}
	})
}

// noticeRecorder collects the notices a connection receives.
type noticeRecorder struct {
	mu      sync.Mutex
	notices []*pgconn.Notice
}

func (r *noticeRecorder) install(cfg *pgx.ConnConfig) {
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		r.mu.Lock()
		r.notices = append(r.notices, n)
		r.mu.Unlock()
	}
}

// take returns the notices received so far as "SEVERITY CODE message" and
// forgets them.
func (r *noticeRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range r.notices {
		out = append(out, n.Severity+" "+n.Code+" "+n.Message)
	}
	r.notices = nil
	return out
}

func TestPgxExtensionLifecycle(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		e := newEnv(t, pgxNode) // a database per mode: the extension is dropped
		rec := &noticeRecorder{}
		conn := e.connectWith(t, mode, rec.install)
		ctx := context.Background()
		// step runs sql and checks its command tag (or SQLSTATE) and notices.
		step := func(sql, wantTag, wantState string, wantNotices ...string) {
			t.Helper()
			tag, err := run(ctx, conn, sql)
			if wantState != "" {
				wantError(t, sql, err, wantState, "")
			} else if err != nil {
				t.Errorf("%s: %v", sql, err)
			} else if tag.String() != wantTag {
				t.Errorf("%s: command tag %q, want %q", sql, tag, wantTag)
			}
			if got := rec.take(); fmt.Sprint(got) != fmt.Sprint(wantNotices) {
				t.Errorf("%s: notices %q, want %q", sql, got, wantNotices)
			}
		}
		schemaExists := func() bool {
			direct := e.connectDirect(t)
			defer direct.Close(ctx)
			return mustInt64(t, direct, "SELECT count(*) FROM pg_namespace WHERE nspname = 'snowflake'") == 1
		}

		step("CREATE EXTENSION snowflake", "CREATE EXTENSION", "")
		if !schemaExists() {
			t.Fatal("schema snowflake missing after CREATE EXTENSION")
		}
		checkIDs(t, "nextval after CREATE EXTENSION", mustInt64s(t, conn, "SELECT snowflake.nextval()"), pgxNode)
		step("CREATE EXTENSION IF NOT EXISTS snowflake", "CREATE EXTENSION", "",
			`NOTICE 42710 extension "snowflake" already exists, skipping`)
		step("CREATE EXTENSION snowflake", "", "42710")
		// Updating to the installed version: PostgreSQL answers with a
		// notice that it is already installed, or silently.
		if tag, err := run(ctx, conn, "ALTER EXTENSION snowflake UPDATE"); err != nil || tag.String() != "ALTER EXTENSION" {
			t.Errorf("ALTER EXTENSION snowflake UPDATE: tag %q, %v", tag, err)
		}
		if got := rec.take(); len(got) > 1 || len(got) == 1 && !strings.Contains(got[0], "is already installed") {
			t.Errorf("ALTER EXTENSION snowflake UPDATE: notices %q", got)
		}

		// A column default depends on the extension: plain DROP refuses.
		step("CREATE TABLE dep (id bigint DEFAULT snowflake.nextval())", "CREATE TABLE", "")
		step("DROP EXTENSION snowflake", "", "2BP01")
		step("DROP EXTENSION snowflake CASCADE", "DROP EXTENSION", "",
			"NOTICE 00000 drop cascades to default value for column id of table dep")
		if schemaExists() {
			t.Error("schema snowflake still exists after DROP EXTENSION")
		}
		// Without the extension, the proxy must not answer calls itself.
		_, err := queryInt64s(ctx, conn, "SELECT snowflake.nextval()")
		wantError(t, "nextval() after DROP EXTENSION", err, "3F000", `schema "snowflake" does not exist`)
		step("DROP EXTENSION snowflake", "", "42704")
		step("DROP EXTENSION IF EXISTS snowflake", "DROP EXTENSION", "",
			`NOTICE 00000 extension "snowflake" does not exist, skipping`)

		step("CREATE EXTENSION IF NOT EXISTS snowflake", "CREATE EXTENSION", "")
		checkIDs(t, "nextval after re-creating", mustInt64s(t, conn, "SELECT snowflake.nextval()"), pgxNode)
		step("DROP EXTENSION snowflake", "DROP EXTENSION", "")
		step("CREATE EXTENSION snowflake CASCADE", "CREATE EXTENSION", "")
		checkIDs(t, "nextval after CREATE ... CASCADE", mustInt64s(t, conn, "SELECT snowflake.nextval()"), pgxNode)
	})
}
