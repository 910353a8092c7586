package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// sequenceShape is a sequence definition the extension accepts, with the
// INCREMENT its rule adds to the count.
type sequenceShape struct {
	name string
	// ddl creates the sequence %[1]s (a qualified, quoted name) and
	// whatever it needs; several statements separated by semicolons.
	ddl string
	inc int64
}

// sequenceShapes are the shapes of issue 26: narrower than a snowflake
// (MAXVALUE, AS integer or smallint, a range across zero, descending),
// with MINVALUE, START, CYCLE, CACHE, UNLOGGED, an identity column's, and
// names that need quoting.
var sequenceShapes = []sequenceShape{
	{"bigint", "CREATE SEQUENCE %[1]s", 1},
	{"maxvalue 1000000", "CREATE SEQUENCE %[1]s MAXVALUE 1000000", 1},
	{"as integer", "CREATE SEQUENCE %[1]s AS integer", 1},
	{"as smallint", "CREATE SEQUENCE %[1]s AS smallint", 1},
	{"range across zero", "CREATE SEQUENCE %[1]s MINVALUE -1000 MAXVALUE 1000 START 0", 1},
	{"minvalue and start", "CREATE SEQUENCE %[1]s MINVALUE 5000 START 7000 MAXVALUE 90000", 1},
	{"descending", "CREATE SEQUENCE %[1]s INCREMENT -1", -1},
	{"descending across zero, cycle", "CREATE SEQUENCE %[1]s INCREMENT -3 MINVALUE -10 MAXVALUE 10 START 10 CYCLE", -3},
	{"cycle", "CREATE SEQUENCE %[1]s MAXVALUE 100 CYCLE", 1},
	{"cache 20", "CREATE SEQUENCE %[1]s CACHE 20 AS integer", 1},
	{"increment 100, narrow", "CREATE SEQUENCE %[1]s INCREMENT 100 MAXVALUE 99999999", 100},
	{"unlogged", "CREATE UNLOGGED SEQUENCE %[1]s AS integer", 1}, // PostgreSQL 15 and later
}

// Every shape, on every path: the proxy's fast path (one statement of
// three calls), per-row calls, an INSERT ... SELECT and a COPY into a
// table whose default calls snowflake.nextval on it, and a direct
// connection. The extension returns snowflakes on all of them (its C code
// writes past MAXVALUE; regression: through the proxy the per-row call
// failed with "setval: value ... is out of bounds for sequence", and
// every call after the next lease). Checked against the extension's
// documented rule, decoded here: the node bits; inside one statement the
// count grows by INCREMENT, or the ms by one at count 0 when the count
// would pass 4095 (a negative INCREMENT wraps the count: always); every
// ID above the one before, whichever path issued it; dated at the clock.
// Then ALTER EXTENSION snowflake UPDATE TO '2.5.0' repairs the sequence
// (pgEdge's repair widens what holds snowflakes), after which the setval
// pg_dump emits for a snowflake succeeds.
func TestSequenceShapes(t *testing.T) {
	const node = 6
	e := newEnv(t, node)
	// 2.4, so that the update to 2.5.0 at the end runs the repair.
	admin := e.connect(t, pgx.QueryExecModeSimpleProtocol)
	mustRun(t, admin, "CREATE EXTENSION snowflake VERSION '2.4'")
	mustRun(t, admin, `CREATE SCHEMA "Odd ""Schema"""`)
	direct := e.connectDirect(t)
	mustRun(t, direct, fmt.Sprintf("SET snowflake.node = %d", node))
	start := time.Now()

	type shapeRun struct {
		seq      string
		ids      []int64
		lastShim int64 // the last ID the shim issued (direct)
	}
	// The order of the paths matters: the first lease widens a narrow
	// sequence, and until then the shim keeps its IDs in the narrow store.
	orders := []struct {
		name  string
		steps []string
	}{
		{"proxy first", []string{"fast", "per row", "fast", "INSERT ... SELECT", "COPY", "direct", "fast"}},
		{"shim first", []string{"direct", "per row", "INSERT ... SELECT", "COPY", "fast", "direct", "fast"}},
		{"shim only", []string{"per row", "direct", "INSERT ... SELECT", "direct"}},
	}
	var runs []shapeRun
	var names []string
	for o, order := range orders {
		for i, sh := range sequenceShapes {
			k := o*len(sequenceShapes) + i
			seq := fmt.Sprintf(`"Odd ""Schema"""."Seq %d ""%s"""`, k, sh.name)
			if k%2 == 0 {
				seq = fmt.Sprintf("public.shape_%d", k)
			}
			table := fmt.Sprintf("shape_t%d", k)
			runs = append(runs, shapeRun{})
			names = append(names, order.name+"/"+sh.name)
			t.Run(order.name+"/"+sh.name, func(t *testing.T) {
				if strings.Contains(sh.ddl, "UNLOGGED SEQUENCE") && serverVersionNum(t, admin) < 150000 {
					t.Log("PostgreSQL 15 or later has unlogged sequences; this server has none")
					return
				}
				for _, stmt := range strings.Split(fmt.Sprintf(sh.ddl, seq), ";") {
					mustRun(t, admin, stmt)
				}
				lit := quoteLiteral(seq)
				mustRun(t, admin, fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY DEFAULT snowflake.nextval(%s::regclass), v int)", table, lit))
				conn := e.connect(t, pgx.QueryExecModeCacheStatement)
				// The IDs of each session (the proxy's, the direct one):
				// within a session every ID is larger than the one before.
				// Across sessions the extension's single counter orders them
				// too; the proxy's shim counts 3072 and up while a lease is
				// live, dated by the server's clock (docs/state-model.md).
				var ids, sessionIDs, directIDs []int64
				take := func(what string, got []int64, oneInstant bool) {
					t.Helper()
					if len(got) == 0 {
						t.Fatalf("%s: no IDs", what)
					}
					checkShapeIDs(t, what, got, node, sh.inc, oneInstant)
					session := &sessionIDs
					if what == "direct" {
						session = &directIDs
					}
					if prev := *session; len(prev) > 0 && got[0] <= prev[len(prev)-1] {
						t.Fatalf("%s: %s after %s; the session's IDs so far %v, now %v", what, decodeID(got[0]),
							decodeID(prev[len(prev)-1]), describeIDs(prev), describeIDs(got))
					}
					*session = append(*session, got...)
					ids = append(ids, got...)
				}
				fast := fmt.Sprintf("SELECT snowflake.nextval(%[1]s) UNION ALL SELECT snowflake.nextval(%[1]s) UNION ALL SELECT snowflake.nextval(%[1]s)", lit)
				var lastShim int64
				for _, step := range order.steps {
					switch step {
					case "fast":
						take(step, mustInt64s(t, conn, fast), true)
					case "per row":
						take(step, mustInt64s(t, conn, fmt.Sprintf("SELECT snowflake.nextval(%s) FROM generate_series(1, 3)", lit)), false)
					case "INSERT ... SELECT":
						take(step, mustInt64s(t, conn, fmt.Sprintf("INSERT INTO %s (v) SELECT g FROM generate_series(1, 3) g RETURNING id", table)), false)
					case "COPY":
						n, err := conn.CopyFrom(copyCtx(t), pgx.Identifier{table}, []string{"v"}, pgx.CopyFromRows([][]any{{10}, {11}, {12}}))
						if err != nil || n != 3 {
							t.Fatalf("COPY: %d rows, %v", n, err)
						}
						take(step, mustInt64s(t, conn, fmt.Sprintf("SELECT id FROM %s WHERE v >= 10 ORDER BY v", table)), false)
					case "direct":
						take(step, mustInt64s(t, direct, fmt.Sprintf("SELECT snowflake.nextval(%s) FROM generate_series(1, 2)", lit)), false)
						lastShim = ids[len(ids)-1]
					}
				}
				for _, id := range ids {
					checkPlausibleTime(t, id, start)
				}
				runs[k] = shapeRun{seq: seq, ids: ids, lastShim: lastShim}
			})
		}
	}

	// The 2.5.0 repair: every sequence any path issued from holds
	// snowflakes afterwards, and accepts pg_dump's setval of one.
	mustRun(t, admin, "ALTER EXTENSION snowflake UPDATE TO '2.5.0'")
	for i, r := range runs {
		if r.seq == "" {
			continue // its subtest failed
		}
		lit := quoteLiteral(r.seq)
		last := r.ids[len(r.ids)-1]
		// last_value holds what the shim issued (the fast path's IDs reach
		// it with the next lease: it trails them by up to one).
		var lastValue, maxValue int64
		if err := direct.QueryRow(copyCtx(t), fmt.Sprintf("SELECT s.last_value, p.seqmax FROM %s s, pg_sequence p WHERE p.seqrelid = %s::regclass", r.seq, lit)).Scan(&lastValue, &maxValue); err != nil {
			t.Fatal(err)
		}
		// Positions: the narrow store keeps no node bits.
		pos := func(id int64) int64 { d := decodeID(id); return d.Ms<<12 | int64(d.Count) }
		if pos(lastValue) < pos(r.lastShim) || maxValue != 9223372036854775807 {
			t.Errorf("%s: last_value %s and MAXVALUE %d after the repair, want at least %s and 2^63-1",
				names[i], decodeID(lastValue), maxValue, decodeID(r.lastShim))
		}
		future := composeID(decodeID(last).Ms+3_600_000, node, 7)
		if got := mustInt64(t, direct, fmt.Sprintf("SELECT pg_catalog.setval(%s, %d, true)", lit, future)); got != future {
			t.Errorf("%s: setval gave %d", names[i], got)
		}
	}
}

// checkShapeIDs checks the IDs of one statement: node bits, increasing,
// and, for the calls of one statement evaluated at one instant, the rule's
// step from one to the next.
func checkShapeIDs(t *testing.T, what string, ids []int64, node int, inc int64, oneInstant bool) {
	t.Helper()
	for i, id := range ids {
		d := decodeID(id)
		if d.Node != node || id <= 0 {
			t.Fatalf("%s: ID %d is %s, want node %d", what, i, d, node)
		}
		if inc < 0 && d.Count != 0 && d.Count != 3072 {
			// A negative INCREMENT wraps the count at every call: count 0
			// (3072 for a shim ID while a lease of the node is live).
			t.Fatalf("%s: ID %d is %s with INCREMENT %d", what, i, d, inc)
		}
		if i == 0 {
			continue
		}
		prev := decodeID(ids[i-1])
		if id <= ids[i-1] {
			t.Fatalf("%s: %s after %s", what, d, prev)
		}
		if !oneInstant {
			continue
		}
		want := composeID(prev.Ms+1, node, 0)
		if inc > 0 && int64(prev.Count)+inc <= 3071 {
			want = composeID(prev.Ms, node, prev.Count+int(inc))
		}
		if id != want {
			t.Fatalf("%s: %s after %s, want %s (INCREMENT %d)", what, d, prev, decodeID(want), inc)
		}
	}
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func describeIDs(ids []int64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		d := decodeID(id)
		out[i] = fmt.Sprintf("%d:%d/%d", d.Ms%100000, d.Count, d.Node)
	}
	return out
}

// serverVersionNum is the server's server_version_num.
func serverVersionNum(t testing.TB, conn *pgx.Conn) int64 {
	t.Helper()
	return mustInt64(t, conn, "SELECT current_setting('server_version_num')::bigint")
}

// Changes to a sequence while the proxy holds a lease on it, each followed
// by calls on both paths: renamed, moved to another schema, OWNED BY
// changed and removed, RESTART, setval into the future and into the past,
// dropped and made again under the same name; and a temporary sequence and
// an identity column's sequence. Every call succeeds, with the node's
// bits, and each session's IDs keep increasing across every change but
// the drop (a new sequence starts its own IDs).
func TestSequenceChangesWhileLeased(t *testing.T) {
	const node = 7
	e := newEnv(t, node)
	e.installExtension(t)
	admin := e.connect(t, pgx.QueryExecModeSimpleProtocol)
	conn := e.connect(t, pgx.QueryExecModeCacheStatement)
	direct := e.connectDirect(t)
	mustRun(t, direct, fmt.Sprintf("SET snowflake.node = %d", node))
	mustRun(t, admin, "CREATE SCHEMA other")
	mustRun(t, admin, "CREATE TABLE other.owner_t (id bigint, v int)")
	mustRun(t, admin, "CREATE SEQUENCE s AS integer")

	var sessionIDs, directIDs []int64
	calls := func(t *testing.T, step, name string) {
		t.Helper()
		lit := quoteLiteral(name)
		fast := mustInt64s(t, conn, fmt.Sprintf("SELECT snowflake.nextval(%[1]s) UNION ALL SELECT snowflake.nextval(%[1]s)", lit))
		perRow := mustInt64s(t, conn, fmt.Sprintf("SELECT snowflake.nextval(%s) FROM generate_series(1, 2)", lit))
		dir := mustInt64s(t, direct, fmt.Sprintf("SELECT snowflake.nextval(%s)", lit))
		for _, got := range [][]int64{fast, perRow} {
			checkShapeIDs(t, step, got, node, 1, false)
			if len(sessionIDs) > 0 && got[0] <= sessionIDs[len(sessionIDs)-1] {
				t.Fatalf("%s: %s after %s", step, decodeID(got[0]), decodeID(sessionIDs[len(sessionIDs)-1]))
			}
			sessionIDs = append(sessionIDs, got...)
		}
		checkShapeIDs(t, step, dir, node, 1, false)
		if len(directIDs) > 0 && dir[0] <= directIDs[len(directIDs)-1] {
			t.Fatalf("%s, direct: %s after %s", step, decodeID(dir[0]), decodeID(directIDs[len(directIDs)-1]))
		}
		directIDs = append(directIDs, dir...)
	}
	calls(t, "leased", "s")
	mustRun(t, admin, "ALTER SEQUENCE s RENAME TO s2")
	calls(t, "renamed", "s2")
	mustRun(t, admin, "ALTER SEQUENCE s2 SET SCHEMA other")
	calls(t, "moved", "other.s2")
	mustRun(t, admin, "ALTER SEQUENCE other.s2 OWNED BY other.owner_t.id")
	calls(t, "owned", "other.s2")
	mustRun(t, admin, "ALTER SEQUENCE other.s2 OWNED BY NONE")
	calls(t, "owned by none", "other.s2")
	mustRun(t, admin, "ALTER SEQUENCE other.s2 RESTART")
	calls(t, "restarted", "other.s2")
	future := composeID(decodeID(sessionIDs[len(sessionIDs)-1]).Ms+60_000, node, 100)
	mustRun(t, admin, fmt.Sprintf("SELECT setval('other.s2', %d)", future))
	calls(t, "setval to the future", "other.s2")
	if last := sessionIDs[len(sessionIDs)-1]; last <= future {
		t.Fatalf("after setval to %s: %s", decodeID(future), decodeID(last))
	}
	mustRun(t, admin, "SELECT setval('other.s2', 5)")
	calls(t, "setval to the past", "other.s2")

	mustRun(t, admin, "DROP SEQUENCE other.s2")
	mustRun(t, admin, "CREATE SEQUENCE other.s2 AS smallint")
	sessionIDs, directIDs = nil, nil
	calls(t, "dropped and made again", "other.s2")

	mustRun(t, admin, "CREATE TABLE ident (id bigint GENERATED BY DEFAULT AS IDENTITY, v int)")
	calls(t, "identity", "ident_id_seq")

	// A temporary sequence is the session's own: its calls go to the
	// shim in that session.
	mustRun(t, conn, "CREATE TEMP SEQUENCE tmp_s AS integer")
	for i := 0; i < 2; i++ {
		ids := mustInt64s(t, conn, "SELECT snowflake.nextval('tmp_s') UNION ALL SELECT snowflake.nextval('tmp_s')")
		checkShapeIDs(t, "temporary", ids, node, 1, false)
		if last := sessionIDs[len(sessionIDs)-1]; i == 0 && ids[0] <= 0 || i > 0 && ids[0] <= last {
			t.Fatalf("temporary: %s after %s", decodeID(ids[0]), decodeID(last))
		}
		sessionIDs = append(sessionIDs, ids...)
	}
}
