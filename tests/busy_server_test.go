package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// shimCallsBeforeMarker returns how many times the shim issued an ID in
// the test's database (pg_stat_user_functions for snowflake._issue; the
// database runs with track_functions = 'all') up to now. Statistics reach
// the view when a session reports them, after a transaction and not more
// often than the server's interval, so it makes a marker of two shim calls
// in session, waits until they are counted (nudging session with empty
// transactions), and gives the count without them.
func shimCallsBeforeMarker(t *testing.T, session *pgx.Conn, check *pgx.Conn) int64 {
	t.Helper()
	before := mustInt64(t, check, `SELECT coalesce(sum(calls), 0)::int8 FROM pg_stat_user_functions
		WHERE schemaname = 'snowflake' AND funcname = '_issue'`)
	const marker = 2
	mustRun(t, session, "SELECT snowflake.nextval('marker_seq') FROM generate_series(1, $1)", marker)
	if mustInt64(t, check, "SELECT current_setting('server_version_num')::int8") >= 150000 {
		mustRun(t, session, "SELECT pg_stat_force_next_flush()")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mustRun(t, session, "SELECT 1")
		mustRun(t, check, "SELECT pg_stat_clear_snapshot()")
		now := mustInt64(t, check, `SELECT coalesce(sum(calls), 0)::int8 FROM pg_stat_user_functions
			WHERE schemaname = 'snowflake' AND funcname = '_issue'`)
		if now >= before+marker {
			return now - marker
		}
		if time.Now().After(deadline) {
			t.Fatalf("the marker's %d shim calls never reached pg_stat_user_functions (%d, then %d)", marker, before, now)
		}
	}
}

// The check for a busy server: a session idle in a transaction
// that began before the table existed (a report, pg_dump, an ORM session
// left open) used to keep a new sequence's lease pending, and every INSERT
// went to the shim. 200 INSERTs through the proxy into the new table now
// make no shim call, in both protocols.
func TestOlderOpenTransactionKeepsFastPath(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		const node = 7
		p := newStatsProxy(t, node)
		e := p.testEnv
		mustRun(t, p.connect(t, pgx.QueryExecModeSimpleProtocol), "CREATE EXTENSION snowflake")
		e.execDirect(t, fmt.Sprintf(`ALTER DATABASE %q SET track_functions = 'all'`, e.db))
		e.execDirect(t, "CREATE SEQUENCE marker_seq")
		ctx := context.Background()

		idle := e.connectDirect(t)
		mustRun(t, idle, "BEGIN ISOLATION LEVEL REPEATABLE READ")
		mustRun(t, idle, "SELECT count(*) FROM pg_class")

		// The table is new to the proxy's sessions once the DDL's
		// notification has reached it (the check waits a second).
		ddl := p.connect(t, pgx.QueryExecModeSimpleProtocol)
		before := p.waitCatalogEpoch(t, 0)
		mustRun(t, ddl, `CREATE SEQUENCE lt_seq;
			CREATE TABLE lt (id bigint PRIMARY KEY DEFAULT snowflake.nextval('lt_seq'), v int)`)
		p.waitCatalogEpoch(t, before)

		c := p.connect(t, mode)
		check := e.connectDirect(t)
		base := shimCallsBeforeMarker(t, c, check) + 2 // with the marker

		fastBefore := p.ws.Stats().FastIDs
		_, blocks := shimWork(t, check)
		ids := make([]int64, 0, 200)
		for i := range 200 {
			var id int64
			if err := c.QueryRow(ctx, "INSERT INTO lt (v) VALUES ($1) RETURNING id", i).Scan(&id); err != nil {
				t.Fatalf("INSERT %d: %v", i, err)
			}
			ids = append(ids, id)
		}
		calls := shimCallsBeforeMarker(t, c, check) - base
		if calls != 0 {
			t.Fatalf("%d of 200 INSERTs went to the shim with an older transaction open", calls)
		}
		if _, after := shimWork(t, check); after != blocks {
			t.Fatalf("INSERTs drew the shim's blocks with an older transaction open (%s, then %s)", blocks, after)
		}
		if fast := p.ws.Stats().FastIDs - fastBefore; fast != 200 {
			t.Fatalf("%d of 200 INSERTs' IDs came from the fast path", fast)
		}
		checkIDs(t, "inserts", ids, node)
		mustRun(t, idle, "COMMIT")
	})
}

// The check for shim IDs during a live lease: per-row calls,
// INSERT ... SELECT defaults, COPY and a direct connection, all for the
// proxy's node while its fast path holds a lease, issue IDs at most 100 ms
// ahead of clock_timestamp() (they were dated 1.1 to 2 s ahead).
func TestShimIDsDatedAtTheClockDuringALease(t *testing.T) {
	t.Parallel()
	const node = 9
	p := newStatsProxy(t, node)
	e := p.testEnv
	mustRun(t, p.connect(t, pgx.QueryExecModeSimpleProtocol), "CREATE EXTENSION snowflake")
	before := p.waitCatalogEpoch(t, 0)
	e.execDirect(t, `CREATE SEQUENCE s;
		CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake.nextval('s'),
		                at timestamptz NOT NULL DEFAULT clock_timestamp(), how text NOT NULL)`)
	p.waitCatalogEpoch(t, before)
	c := p.connect(t, pgx.QueryExecModeCacheStatement)
	direct := e.connectDirect(t)
	mustRun(t, direct, fmt.Sprintf("SET snowflake.node = %d", node))
	ctx := context.Background()

	// The lease is live while its top (the H sequence) is ahead of the
	// server's clock; a fast-path INSERT keeps it so.
	leaseLive := func(t *testing.T) {
		t.Helper()
		mustRun(t, c, "INSERT INTO t (how) VALUES ('fast')")
		live := mustInt64(t, direct, fmt.Sprintf(`SELECT count(*) FROM pg_class h
			WHERE h.relnamespace = 'snowflake'::regnamespace AND h.relname = '_hw_' || 's'::regclass::oid || '_%d'
			  AND snowflake.get_epoch(pg_sequence_last_value(h.oid::regclass)) > extract(epoch FROM clock_timestamp())`, node))
		if live != 1 {
			t.Fatal("no live lease of the proxy's node: the check would prove nothing")
		}
	}
	steps := []struct {
		how string
		run func(t *testing.T)
	}{
		{"per-row", func(t *testing.T) {
			mustRun(t, c, `INSERT INTO t (id, at, how)
				SELECT x.id, clock_timestamp(), 'per-row'
				FROM (SELECT snowflake.nextval('s') AS id FROM generate_series(1, 200)) x`)
		}},
		{"insert-select", func(t *testing.T) {
			mustRun(t, c, "INSERT INTO t (how) SELECT 'insert-select' FROM generate_series(1, 200)")
		}},
		{"copy", func(t *testing.T) {
			rows := make([][]any, 200)
			for i := range rows {
				rows[i] = []any{"copy"}
			}
			if _, err := c.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"how"}, pgx.CopyFromRows(rows)); err != nil {
				t.Fatal(err)
			}
		}},
		{"direct", func(t *testing.T) {
			for range 50 {
				mustRun(t, direct, "INSERT INTO t (how) VALUES ('direct')")
			}
		}},
	}
	for _, st := range steps {
		t.Run(st.how, func(t *testing.T) {
			leaseLive(t)
			st.run(t)
			var n, maxAheadMs int64
			if err := direct.QueryRow(ctx, `SELECT count(*),
				coalesce(max(((snowflake.get_epoch(id) - extract(epoch FROM at)) * 1000)::int8), 0)
				FROM t WHERE how = $1`, st.how).Scan(&n, &maxAheadMs); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatal("no rows")
			}
			if maxAheadMs > 100 {
				t.Fatalf("%s: shim IDs up to %d ms ahead of clock_timestamp() during a lease", st.how, maxAheadMs)
			}
			t.Logf("%s: %d IDs, at most %d ms ahead of clock_timestamp()", st.how, n, maxAheadMs)
		})
	}
	ids := mustInt64s(t, direct, "SELECT id FROM t ORDER BY id")
	seen := map[int64]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("duplicate %d", id)
		}
		seen[id] = true
	}
}
