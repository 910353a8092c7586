package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// COPY through the proxy, end to end against the real server. COPY FROM
// STDIN with a column list that omits a snowflake default column gets the
// column named and the proxy's IDs appended to its rows (wire/copyin.go;
// copy_fast_test.go checks every format and option). Other COPY FROM
// statements keep the server's default (the shim issues one ID per row) and
// count as statements "that may have issued in the shim": afterwards the
// session's next fast-path ID is above the shim's (docs/architecture.md
// "How IDs are made", plan.TouchShim). CopyData messages of pgx
// (64 KiB) and large COPY TO batches are bigger than the event loop's 8 KiB
// buffer, so the session is handed over to its goroutines and back
// (bench/README.md, wire/loop.go).

const copyNode = 7

// copyRows is the size of the large COPY FROM tests, and copyPad ends each
// of their payloads: about 120 bytes a row, so pgx sends several CopyData
// messages of 64 KiB. Long rows rather than many: each row costs the
// server a shim call.
const copyRows = 4_000

var copyPad = strings.Repeat("-", 100)

// copyTimeout bounds every COPY, so that a proxy that hangs fails the test
// instead of stalling it until go test's own timeout.
const copyTimeout = 2 * time.Minute

// newCopyEnv starts a proxy with node copyNode, installs the extension
// through it, and creates t (the table the brief names) and probe (for
// waitFastDefaults, so that t holds only the rows a test puts there). Both
// defaults use snowflake.id_seq, the default sequence.
func newCopyEnv(t *testing.T, extra string) *testEnv {
	t.Helper()
	e := newEnv(t, copyNode)
	e.installExtension(t)
	e.execDirect(t, `
		CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), payload text);
		CREATE TABLE probe (id bigint PRIMARY KEY DEFAULT snowflake.nextval())`)
	if extra != "" {
		e.execDirect(t, extra)
	}
	return e
}

func copyCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), copyTimeout)
	t.Cleanup(cancel)
	return ctx
}

// copySession connects in mode, waits until the proxy fills defaults
// itself, and returns the connection, a COPY-sized context and a fresh
// fast-path ID to compare later IDs with.
func (e *testEnv) copySession(t *testing.T, mode pgx.QueryExecMode) (*pgx.Conn, context.Context, int64) {
	t.Helper()
	conn := e.connect(t, mode)
	waitFastDefaults(t, conn, "probe")
	return conn, copyCtx(t), mustInt64(t, conn, "SELECT snowflake.nextval()")
}

// textRows is n lines prefix000000, prefix000001, ... (each ended by
// copyPad) in COPY text format.
func textRows(prefix string, n int) string {
	var sb strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&sb, "%s%06d%s\n", prefix, i, copyPad)
	}
	return sb.String()
}

// copyIDsByPayload returns the ids of t's rows whose payload starts with
// prefix, in payload order (the order the rows were sent in).
func copyIDsByPayload(t *testing.T, conn *pgx.Conn, prefix string) []int64 {
	t.Helper()
	return mustInt64s(t, conn, "SELECT id FROM t WHERE payload LIKE $1 ORDER BY payload", prefix+"%")
}

// checkFenceAfterCopy checks what must hold on conn right after a COPY that
// issued copyIDs in the shim (in row order): currval is the last of them
// (per sequence, the value of the latest nextval in the session, whichever
// path issued it), and the next IDs from the fast path,
// a SELECT snowflake.nextval of the default's sequence and an INSERT ...
// VALUES filled by the proxy, are above every one of them. It also checks
// that those two really came from the fast path (the server ran no
// snowflake.nextval), or the comparison would prove nothing about the fence.
func checkFenceAfterCopy(t *testing.T, conn *pgx.Conn, what string, copyIDs []int64) {
	t.Helper()
	last := copyIDs[len(copyIDs)-1]
	if cur := mustInt64(t, conn, "SELECT snowflake.currval()"); cur != last {
		t.Errorf("%s: currval() after the COPY = %d %v, want the COPY's last id %d %v", what, cur, decodeID(cur), last, decodeID(last))
	}
	var next, ins int64
	n := shimCalls(t, conn, func() {
		next = mustInt64(t, conn, "SELECT snowflake.nextval('snowflake.id_seq')")
		ins = mustInt64(t, conn, "INSERT INTO t (payload) VALUES ('after-"+what+"') RETURNING id")
	})
	if n != 0 {
		t.Errorf("%s: the nextval and INSERT after the COPY ran the shim's nextval %d times, want 0 (fast path)", what, n)
	}
	maxCopy := slices.Max(copyIDs)
	if next <= maxCopy {
		t.Errorf("%s: fast-path nextval after the COPY = %d %v, not above the COPY's largest id %d %v (fence)", what, next, decodeID(next), maxCopy, decodeID(maxCopy))
	}
	// checkIDs: node, and last < next < ins.
	checkIDs(t, what+": last COPY id, fast-path nextval, fast-path INSERT", []int64{last, next, ins}, copyNode)
	if cur := mustInt64(t, conn, "SELECT snowflake.currval()"); cur != ins {
		t.Errorf("%s: currval() after the fast-path INSERT = %d, want %d", what, cur, ins)
	}
}

// TestCopyFromStdin: binary COPY (pgx CopyFrom, in every query exec mode:
// the column types are described first, as the mode says) and text COPY
// (PgConn.CopyFrom) of 20,000 rows into a table with a snowflake default,
// through the proxy. Every row gets a distinct id of the proxy's node, in
// row order; currval is the last one; the fast path continues above.
func TestCopyFromStdin(t *testing.T) {
	e := newCopyEnv(t, "")
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		waitFastDefaults(t, conn, "probe") // leaves a fast-path currval behind
		ctx := copyCtx(t)
		prefix := "b-" + modeName(mode) + "-"
		n, err := conn.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"payload"},
			pgx.CopyFromSlice(copyRows, func(i int) ([]any, error) { return []any{fmt.Sprintf("%s%06d%s", prefix, i, copyPad)}, nil }))
		if err != nil {
			t.Fatalf("CopyFrom %d rows: %v", copyRows, err)
		}
		if n != copyRows {
			t.Errorf("CopyFrom reported %d rows, want %d", n, copyRows)
		}
		ids := copyIDsByPayload(t, conn, prefix)
		if len(ids) != copyRows {
			t.Fatalf("%d rows stored, want %d", len(ids), copyRows)
		}
		checkIDs(t, "binary COPY ids in row order", ids, copyNode)
		checkFenceAfterCopy(t, conn, "binary-"+modeName(mode), ids)
	})
	t.Run("text", func(t *testing.T) {
		conn := e.connect(t, pgx.QueryExecModeCacheStatement)
		waitFastDefaults(t, conn, "probe")
		ctx := copyCtx(t)
		data := textRows("t-", copyRows)
		// Inside a transaction, to count the server's snowflake.nextval
		// calls: the proxy names the id column and appends the IDs to the
		// rows, so the shim issues none.
		var tag pgconn.CommandTag
		var err error
		calls := shimCalls(t, conn, func() {
			tag, err = conn.PgConn().CopyFrom(ctx, strings.NewReader(data), "COPY t (payload) FROM STDIN")
		})
		if err != nil {
			t.Fatalf("COPY t (payload) FROM STDIN, %d rows: %v", copyRows, err)
		}
		if calls != 0 {
			t.Errorf("COPY of %d rows ran the shim's nextval %d times, want 0 (the proxy's IDs)", copyRows, calls)
		}
		if tag.String() != fmt.Sprintf("COPY %d", copyRows) {
			t.Errorf("command tag %q, want %q", tag.String(), fmt.Sprintf("COPY %d", copyRows))
		}
		ids := copyIDsByPayload(t, conn, "t-")
		if len(ids) != copyRows {
			t.Fatalf("%d rows stored, want %d", len(ids), copyRows)
		}
		checkIDs(t, "text COPY ids in row order", ids, copyNode)
		checkFenceAfterCopy(t, conn, "text", ids)
	})
	// Across all subtests: every row of t has its own id, and the
	// sequence's last_value covers them once the proxy has stopped (it
	// trails the fast path by up to one lease while it runs; checked on
	// the server itself).
	e.closeProxy(t, cancelledContext())
	direct := e.connectDirect(t)
	var rows, distinct, maxID, last int64
	if err := direct.QueryRow(context.Background(),
		"SELECT count(*), count(DISTINCT id), max(id), (SELECT last_value FROM snowflake.id_seq) FROM t").Scan(&rows, &distinct, &maxID, &last); err != nil {
		t.Fatal(err)
	}
	if want := int64(len(queryExecModes)+1) * (copyRows + 1); rows != want || distinct != rows {
		t.Errorf("t: %d rows, %d distinct ids; want %d rows, all distinct", rows, distinct, want)
	}
	if last < maxID {
		t.Errorf("snowflake.id_seq.last_value %d is below the largest id in t %d", last, maxID)
	}
}

// gatedCopySource produces rows "c%06d"; before row gateAt it reports that
// the COPY is under way (started) and waits for release, so that other
// sessions provably issue IDs while this COPY is in progress on the server.
type gatedCopySource struct {
	i, n, gateAt int
	started      chan struct{}
	release      <-chan struct{}
	timeout      time.Duration
	timedOut     bool
}

func (s *gatedCopySource) Next() bool {
	if s.i == s.gateAt {
		close(s.started)
		select {
		case <-s.release:
		case <-time.After(s.timeout):
			s.timedOut = true // the test fails on it; the COPY still completes
		}
	}
	s.i++
	return s.i <= s.n
}

func (s *gatedCopySource) Values() ([]any, error) {
	return []any{fmt.Sprintf("c%06d", s.i-1)}, nil
}

func (s *gatedCopySource) Err() error { return nil }

// TestCopyInterleavedWithFastPath: a 30,000-row COPY on one proxy
// connection while four others (various exec modes) call
// snowflake.nextval() and INSERT ... VALUES with the default, on the fast
// path, in the middle of it. Afterwards: every id in t is distinct (the
// primary key), no nextval result equals an id in t or another nextval
// result, each client's ids increase, and every id has the proxy's node.
func TestCopyInterleavedWithFastPath(t *testing.T) {
	const (
		workers   = 4
		rows      = 30_000
		minOps    = 200 // per worker while the COPY waits at its gate
		gateAfter = rows / 3
	)
	e := newCopyEnv(t, "")
	copyConn := e.connect(t, pgx.QueryExecModeCacheStatement)
	waitFastDefaults(t, copyConn, "probe")
	conns := make([]*pgx.Conn, workers)
	for i := range conns {
		conns[i] = e.connect(t, queryExecModes[i%len(queryExecModes)])
		waitFastDefaults(t, conns[i], "probe")
	}

	release := make(chan struct{})
	src := &gatedCopySource{n: rows, gateAt: gateAfter, started: make(chan struct{}), release: release, timeout: time.Minute}
	var (
		copyDone atomic.Bool
		reached  atomic.Int32
		wg       sync.WaitGroup
	)
	type workerResult struct {
		nextvals []int64 // SELECT snowflake.nextval() results
		ordered  []int64 // every id the worker received, in order
		inserted int
		err      error
	}
	results := make([]workerResult, workers)
	ctx := copyCtx(t)
	for w := range conns {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			res := &results[w]
			conn := conns[w]
			select {
			case <-src.started:
			case <-ctx.Done():
				res.err = errors.New("the COPY never reached its gate")
				return
			}
			for k := 0; ; k++ {
				if k == minOps {
					if reached.Add(1) == workers {
						close(release)
					}
				}
				if k >= minOps && copyDone.Load() {
					return
				}
				if k%2 == 0 {
					id, err := queryInt64s(ctx, conn, "SELECT snowflake.nextval()")
					if err != nil || len(id) != 1 {
						res.err = fmt.Errorf("op %d: SELECT snowflake.nextval(): %v (%d rows)", k, err, len(id))
						return
					}
					res.nextvals = append(res.nextvals, id[0])
					res.ordered = append(res.ordered, id[0])
				} else {
					id, err := queryInt64s(ctx, conn, "INSERT INTO t (payload) VALUES ($1) RETURNING id", fmt.Sprintf("w%d-%06d", w, k))
					if err != nil || len(id) != 1 {
						res.err = fmt.Errorf("op %d: INSERT ... VALUES: %v (%d rows)", k, err, len(id))
						return
					}
					res.inserted++
					res.ordered = append(res.ordered, id[0])
				}
			}
		}(w)
	}
	n, copyErr := copyConn.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"payload"}, src)
	copyDone.Store(true)
	if src.timedOut {
		// The workers could not issue IDs while the COPY was in progress.
		// Release them (if they are stuck, ctx ends them).
		select {
		case <-release:
		default:
			if reached.Load() < workers {
				t.Errorf("the workers did not complete %d operations each within a minute while the COPY was in progress", minOps)
			}
		}
	}
	wg.Wait()
	if copyErr != nil {
		t.Fatalf("CopyFrom: %v", copyErr)
	}
	if n != rows {
		t.Errorf("CopyFrom reported %d rows, want %d", n, rows)
	}
	inserted := 0
	var nextvals []int64
	for w, r := range results {
		if r.err != nil {
			t.Errorf("worker %d: %v", w, r.err)
		}
		checkIDs(t, fmt.Sprintf("worker %d's ids in the order received", w), r.ordered, copyNode)
		inserted += r.inserted
		nextvals = append(nextvals, r.nextvals...)
	}
	if t.Failed() {
		return
	}

	copyIDs := copyIDsByPayload(t, copyConn, "c")
	if len(copyIDs) != rows {
		t.Fatalf("%d COPY rows stored, want %d", len(copyIDs), rows)
	}
	checkIDs(t, "COPY ids in row order", copyIDs, copyNode)

	direct := e.connectDirect(t)
	tableIDs := mustInt64s(t, direct, "SELECT id FROM t")
	if want := rows + inserted; len(tableIDs) != want {
		t.Errorf("t has %d rows, want %d (COPY) + %d (inserted)", len(tableIDs), rows, inserted)
	}
	owner := make(map[int64]string, len(tableIDs)+len(nextvals))
	for _, id := range tableIDs {
		if prev, dup := owner[id]; dup {
			t.Errorf("id %d %v appears twice in t (%s)", id, decodeID(id), prev)
		}
		owner[id] = "a row of t"
	}
	dups := 0
	for _, id := range nextvals {
		if prev, dup := owner[id]; dup {
			if dups < 10 {
				t.Errorf("SELECT snowflake.nextval() returned %d %v, already issued as %s", id, decodeID(id), prev)
			}
			dups++
			continue
		}
		owner[id] = "a nextval result"
	}
	if dups > 0 {
		t.Errorf("%d duplicate ids among %d rows of t and %d nextval results", dups, len(tableIDs), len(nextvals))
	}
	t.Logf("COPY of %d rows interleaved with %d nextval and %d INSERT from %d connections", rows, len(nextvals), inserted, workers)
}

// TestCopyFromBadRowKeepsTheSessionUsable: a text COPY whose row 2,001
// does not parse as an integer (the data before and after it spans several
// CopyData messages: long rows, so that few of them do, as each row costs
// a shim call) gives the server's error, 22P02 with the right line in
// its context, and the same connection then runs SELECT 1, a fast-path
// snowflake.nextval() and another COPY. Inside a transaction the failed
// COPY leaves it failed: nextval is refused with 25P02, as the server
// would, until ROLLBACK.
func TestCopyFromBadRowKeepsTheSessionUsable(t *testing.T) {
	e := newCopyEnv(t, "CREATE TABLE nums (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), n int, pad text)")
	const good = 2_000
	pad := strings.Repeat("p", 60)
	var sb strings.Builder
	for i := 0; i < good; i++ {
		fmt.Fprintf(&sb, "%d\t%s\n", i, pad)
	}
	sb.WriteString("notanumber\t\n")
	for i := 0; i < good; i++ {
		fmt.Fprintf(&sb, "%d\t%s\n", i, pad)
	}
	data := sb.String()
	if before := strings.Index(data, "notanumber"); before < 8*8192 || len(data)-before < 8*8192 {
		t.Fatalf("test data of %d bytes, bad row at %d: too small to span several messages before and after it", len(data), before)
	}

	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn, ctx, before := e.copySession(t, mode)

		_, err := conn.PgConn().CopyFrom(ctx, strings.NewReader(data), "COPY nums (n, pad) FROM STDIN")
		wantError(t, "COPY with a bad row", err, "22P02", `invalid input syntax for type integer: "notanumber"`)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && !strings.Contains(pgErr.Where, fmt.Sprintf("line %d", good+1)) {
			t.Errorf("error context %q, want it to name line %d", pgErr.Where, good+1)
		}
		checkSessionUsable(t, conn, "after the bad COPY", before)
		if n := mustInt64(t, conn, "SELECT count(*) FROM nums"); n != 0 {
			t.Errorf("nums has %d rows after the failed COPY, want 0", n)
		}

		// The COPY machinery itself still works on this connection.
		tag, err := conn.PgConn().CopyFrom(ctx, strings.NewReader("1\n2\n3\n"), "COPY nums (n) FROM STDIN")
		if err != nil || tag.RowsAffected() != 3 {
			t.Fatalf("a good COPY after the bad one: %v (tag %q)", err, tag.String())
		}
		mustRun(t, conn, "DELETE FROM nums")

		// Inside a transaction.
		mustRun(t, conn, "BEGIN")
		_, err = conn.PgConn().CopyFrom(ctx, strings.NewReader(data), "COPY nums (n, pad) FROM STDIN")
		wantError(t, "COPY with a bad row inside BEGIN", err, "22P02", "")
		if st := conn.PgConn().TxStatus(); st != 'E' {
			t.Errorf("transaction status after the failed COPY = %c, want E", st)
		}
		_, err = queryInt64s(ctx, conn, "SELECT snowflake.nextval()")
		wantError(t, "nextval() in the failed transaction", err, "25P02", "")
		mustRun(t, conn, "ROLLBACK")
		checkSessionUsable(t, conn, "after the bad COPY and ROLLBACK", before)
	})
}

// checkSessionUsable runs SELECT 1 and a fast-path SELECT snowflake.nextval()
// on conn: the id has the proxy's node and is above before (an id this
// session received earlier), and the server ran no snowflake.nextval for it.
func checkSessionUsable(t *testing.T, conn *pgx.Conn, what string, before int64) {
	t.Helper()
	if one := mustInt64(t, conn, "SELECT 1"); one != 1 {
		t.Errorf("%s: SELECT 1 = %d", what, one)
	}
	var id int64
	if n := shimCalls(t, conn, func() { id = mustInt64(t, conn, "SELECT snowflake.nextval()") }); n != 0 {
		t.Errorf("%s: SELECT snowflake.nextval() ran the shim's nextval %d times, want 0 (fast path)", what, n)
	}
	checkIDs(t, what+": nextval before, nextval after", []int64{before, id}, copyNode)
	if st := conn.PgConn().TxStatus(); st != 'I' {
		t.Errorf("%s: transaction status %c, want I", what, st)
	}
}

// abortingSource yields n rows, then reports an error from Err, which makes
// pgx end the COPY with CopyFail.
type abortingSource struct {
	i, n int
	err  error
}

func (s *abortingSource) Next() bool {
	s.i++
	return s.i <= s.n
}

func (s *abortingSource) Values() ([]any, error) {
	return []any{fmt.Sprintf("x%06d%s", s.i, copyPad)}, nil
}

func (s *abortingSource) Err() error {
	if s.i > s.n {
		return s.err
	}
	return nil
}

// TestCopyFromClientAbortKeepsTheSessionUsable: pgx CopyFrom whose source
// fails after 20,000 rows (several CopyData messages) sends CopyFail; the
// server's 57014 error naming the client's message comes back, no row is
// stored, and the connection runs SELECT 1 and the fast path afterwards.
// A COPY into a table that does not exist (the server refuses it before
// CopyInResponse) likewise.
func TestCopyFromClientAbortKeepsTheSessionUsable(t *testing.T) {
	e := newCopyEnv(t, "")
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn, ctx, before := e.copySession(t, mode)

		src := &abortingSource{n: copyRows, err: errors.New("the client gave up")}
		_, err := conn.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"payload"}, src)
		wantError(t, "CopyFrom aborted by the client", err, "57014", "the client gave up")
		if src.i <= src.n {
			t.Errorf("the source produced only %d of its %d rows", src.i, src.n)
		}
		checkSessionUsable(t, conn, "after CopyFail", before)
		if n := mustInt64(t, conn, "SELECT count(*) FROM t WHERE payload LIKE 'x%'"); n != 0 {
			t.Errorf("t has %d rows of the aborted COPY, want 0", n)
		}

		_, err = conn.CopyFrom(ctx, pgx.Identifier{"no_such_table"}, []string{"payload"}, pgx.CopyFromRows([][]any{{"a"}}))
		if err == nil || sqlState(err) != "42P01" {
			t.Errorf("CopyFrom into a missing table: %v (SQLSTATE %q), want 42P01", err, sqlState(err))
		}
		_, err = conn.PgConn().CopyFrom(ctx, strings.NewReader("a\n"), "COPY no_such_table (payload) FROM STDIN")
		wantError(t, "COPY into a missing table", err, "42P01", `relation "no_such_table" does not exist`)
		checkSessionUsable(t, conn, "after COPY into a missing table", before)
	})
}

// TestCopyFromRolledBack: COPY of 20,000 rows inside BEGIN, then ROLLBACK:
// the rows were there inside the transaction and are gone after it. The
// proxy issued their ids, so currval keeps the last one (docs/compatibility.md:
// fast-path values survive a rollback), and the fast path still continues
// above the ids the rolled-back COPY consumed (ids are not given back).
func TestCopyFromRolledBack(t *testing.T) {
	e := newCopyEnv(t, "")
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn, ctx, before := e.copySession(t, mode)

		mustRun(t, conn, "BEGIN")
		n, err := conn.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"payload"},
			pgx.CopyFromSlice(copyRows, func(i int) ([]any, error) { return []any{fmt.Sprintf("r%06d%s", i, copyPad)}, nil }))
		if err != nil || n != copyRows {
			t.Fatalf("CopyFrom inside BEGIN: %d rows, %v", n, err)
		}
		inside := copyIDsByPayload(t, conn, "r")
		if len(inside) != copyRows {
			t.Fatalf("inside the transaction: %d rows, want %d", len(inside), copyRows)
		}
		checkIDs(t, "ids inside the transaction", append([]int64{before}, inside...), copyNode)
		if cur := mustInt64(t, conn, "SELECT snowflake.currval()"); cur != inside[len(inside)-1] {
			t.Errorf("currval() inside the transaction = %d, want the COPY's last id %d", cur, inside[len(inside)-1])
		}
		mustRun(t, conn, "ROLLBACK")

		if n := mustInt64(t, conn, "SELECT count(*) FROM t WHERE payload LIKE 'r%'"); n != 0 {
			t.Errorf("after ROLLBACK t has %d rows of the COPY, want 0", n)
		}
		direct := e.connectDirect(t)
		if n := mustInt64(t, direct, "SELECT count(*) FROM t"); n != 0 {
			t.Errorf("after ROLLBACK the server has %d rows in t, want 0", n)
		}
		// The proxy issued the COPY's IDs: like every fast-path value,
		// and as with the extension, currval keeps the last one after the
		// ROLLBACK (docs/compatibility.md).
		if cur := mustInt64(t, conn, "SELECT snowflake.currval()"); cur != inside[len(inside)-1] {
			t.Errorf("currval() after the ROLLBACK = %d, want the COPY's last id %d", cur, inside[len(inside)-1])
		}
		var next int64
		if n := shimCalls(t, conn, func() { next = mustInt64(t, conn, "SELECT snowflake.nextval()") }); n != 0 {
			t.Errorf("nextval after the ROLLBACK ran the shim's nextval %d times, want 0", n)
		}
		if maxInside := slices.Max(inside); next <= maxInside {
			t.Errorf("fast-path nextval after the rolled-back COPY = %d %v, not above its largest id %d %v", next, decodeID(next), maxInside, decodeID(maxInside))
		}
		checkIDs(t, "nextval after the ROLLBACK", []int64{before, next}, copyNode)
	})
}

// copyOut runs a COPY ... TO STDOUT on conn and returns its output.
func copyOut(t *testing.T, ctx context.Context, conn *pgx.Conn, sql string) ([]byte, pgconn.CommandTag) {
	t.Helper()
	var buf bytes.Buffer
	tag, err := conn.PgConn().CopyTo(ctx, &buf, sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return buf.Bytes(), tag
}

// TestCopyToStdoutLargeTable: COPY TO STDOUT of 50,000 rows (text, CSV with
// a header, binary) through the proxy gives exactly the bytes and the tag
// that the same COPY gives straight from the server, and the connection
// keeps working after each.
func TestCopyToStdoutLargeTable(t *testing.T) {
	const rows = 50_000
	e := newCopyEnv(t, fmt.Sprintf(`
		CREATE TABLE big (id bigint PRIMARY KEY, payload text, note text);
		INSERT INTO big SELECT g, repeat(chr(97 + g %% 26), g %% 40) || g, CASE WHEN g %% 7 = 0 THEN NULL ELSE 'tab	and\newline' END
			FROM generate_series(1, %d) g`, rows))
	ctx := copyCtx(t)
	direct := e.connectDirect(t)
	for _, c := range []struct{ name, sql string }{
		{"text", "COPY (SELECT * FROM big ORDER BY id) TO STDOUT"},
		{"csv", "COPY big TO STDOUT WITH (FORMAT csv, HEADER)"},
		{"binary", "COPY (SELECT * FROM big ORDER BY id) TO STDOUT WITH (FORMAT binary)"},
	} {
		sql := c.sql
		want, wantTag := copyOut(t, ctx, direct, sql)
		if len(want) < 1<<20 {
			t.Fatalf("%s: only %d bytes straight from the server", sql, len(want))
		}
		t.Run(c.name, func(t *testing.T) {
			forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
				conn := e.connect(t, mode)
				got, tag := copyOut(t, ctx, conn, sql)
				if tag.String() != wantTag.String() || tag.RowsAffected() != rows {
					t.Errorf("%s: tag %q, want %q (%d rows)", sql, tag.String(), wantTag.String(), rows)
				}
				if !bytes.Equal(got, want) {
					i := 0
					for i < len(got) && i < len(want) && got[i] == want[i] {
						i++
					}
					t.Errorf("%s: %d bytes through the proxy, %d straight from the server; first difference at byte %d", sql, len(got), len(want), i)
				}
				if one := mustInt64(t, conn, "SELECT 1"); one != 1 {
					t.Errorf("SELECT 1 after the COPY = %d", one)
				}
			})
		})
	}
	// The text output has the rows in order (checked against the table,
	// not only against the direct COPY).
	got, _ := copyOut(t, ctx, e.connect(t, pgx.QueryExecModeCacheStatement), "COPY (SELECT id FROM big ORDER BY id) TO STDOUT")
	lines := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
	if len(lines) != rows {
		t.Fatalf("COPY (SELECT id ...) TO STDOUT: %d lines, want %d", len(lines), rows)
	}
	for i, l := range lines {
		if l != strconv.Itoa(i+1) {
			t.Fatalf("line %d is %q, want %d", i+1, l, i+1)
		}
	}
}

// TestCopyToStdoutPerRowNextval: COPY (SELECT snowflake.nextval() FROM
// generate_series(1, 20000)) TO STDOUT calls nextval once per row, in the
// shim: 20,000 distinct increasing ids of the proxy's node, currval is the
// last, and the fast path continues above them (the query inside a COPY is
// a statement that may issue in the shim). A COPY of a single call, with no
// FROM, gives one fresh id as well.
func TestCopyToStdoutPerRowNextval(t *testing.T) {
	e := newCopyEnv(t, "")
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn, ctx, before := e.copySession(t, mode)
		out, tag := copyOut(t, ctx, conn, fmt.Sprintf("COPY (SELECT snowflake.nextval() FROM generate_series(1, %d)) TO STDOUT", copyRows))
		if tag.RowsAffected() != copyRows {
			t.Errorf("tag %q, want COPY %d", tag.String(), copyRows)
		}
		ids := parseIDLines(t, out)
		if len(ids) != copyRows {
			t.Fatalf("%d ids, want %d", len(ids), copyRows)
		}
		checkIDs(t, "nextval before, then the COPY's ids", append([]int64{before}, ids...), copyNode)
		checkFenceAfterCopy(t, conn, "copy-to-"+modeName(mode), ids)

		last := mustInt64(t, conn, "SELECT snowflake.currval()")
		out, _ = copyOut(t, ctx, conn, "COPY (SELECT snowflake.nextval()) TO STDOUT")
		one := parseIDLines(t, out)
		if len(one) != 1 {
			t.Fatalf("COPY (SELECT snowflake.nextval()) TO STDOUT: %d ids, want 1", len(one))
		}
		checkIDs(t, "currval, then COPY (SELECT snowflake.nextval())", []int64{last, one[0]}, copyNode)
		if cur := mustInt64(t, conn, "SELECT snowflake.currval()"); cur != one[0] {
			t.Errorf("currval() after COPY (SELECT snowflake.nextval()) = %d, want %d", cur, one[0])
		}
	})
}

func parseIDLines(t *testing.T, out []byte) []int64 {
	t.Helper()
	var ids []int64
	for _, l := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		id, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			t.Fatalf("COPY output line %q: %v", l, err)
		}
		ids = append(ids, id)
	}
	return ids
}
