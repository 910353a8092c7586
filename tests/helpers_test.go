package tests

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"

	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// proxyLog sends the proxies' logs to stderr (debug level) instead of
// discarding them: go test ./tests -proxylog -run TestX -v
var proxyLog = flag.Bool("proxylog", false, "print the proxies' logs on stderr")

func TestMain(m *testing.M) { pgtest.Main(m) }

// testEnv is one proxy (node given) in front of the shared test server, with
// a fresh database of its own. Everything is cleaned up at the end of the
// test: connections first, then the proxy, then the database.
type testEnv struct {
	srv  *pgserver.Server
	db   string
	node int
	mu   sync.Mutex
	app  *app.App
}

// newEnv creates a database and starts a proxy with --node node (0: none) in
// front of the shared server. The extension is not installed yet.
func newEnv(t testing.TB, node int) *testEnv {
	t.Helper()
	srv := pgtest.Shared(t)
	return newEnvOn(t, srv, pgtest.NewDatabase(t, srv), node)
}

// newEnvOn starts a proxy with --node node in front of srv, for the
// existing database db.
func newEnvOn(t testing.TB, srv *pgserver.Server, db string, node int) *testEnv {
	t.Helper()
	e := &testEnv{srv: srv, db: db, node: node}
	e.app = startRestartableProxy(t, srv, node)
	t.Cleanup(func() {
		// The test's own connections are closed by now; sessions still
		// open (a test that failed half-way) are cut after a moment.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.closeProxy(t, ctx)
	})
	return e
}

// startProxy starts a proxy listening on listen in front of srv.
func startProxy(t testing.TB, srv *pgserver.Server, node int, listen string) *app.App {
	t.Helper()
	a, err := startProxyErr(srv, node, listen)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// startRestartableProxy starts a proxy on a port that restartProxy can
// bind again: one below the kernel's ephemeral range (pgserver.FreePort),
// which no outgoing connection takes while the proxy is down. Another
// listener may still take the port between choosing and binding it;
// then another port is tried.
func startRestartableProxy(t testing.TB, srv *pgserver.Server, node int) *app.App {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port, err := pgserver.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		a, err := startProxyErr(srv, node, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			return a
		}
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 5 {
			t.Fatal(err)
		}
	}
}

func startProxyErr(srv *pgserver.Server, node int, listen string) (*app.App, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := app.Start(ctx, app.Config{
		Listen:   listen,
		Upstream: srv.URL("postgres"),
		Node:     node,
		Logger:   testLogger(),
	})
	if err != nil {
		return nil, fmt.Errorf("start proxy (node %d, listen %s): %w", node, listen, err)
	}
	return a, nil
}

func testLogger() *slog.Logger {
	if *proxyLog {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// proxyAddr is the current proxy's host:port.
func (e *testEnv) proxyAddr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.app.Addr()
}

// closeProxy closes the current proxy; sessions still open get until ctx is
// done to finish. Closing twice is harmless.
func (e *testEnv) closeProxy(t testing.TB, ctx context.Context) {
	if err := e.closeProxyErr(ctx); err != nil {
		t.Errorf("closing proxy: %v", err)
	}
}

func (e *testEnv) closeProxyErr(ctx context.Context) error {
	e.mu.Lock()
	a := e.app
	e.mu.Unlock()
	if err := a.Close(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// cancelledContext makes closeProxy cut open sessions at once; the proxy
// still stops its services in order (reporting what the fast path
// issued).
func cancelledContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// restartProxy closes the proxy at once (open sessions are cut) and starts a
// new one on the same address. It may run outside the test goroutine.
func (e *testEnv) restartProxy() error {
	addr := e.proxyAddr()
	cut, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.closeProxyErr(cut); err != nil {
		return fmt.Errorf("closing proxy: %w", err)
	}
	a, err := startProxyErr(e.srv, e.node, addr)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.app = a
	e.mu.Unlock()
	return nil
}

// proxyURL is a connection URL through the proxy for user to the test's
// database.
func (e *testEnv) proxyURL(user string) string {
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", user, e.proxyAddr(), e.db)
}

// connect opens a pgx connection through the proxy as postgres whose
// default query exec mode is mode.
func (e *testEnv) connect(t testing.TB, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	return e.connectWith(t, mode, nil)
}

// connectWith is connect with a hook to adjust the configuration (user,
// notice handler) before connecting.
func (e *testEnv) connectWith(t testing.TB, mode pgx.QueryExecMode, adjust func(*pgx.ConnConfig)) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(e.proxyURL("postgres"))
	if err != nil {
		t.Fatalf("parse config: %v", err)
	}
	cfg.DefaultQueryExecMode = mode
	if adjust != nil {
		adjust(cfg)
	}
	return connectConfig(t, cfg)
}

// connectDirect opens a pgx connection straight to the server, bypassing
// the proxy.
func (e *testEnv) connectDirect(t testing.TB) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(e.srv.URL(e.db))
	if err != nil {
		t.Fatalf("parse config: %v", err)
	}
	return connectConfig(t, cfg)
}

func connectConfig(t testing.TB, cfg *pgx.ConnConfig) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect to %s:%d as %s: %v", cfg.Host, cfg.Port, cfg.User, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// installExtension runs CREATE EXTENSION snowflake through the proxy.
func (e *testEnv) installExtension(t testing.TB) {
	t.Helper()
	c := e.connect(t, pgx.QueryExecModeSimpleProtocol)
	if _, err := c.Exec(context.Background(), "CREATE EXTENSION snowflake"); err != nil {
		t.Fatalf("CREATE EXTENSION snowflake through the proxy: %v", err)
	}
	_ = c.Close(context.Background())
}

// execDirect runs sql on the test database straight on the server.
func (e *testEnv) execDirect(t testing.TB, sql string) {
	t.Helper()
	pgtest.Exec(t, e.srv, e.db, sql)
}

// queryExecModes are pgx v5's five query exec modes, default first.
var queryExecModes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement,
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec,
	pgx.QueryExecModeSimpleProtocol,
}

// modeName is the mode as an SQL identifier part ("cache_statement").
func modeName(mode pgx.QueryExecMode) string {
	return strings.ReplaceAll(mode.String(), " ", "_")
}

// forEachMode runs fn as one subtest per query exec mode.
func forEachMode(t *testing.T, fn func(t *testing.T, mode pgx.QueryExecMode)) {
	for _, mode := range queryExecModes {
		t.Run(modeName(mode), func(t *testing.T) { fn(t, mode) })
	}
}

// run executes sql with conn.Query so that the connection's query exec mode
// is honoured even without arguments (conn.Exec switches to the simple
// protocol when there are none), discards rows and returns the command tag.
func run(ctx context.Context, conn *pgx.Conn, sql string, args ...any) (pgconn.CommandTag, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	rows.Close()
	return rows.CommandTag(), rows.Err()
}

// mustRun is run that fails the test on error.
func mustRun(t testing.TB, conn *pgx.Conn, sql string, args ...any) pgconn.CommandTag {
	t.Helper()
	tag, err := run(context.Background(), conn, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return tag
}

// queryInt64s returns the first column of every row as int64.
func queryInt64s(ctx context.Context, conn *pgx.Conn, sql string, args ...any) ([]int64, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// mustInt64s is queryInt64s that fails the test on error.
func mustInt64s(t testing.TB, conn *pgx.Conn, sql string, args ...any) []int64 {
	t.Helper()
	ids, err := queryInt64s(context.Background(), conn, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return ids
}

// mustInt64 runs a query returning exactly one int8 value.
func mustInt64(t testing.TB, conn *pgx.Conn, sql string, args ...any) int64 {
	t.Helper()
	vals := mustInt64s(t, conn, sql, args...)
	if len(vals) != 1 {
		t.Fatalf("%s: got %d rows, want 1", sql, len(vals))
	}
	return vals[0]
}

// mustString runs a query returning exactly one value, read as text.
func mustString(t testing.TB, conn *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// sqlState returns the SQLSTATE of a server error from pgx or lib/pq, or ""
// when err carries none.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return string(pqErr.Code)
	}
	return ""
}

// errorMessage returns the primary message of a server error ("" if none).
func errorMessage(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return pqErr.Message
	}
	return ""
}

// wantError fails unless err is a server error with SQLSTATE code whose
// message contains msg (msg "" checks only the code).
func wantError(t testing.TB, what string, err error, code, msg string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want error %s %q", what, code, msg)
		return
	}
	if got := sqlState(err); got != code {
		t.Errorf("%s: got error %v (SQLSTATE %q), want SQLSTATE %s", what, err, got, code)
		return
	}
	if msg != "" && !strings.Contains(errorMessage(err), msg) {
		t.Errorf("%s: got message %q, want it to contain %q", what, errorMessage(err), msg)
	}
}

// The snowflake layout (docs/compatibility.md), decoded here independently
// of the generator package so that the tests check the proxy against the
// contract, not against its own code.
const (
	snowflakeEpochUnixMs int64 = 1672531200000 // 2023-01-01 00:00:00 UTC
	countBits                  = 12
	nodeBits                   = 10
)

// snowflakeID is a decoded ID.
type snowflakeID struct {
	Ms    int64 // since the snowflake epoch
	Node  int
	Count int
}

func decodeID(id int64) snowflakeID {
	return snowflakeID{
		Ms:    id >> (countBits + nodeBits),
		Node:  int(id>>countBits) & (1<<nodeBits - 1),
		Count: int(id) & (1<<countBits - 1),
	}
}

func composeID(ms int64, node, count int) int64 {
	return ms<<(countBits+nodeBits) | int64(node)<<countBits | int64(count)
}

// Time is the instant of the ID's ms field.
func (s snowflakeID) Time() time.Time { return time.UnixMilli(s.Ms + snowflakeEpochUnixMs) }

func (s snowflakeID) String() string {
	return fmt.Sprintf("{ms %d (%s) node %d count %d}", s.Ms, s.Time().UTC().Format(time.RFC3339Nano), s.Node, s.Count)
}

// expectedEpochText is snowflake.get_epoch(id)::text: Unix seconds of the ms
// field with exactly three decimals.
func expectedEpochText(id int64) string {
	unixMs := decodeID(id).Ms + snowflakeEpochUnixMs
	return fmt.Sprintf("%d.%03d", unixMs/1000, unixMs%1000)
}

// pgTimestamptzText renders t as PostgreSQL prints a timestamptz with
// DateStyle ISO in t's zone: fractional seconds without trailing zeros, the
// offset as +HH or +HH:MM.
func pgTimestamptzText(t time.Time) string {
	s := t.Format("2006-01-02 15:04:05.999999")
	_, off := t.Zone()
	sign := "+"
	if off < 0 {
		sign, off = "-", -off
	}
	s += fmt.Sprintf("%s%02d", sign, off/3600)
	if m := off % 3600 / 60; m != 0 {
		s += fmt.Sprintf(":%02d", m)
	}
	return s
}

// expectedFormatText is snowflake.format(id)::text in a session whose
// TimeZone is loc and DateStyle ISO (jsonb prints keys shorter first).
func expectedFormatText(id int64, loc *time.Location) string {
	d := decodeID(id)
	return fmt.Sprintf(`{"id": %d, "ts": "%s", "count": %d}`, d.Node, pgTimestamptzText(d.Time().In(loc)), d.Count)
}

// checkIDs fails unless every ID carries node and the list is strictly
// increasing (the order in which they were issued).
func checkIDs(t testing.TB, what string, ids []int64, node int) {
	t.Helper()
	for i, id := range ids {
		if got := decodeID(id).Node; got != node {
			t.Errorf("%s: ID %d = %v has node %d, want %d", what, id, decodeID(id), got, node)
		}
		if i > 0 && id <= ids[i-1] {
			t.Errorf("%s: ID #%d %d %v is not greater than the previous %d %v", what, i, id, decodeID(id), ids[i-1], decodeID(ids[i-1]))
		}
	}
}

// checkPlausibleTime fails unless the ID's time is near the present: IDs may
// run ahead of the clock by a lease length, never by hours, and never lie in
// the past before the test started. This catches a wrong bit layout (node
// and count swapped, wrong epoch), not timing.
func checkPlausibleTime(t testing.TB, id int64, testStart time.Time) {
	t.Helper()
	ts := decodeID(id).Time()
	if ts.Before(testStart.Add(-time.Minute)) || ts.After(time.Now().Add(time.Hour)) {
		t.Errorf("ID %d decodes to time %s, far from now (%s): wrong layout or epoch", id, ts.UTC(), time.Now().UTC())
	}
}
