package compat

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testConn is a direct connection that records the notices it receives.
type testConn struct {
	*pgx.Conn
	mu      sync.Mutex
	notices []*pgconn.Notice
}

func (c *testConn) takeNotices() []*pgconn.Notice {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.notices
	c.notices = nil
	return n
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newDB creates a database and returns its URL.
func newDB(t *testing.T) string {
	t.Helper()
	srv := pgtest.Shared(t)
	return srv.URL(pgtest.NewDatabase(t, srv))
}

func connect(t *testing.T, url string) *testConn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return connectConfig(t, cfg)
}

func connectConfig(t *testing.T, cfg *pgx.ConnConfig) *testConn {
	t.Helper()
	tc := &testConn{}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		tc.mu.Lock()
		tc.notices = append(tc.notices, n)
		tc.mu.Unlock()
	}
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc.Conn = c
	t.Cleanup(func() { c.Close(context.Background()) })
	return tc
}

func extSQL(t *testing.T, op plan.SlotOp, opts *plan.ExtensionOptions) string {
	t.Helper()
	s, err := ExtensionSQL(op, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustExec(t *testing.T, c *testConn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(ctxT(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func install(t *testing.T, c *testConn) {
	t.Helper()
	mustExec(t, c, extSQL(t, plan.CreateExtension, nil))
	c.takeNotices()
}

// pgErr runs sql and returns the server error it must fail with.
func pgErr(t *testing.T, c *testConn, sql string, args ...any) *pgconn.PgError {
	t.Helper()
	_, err := c.Exec(ctxT(t), sql, args...)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("%s: want a server error, got %v", sql, err)
	}
	return pe
}

func wantErr(t *testing.T, pe *pgconn.PgError, code, msg string) {
	t.Helper()
	if pe.Code != code || pe.Message != msg {
		t.Fatalf("got %s %q, want %s %q", pe.Code, pe.Message, code, msg)
	}
}

func wantNotices(t *testing.T, c *testConn, msgs ...string) []*pgconn.Notice {
	t.Helper()
	got := c.takeNotices()
	var texts []string
	for _, n := range got {
		texts = append(texts, n.Message)
	}
	if len(texts) != len(msgs) {
		t.Fatalf("notices %q, want %q", texts, msgs)
	}
	for i := range msgs {
		if texts[i] != msgs[i] {
			t.Fatalf("notices %q, want %q", texts, msgs)
		}
	}
	return got
}

func queryInt(t *testing.T, c *testConn, sql string, args ...any) int64 {
	t.Helper()
	var v int64
	if err := c.QueryRow(ctxT(t), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

func compose(ms int64, node, count int) int64 { return ms<<22 | int64(node)<<12 | int64(count) }

// nextvalVia issues one fast-path ID through svc, as a session does for a
// statement with one call, with INCREMENT 1.
func nextvalVia(ctx context.Context, svc *Service, database string, seq uint32, node int) (int64, error) {
	return nextvalAfter(ctx, svc, database, seq, node, 0)
}

// nextvalAfter is nextvalVia for a caller that holds ticket (a session's
// fence, Service.FenceTicket; 0: none): the ID comes from a lease taken
// after it.
func nextvalAfter(ctx context.Context, svc *Service, database string, seq uint32, node int, ticket uint64) (int64, error) {
	reqs := []generator.Request{{Seq: seq, Inc: 1, After: ticket}}
	if err := svc.NextvalBatch(ctx, database, node, reqs); err != nil {
		return 0, err
	}
	return reqs[0].ID, nil
}

// shimDB is a fresh database with the shim installed and a sequence s: its
// URL, a connection to it, its name and s's OID.
func shimDB(t *testing.T) (url string, c *testConn, db string, oid uint32) {
	t.Helper()
	url = newDB(t)
	c = connect(t, url)
	install(t, c)
	mustExec(t, c, "CREATE SEQUENCE s")
	return url, c, dbName(t, c), seqOID(t, c, "s")
}

// idSet collects IDs issued concurrently and fails the test on one issued
// twice, naming both issuers.
type idSet struct {
	t    *testing.T
	mu   sync.Mutex
	seen map[int64]string
}

func newIDSet(t *testing.T) *idSet { return &idSet{t: t, seen: map[int64]string{}} }

func (s *idSet) add(id int64, who string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, dup := s.seen[id]; dup {
		s.t.Errorf("duplicate %v from %s and %s", generator.Decode(id), prev, who)
	}
	s.seen[id] = who
}

// explainVerbose is the plan of sql as EXPLAIN (VERBOSE, COSTS OFF)
// prints it, one string.
func explainVerbose(t *testing.T, c *testConn, sql string) string {
	t.Helper()
	rows, err := c.Query(ctxT(t), "EXPLAIN (VERBOSE, COSTS OFF) "+sql)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
