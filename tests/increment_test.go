package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The pgEdge rule for the IDs of one sequence, decoded independently of the
// generator: at one instant (the clock not past the last ID's ms) the
// count grows by the sequence's INCREMENT, and when it would pass 4095 it
// restarts at 0 in the next ms; once the clock has moved on, the count
// restarts at 0 in the clock's ms.

// atOneInstant is the ID that follows prev when the clock has not passed
// prev's ms (as for the calls of one statement, which the proxy serves at
// one clock reading).
func atOneInstant(prev, inc int64) int64 {
	p := decodeID(prev)
	if int64(p.Count)+inc > 1<<countBits-1 {
		return composeID(p.Ms+1, p.Node, 0)
	}
	return composeID(p.Ms, p.Node, p.Count+int(inc))
}

// ruleFollows reports whether cur may follow prev: at one instant, or in
// a later ms with count 0.
func ruleFollows(prev, cur, inc int64) bool {
	c, p := decodeID(cur), decodeID(prev)
	return cur == atOneInstant(prev, inc) || c.Ms > p.Ms && c.Count == 0 && c.Node == p.Node
}

const unionOf3 = "SELECT snowflake.nextval('%[1]s') UNION ALL SELECT snowflake.nextval('%[1]s') UNION ALL SELECT snowflake.nextval('%[1]s')"

// Regression: after ALTER SEQUENCE s INCREMENT 100 through the proxy,
// three calls in one UNION ALL at a fresh millisecond gave counts 2, 3, 4
// (the generator kept the INCREMENT it had read with its first lease) or
// 0, 0, 100 (each call read the clock, so the ms moved between calls),
// where the extension gives 0, 100, 200. Now every call takes the
// INCREMENT its session sees and the calls of one statement share one
// clock reading, so the proxy's fast path gives the IDs a single
// C-extension node gives, in and across statements, in every protocol.
//
// Exact values: after setval to a snowflake an hour ahead with count 1995,
// the clock cannot interfere; the proxy's IDs must equal the rule's and
// those of the SQL shim on a direct connection with the same setval.
// Relative values at the present time: inside a statement each ID is
// exactly the rule's successor at one instant; across statements either
// that or a later ms with count 0.
//
// DDL (CREATE and ALTER SEQUENCE, here and on the direct connection) also
// reaches the proxy as a catalog notification, a little later, and makes
// sessions re-read their catalog mirror. In pgx's exec mode (Parse, Bind,
// Execute and Sync at once) a notification landing between the Parse and
// the Bind leaves that statement to the shim, which reads the clock per
// call: so each DDL here waits until the proxy has heard of it.
func TestIncrementWithinStatement(t *testing.T) {
	const node = 9
	p := newStatsProxy(t, node)
	admin := p.connect(t, pgx.QueryExecModeSimpleProtocol)
	mustRun(t, admin, "CREATE EXTENSION snowflake")
	direct := p.connectDirect(t)
	mustRun(t, direct, fmt.Sprintf("SET snowflake.node = %d", node))
	future := time.Now().Add(time.Hour).UnixMilli() - snowflakeEpochUnixMs
	ddl := func(t *testing.T, c *pgx.Conn, sql string) {
		t.Helper()
		before := p.waitCatalogEpoch(t, 0)
		mustRun(t, c, sql)
		p.waitCatalogEpoch(t, before)
	}

	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := p.connect(t, mode)
		// issue fails unless every ID of sql came from the fast path.
		issueOn := func(c *pgx.Conn, sql string) []int64 {
			t.Helper()
			before := p.ws.Stats().FastIDs
			ids := mustInt64s(t, c, sql)
			if fast := p.ws.Stats().FastIDs - before; fast != uint64(len(ids)) {
				t.Fatalf("%s: %d of %d IDs from the fast path", sql, fast, len(ids))
			}
			checkIDs(t, sql, ids, node)
			return ids
		}
		issue := func(sql string) []int64 { t.Helper(); return issueOn(conn, sql) }
		// warm takes the sequence's first lease through a simple Query.
		warm := func(seq string) int64 {
			t.Helper()
			return issueOn(admin, fmt.Sprintf("SELECT snowflake.nextval('%s')", seq))[0]
		}
		for _, inc := range []int64{100, 4096, 9999} {
			seq := fmt.Sprintf("exact_%s_%d", modeName(mode), inc)
			// Created with INCREMENT 1 and used before the ALTER: the
			// path that kept the old INCREMENT.
			ddl(t, admin, "CREATE SEQUENCE "+seq)
			warm(seq)
			ddl(t, conn, fmt.Sprintf("ALTER SEQUENCE %s INCREMENT %d", seq, inc))
			// Counts up to 3071 are the fast path's: 1995 + 9 * 100 stays
			// below (docs/state-model.md).
			start := composeID(future, node, 1995)
			mustRun(t, conn, fmt.Sprintf("SELECT setval('%s', %d)", seq, start))

			twin := seq + "_shim"
			ddl(t, direct, fmt.Sprintf("CREATE SEQUENCE %s INCREMENT %d", twin, inc))
			mustRun(t, direct, fmt.Sprintf("SELECT setval('%s', %d)", twin, start))

			prev := start
			for stmt := range 3 {
				got := issue(fmt.Sprintf(unionOf3, seq))
				shim := mustInt64s(t, direct, fmt.Sprintf(unionOf3, twin))
				for i, id := range got {
					want := atOneInstant(prev, inc)
					if id != want || shim[i] != want {
						t.Fatalf("INCREMENT %d statement %d call %d: proxy %v, shim %v, want %v",
							inc, stmt, i, decodeID(id), decodeID(shim[i]), decodeID(want))
					}
					prev = id
				}
			}
		}
		// The headline case, spelt out: a fresh ms (4000 + 100 does not
		// fit the last one), then counts 0, 100, 200.
		first := decodeID(composeID(future, node, 4000))
		for _, tc := range []struct {
			inc    int64
			counts [3]int
			ms     [3]int64
		}{
			{100, [3]int{0, 100, 200}, [3]int64{1, 1, 1}},
			{9999, [3]int{0, 0, 0}, [3]int64{1, 2, 3}},
		} {
			seq := fmt.Sprintf("headline_%s_%d", modeName(mode), tc.inc)
			ddl(t, admin, fmt.Sprintf("CREATE SEQUENCE %s INCREMENT %d", seq, tc.inc))
			warm(seq)
			mustRun(t, conn, fmt.Sprintf("SELECT setval('%s', %d)", seq, composeID(first.Ms, node, first.Count)))
			for i, id := range issue(fmt.Sprintf(unionOf3, seq)) {
				if d := decodeID(id); d.Count != tc.counts[i] || d.Ms != first.Ms+tc.ms[i] {
					t.Fatalf("INCREMENT %d call %d: %v, want count %d at ms +%d", tc.inc, i, d, tc.counts[i], tc.ms[i])
				}
			}
		}

		// The column defaults of a multi-row INSERT are calls of one
		// statement too.
		def := "def_" + modeName(mode)
		ddl(t, admin, fmt.Sprintf("CREATE SEQUENCE %s", def))
		ddl(t, admin, fmt.Sprintf("CREATE TABLE %[1]s_t (id bigint DEFAULT snowflake.nextval('%[1]s'), v int)", def))
		warm(def)
		ddl(t, conn, fmt.Sprintf("ALTER SEQUENCE %s INCREMENT 100", def))
		mustRun(t, conn, fmt.Sprintf("SELECT setval('%s', %d)", def, composeID(first.Ms, node, first.Count)))
		for i, id := range issue(fmt.Sprintf("INSERT INTO %s_t (v) VALUES (1), (2), (3) RETURNING id", def)) {
			if want := composeID(first.Ms+1, node, 100*i); id != want {
				t.Fatalf("INSERT default %d: %v, want %v", i, decodeID(id), decodeID(want))
			}
		}

		// At the present time, one sequence through a series of ALTERs.
		seq := "now_" + modeName(mode)
		ddl(t, admin, "CREATE SEQUENCE "+seq)
		prev := warm(seq)
		for _, inc := range []int64{100, 4096, 9999, 1, 100} {
			ddl(t, conn, fmt.Sprintf("ALTER SEQUENCE %s INCREMENT %d", seq, inc))
			for stmt := range 10 {
				sql := fmt.Sprintf(unionOf3, seq)
				if stmt%2 == 1 {
					sql = fmt.Sprintf("SELECT snowflake.nextval('%s')", seq)
				}
				for i, id := range issue(sql) {
					ok := ruleFollows(prev, id, inc)
					if i > 0 {
						ok = id == atOneInstant(prev, inc) // same statement: one instant
					}
					if !ok {
						t.Fatalf("INCREMENT %d statement %d call %d: %v after %v breaks the rule",
							inc, stmt, i, decodeID(id), decodeID(prev))
					}
					prev = id
				}
			}
		}
	})
}

// waitCatalogEpoch waits until the proxy's catalog epoch of the test's
// database is armed (not 0) and differs from not, and returns it: DDL
// made before the call has then reached the sessions' catalog checks.
func (p *statsProxy) waitCatalogEpoch(t *testing.T, not uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if e := p.svc.CatalogEpoch(p.db); e != 0 && e != not {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("catalog epoch of %s still %d after 15s", p.db, not)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
}

// Regression: inside a transaction block, ALTER SEQUENCE (and TRUNCATE
// ... RESTART IDENTITY, which resets owned sequences) holds a lock on the
// sequence until the transaction ends; the next snowflake.nextval through
// the proxy asked for a lease on a control connection, whose query waited
// for that lock while the session waited for the lease: the statement
// hung for good. Such transactions now leave their calls to the shim,
// which issues in the session itself, with the new INCREMENT; after the
// commit the fast path continues above them with it.
func TestAlterSequenceInTransaction(t *testing.T) {
	const node = 6
	p := newStatsProxy(t, node)
	admin := p.connect(t, pgx.QueryExecModeSimpleProtocol)
	mustRun(t, admin, "CREATE EXTENSION snowflake")
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := p.connect(t, mode)
		seq := "tx_" + modeName(mode)
		mustRun(t, admin, fmt.Sprintf("CREATE SEQUENCE %[1]s; CREATE TABLE %[1]s_t (id bigint DEFAULT snowflake.nextval('%[1]s'))", seq))
		mustRun(t, admin, fmt.Sprintf("CREATE SEQUENCE %[1]s_owned; CREATE TABLE %[1]s_o (id bigint DEFAULT snowflake.nextval('%[1]s_owned')); ALTER SEQUENCE %[1]s_owned OWNED BY %[1]s_o.id", seq))
		mustRun(t, admin, fmt.Sprintf("INSERT INTO %s_o DEFAULT VALUES", seq))
		prev := mustInt64(t, admin, fmt.Sprintf("SELECT snowflake.nextval('%s')", seq)) // a lease of this key exists

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var ids []int64
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER SEQUENCE %s INCREMENT 100", seq)); err != nil {
				return err
			}
			got, err := queryInt64s(ctx, conn, fmt.Sprintf(unionOf3, seq))
			if err != nil {
				return err
			}
			ids = append(ids, got...)
			return nil
		})
		if err != nil {
			t.Fatalf("transaction with ALTER SEQUENCE: %v", err)
		}
		// TRUNCATE ... RESTART IDENTITY locks the owned sequence alike.
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("TRUNCATE %s_o RESTART IDENTITY", seq)); err != nil {
				return err
			}
			got, err := queryInt64s(ctx, conn, fmt.Sprintf("INSERT INTO %s_o DEFAULT VALUES RETURNING id", seq))
			if err == nil {
				checkIDs(t, "after TRUNCATE ... RESTART IDENTITY", got, node)
			}
			return err
		})
		if err != nil {
			t.Fatalf("transaction with TRUNCATE ... RESTART IDENTITY: %v", err)
		}
		before := p.ws.Stats().FastIDs
		after := mustInt64s(t, conn, fmt.Sprintf(unionOf3, seq))
		if fast := p.ws.Stats().FastIDs - before; fast != 3 {
			t.Fatalf("after the commit: %d of 3 IDs from the fast path", fast)
		}
		ids = append(ids, after...)
		checkIDs(t, "IDs around the transaction", append([]int64{prev}, ids...), node)
		// IDs 0-2 come from the shim while the fast path holds a lease,
		// 3-5 from the fast path: where the path changes only order is
		// owed (docs/state-model.md), elsewhere the rule, the shim's
		// counts starting at 3072 during a lease.
		for i, id := range ids {
			switch {
			case i == 0 || i == 3:
				if id <= prev {
					t.Fatalf("ID %d: %v not above %v", i, decodeID(id), decodeID(prev))
				}
			case i < 3:
				if !ruleFollows(prev, id, 100) && !(decodeID(id).Ms > decodeID(prev).Ms && decodeID(id).Count == 3072) {
					t.Fatalf("ID %d: %v after %v breaks the shim's rule with INCREMENT 100", i, decodeID(id), decodeID(prev))
				}
			default:
				if !ruleFollows(prev, id, 100) {
					t.Fatalf("ID %d: %v after %v breaks the rule with INCREMENT 100", i, decodeID(id), decodeID(prev))
				}
			}
			prev = id
		}
	})
}
