package tests

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// The proxy in front of a hot standby (a read-only streaming replica): it
// starts, reads and the decoding functions work, and every call that would
// issue an ID fails like a write on a standby (25006) without hanging or
// losing the session.

const (
	standbyPrimaryNode = 1
	standbyProxyNode   = 5
	standbyCallTimeout = 5 * time.Second
)

// standbySetup is a primary and its standby holding, through a proxy on the
// primary (node 1): the extension, table items (id DEFAULT
// snowflake.nextval()) with rows ids, and a sequence s1 used once by
// snowflake.nextval('s1'). The standby has replayed all of it; the primary's
// proxy is closed again.
type standbySetup struct {
	*standbyPair
	ids []int64
	log pgtest.SyncBuffer // what the standby's proxy logged
}

func setupStandby(t *testing.T) *standbySetup {
	t.Helper()
	p := startStandbyPair(t)
	prox := startProxy(t, p.primary, standbyPrimaryNode, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := connectURL(t, fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", prox.Addr(), p.db))
	for _, sql := range []string{
		"CREATE EXTENSION snowflake",
		"CREATE TABLE items (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), item text)",
		"CREATE SEQUENCE s1",
	} {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("primary, through the proxy: %s: %v", sql, err)
		}
	}
	ids, err := queryInt64s(ctx, c, "INSERT INTO items (item) VALUES ('a'), ('b'), ('c') RETURNING id")
	if err != nil || len(ids) != 3 {
		t.Fatalf("primary, through the proxy: insert: %v %v", ids, err)
	}
	checkIDs(t, "IDs inserted on the primary", ids, standbyPrimaryNode)
	if _, err := queryInt64s(ctx, c, "SELECT snowflake.nextval('s1')"); err != nil {
		t.Fatalf("primary, through the proxy: nextval('s1'): %v", err)
	}
	_ = c.Close(ctx)
	if err := prox.Close(ctx); err != nil {
		t.Fatalf("closing the primary's proxy: %v", err)
	}
	p.waitReplayed(t)
	return &standbySetup{standbyPair: p, ids: ids}
}

// proxyConfig is the standby's proxy: node standbyProxyNode, warnings
// and errors logged to s.log.
func (s *standbySetup) proxyConfig() app.Config {
	return app.Config{
		Listen:   "127.0.0.1:0",
		Upstream: s.standby.URL("postgres"),
		Node:     standbyProxyNode,
		Logger:   slog.New(slog.NewTextHandler(&s.log, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// startStandbyProxy starts a proxy (node standbyProxyNode) in front of the
// standby and closes it at the end of the test.
func (s *standbySetup) startStandbyProxy(t *testing.T) *app.App {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := app.Start(ctx, s.proxyConfig())
	if err != nil {
		t.Fatalf("the proxy refuses to start in front of a hot standby: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("closing the standby's proxy: %v", err)
		}
	})
	return a
}

func (s *standbySetup) connectProxy(t *testing.T, a *app.App, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", a.Addr(), s.db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	return connectConfig(t, cfg)
}

// standbyModes: the simple protocol and pgx's default (extended, cached
// statements), then the other extended modes.
var standbyModes = []pgx.QueryExecMode{
	pgx.QueryExecModeSimpleProtocol,
	pgx.QueryExecModeCacheStatement,
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec,
}

// TestStandbyProxyServesReads: the proxy starts in front of a hot standby;
// the replicated rows, the decoding functions on a stored ID and SHOW
// snowflake.node work in every exec mode.
func TestStandbyProxyServesReads(t *testing.T) {
	t.Parallel()
	s := setupStandby(t)
	a := s.startStandbyProxy(t)
	for _, mode := range standbyModes {
		t.Run(modeName(mode), func(t *testing.T) {
			conn := s.connectProxy(t, a, mode)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			var inRecovery bool
			if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || !inRecovery {
				t.Fatalf("through the proxy: pg_is_in_recovery() = %v, %v; want true (the proxy must be in front of the standby)", inRecovery, err)
			}
			got, err := queryInt64s(ctx, conn, "SELECT id FROM items ORDER BY id")
			if err != nil {
				t.Fatalf("SELECT id FROM items: %s", describeErr(err))
			}
			if fmt.Sprint(got) != fmt.Sprint(s.ids) {
				t.Fatalf("SELECT id FROM items = %v, want the primary's %v", got, s.ids)
			}
			if _, err := run(ctx, conn, "SET DateStyle = ISO"); err != nil {
				t.Fatal(err)
			}
			if _, err := run(ctx, conn, "SET TimeZone = 'UTC'"); err != nil {
				t.Fatal(err)
			}
			for _, id := range s.ids {
				d := decodeID(id)
				var node, count int32
				var epoch, format string
				err := conn.QueryRow(ctx, "SELECT snowflake.get_node(id), snowflake.get_count(id), snowflake.get_epoch(id)::text, snowflake.format(id)::text FROM items WHERE id = $1", id).
					Scan(&node, &count, &epoch, &format)
				if err != nil {
					t.Fatalf("decoding functions on stored ID %d: %s", id, describeErr(err))
				}
				if int(node) != standbyPrimaryNode || int(count) != d.Count || epoch != expectedEpochText(id) || format != expectedFormatText(id, time.UTC) {
					t.Errorf("ID %d: get_node, get_count, get_epoch, format = %d, %d, %s, %s; want %d, %d, %s, %s",
						id, node, count, epoch, format, standbyPrimaryNode, d.Count, expectedEpochText(id), expectedFormatText(id, time.UTC))
				}
			}
			var show, setting string
			if err := conn.QueryRow(ctx, "SHOW snowflake.node").Scan(&show); err != nil {
				t.Fatalf("SHOW snowflake.node: %s", describeErr(err))
			}
			if err := conn.QueryRow(ctx, "SELECT current_setting('snowflake.node')").Scan(&setting); err != nil {
				t.Fatalf("current_setting('snowflake.node'): %s", describeErr(err))
			}
			if want := fmt.Sprint(standbyProxyNode); show != want || setting != want {
				t.Errorf("SHOW snowflake.node = %q, current_setting = %q; want %q (the proxy's --node)", show, setting, want)
			}
		})
	}
}

// standbyIssuing are statements that must issue an ID, which a standby
// cannot do.
var standbyIssuing = []string{
	"SELECT snowflake.nextval()",
	"SELECT snowflake.nextval('s1')",
	"INSERT INTO items (item) VALUES ('standby')",
	"INSERT INTO items (id, item) VALUES (DEFAULT, 'standby') RETURNING id",
}

// refError is what the standby itself answers (the shim, called on a
// direct connection with snowflake.node set).
type refError struct{ code, msg string }

func (s *standbySetup) referenceErrors(t *testing.T) map[string]refError {
	t.Helper()
	c := connectURL(t, s.standby.URL(s.db))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := c.Exec(ctx, fmt.Sprintf("SET snowflake.node = %d", standbyProxyNode)); err != nil {
		t.Fatalf("direct on the standby: SET snowflake.node: %v", err)
	}
	ref := map[string]refError{}
	for _, sql := range standbyIssuing {
		_, err := run(ctx, c, sql)
		if err == nil {
			t.Fatalf("direct on the standby: %s succeeded; a standby cannot issue IDs", sql)
		}
		if sqlState(err) != "25006" {
			t.Fatalf("direct on the standby: %s: %s; want SQLSTATE 25006 (the test's premise)", sql, describeErr(err))
		}
		ref[sql] = refError{code: sqlState(err), msg: errorMessage(err)}
		t.Logf("direct on the standby: %s: %s", sql, describeErr(err))
	}
	return ref
}

// checkStandbyError checks one issuing statement through the proxy: a
// clean ErrorResponse with the server's SQLSTATE within the time bound, the
// connection still open with the transaction status wantTx.
func checkStandbyError(t *testing.T, conn *pgx.Conn, sql string, ref refError, wantTx byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), standbyCallTimeout)
	defer cancel()
	start := time.Now()
	_, err := run(ctx, conn, sql)
	took := time.Since(start)
	switch {
	case err == nil:
		t.Errorf("%s through the proxy on a standby: succeeded, want SQLSTATE %s %q", sql, ref.code, ref.msg)
		return
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		t.Fatalf("%s through the proxy on a standby: no answer within %s (hang): %v", sql, standbyCallTimeout, err)
	}
	t.Logf("%s: %s (%s)", sql, describeErr(err), took.Round(time.Millisecond))
	if got := sqlState(err); got != ref.code {
		t.Errorf("%s through the proxy on a standby: %s; want SQLSTATE %s like the server (%q)", sql, describeErr(err), ref.code, ref.msg)
	} else if msg := errorMessage(err); !strings.Contains(msg, "read-only transaction") {
		t.Errorf("%s through the proxy on a standby: message %q does not say the transaction is read-only (the server says %q)", sql, msg, ref.msg)
	}
	if conn.IsClosed() {
		t.Fatalf("%s through the proxy on a standby: the connection was lost", sql)
	}
	if st := conn.PgConn().TxStatus(); st != wantTx {
		t.Errorf("%s through the proxy on a standby: transaction status %c after the error, want %c", sql, st, wantTx)
	}
}

// checkSessionAlive runs SELECT 1 on conn within the time bound.
func checkSessionAlive(t *testing.T, conn *pgx.Conn, after string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), standbyCallTimeout)
	defer cancel()
	var one int32
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 after %s: %d, %s; the session is lost", after, one, describeErr(err))
	}
}

// TestStandbyIssuingFailsLikeTheServer: nextval (default and named
// sequence) and INSERTs that default the snowflake column fail through the
// proxy with the SQLSTATE the standby gives for the shim called directly
// (25006), never hang, and the session goes on (SELECT 1), outside and inside
// an explicit transaction, in the simple protocol and every extended mode.
func TestStandbyIssuingFailsLikeTheServer(t *testing.T) {
	t.Parallel()
	s := setupStandby(t)
	ref := s.referenceErrors(t)
	a := s.startStandbyProxy(t)
	for _, mode := range standbyModes {
		t.Run(modeName(mode), func(t *testing.T) {
			conn := s.connectProxy(t, a, mode)
			for _, sql := range standbyIssuing {
				checkStandbyError(t, conn, sql, ref[sql], 'I')
				checkSessionAlive(t, conn, sql)
				// Twice: a second call must not be answered from a stale
				// state (or hang on a lease the first call left pending).
				checkStandbyError(t, conn, sql, ref[sql], 'I')
				checkSessionAlive(t, conn, sql+" (second call)")
			}
			for _, sql := range standbyIssuing {
				mustRunWithin(t, conn, "BEGIN")
				checkStandbyError(t, conn, sql, ref[sql], 'E')
				mustRunWithin(t, conn, "ROLLBACK")
				checkSessionAlive(t, conn, "BEGIN; "+sql+"; ROLLBACK")
			}
			// Reads still work and nothing was inserted.
			ctx, cancel := context.WithTimeout(context.Background(), standbyCallTimeout)
			defer cancel()
			got, err := queryInt64s(ctx, conn, "SELECT id FROM items ORDER BY id")
			if err != nil || fmt.Sprint(got) != fmt.Sprint(s.ids) {
				t.Fatalf("SELECT id FROM items after the errors = %v, %s; want %v", got, describeErr(err), s.ids)
			}
		})
	}
	// The INSERTs started the catalog watch, which cannot LISTEN during
	// recovery; the log says why (not "until it is back": a standby is
	// not coming back by itself).
	const want = "server is read-only (a hot standby?)"
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy's log does not say %q; it holds:\n%s", want, s.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustRunWithin(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), standbyCallTimeout)
	defer cancel()
	if _, err := run(ctx, conn, sql); err != nil {
		t.Fatalf("%s: %s", sql, describeErr(err))
	}
}

// TestStandbyCloseLeavesNoGoroutines: after sessions that read and were
// refused IDs on a standby, the proxy's Close returns in time and leaves no
// goroutine of the proxy (wire, compat, generator, app, pgxpool) behind.
func TestStandbyCloseLeavesNoGoroutines(t *testing.T) {
	// Not parallel: it counts the proxy goroutines of the whole process.
	s := setupStandby(t)
	baseline := proxyGoroutines()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := app.Start(ctx, s.proxyConfig())
	if err != nil {
		t.Fatalf("the proxy refuses to start in front of a hot standby: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = a.Close(context.Background())
		}
	})
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectProxy(t, a, mode)
		for _, sql := range standbyIssuing {
			cctx, ccancel := context.WithTimeout(ctx, standbyCallTimeout)
			_, err := run(cctx, conn, sql)
			ccancel()
			if sqlState(err) != "25006" {
				t.Errorf("%s (%s): %s; want SQLSTATE 25006", sql, modeName(mode), describeErr(err))
			}
		}
		checkSessionAlive(t, conn, "the refused calls")
		if err := conn.Close(ctx); err != nil {
			t.Fatalf("closing the client connection: %v", err)
		}
	}
	// One session left open: Close must end it.
	open := s.connectProxy(t, a, pgx.QueryExecModeCacheStatement)
	checkSessionAlive(t, open, "connecting")

	// Close now (expired context): open sessions are cut at once.
	closeCtx, closeCancel := context.WithCancel(context.Background())
	closeCancel()
	start := time.Now()
	err = a.Close(closeCtx)
	closed = true
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Close with an expired context took %s", took)
	}
	if err := open.Ping(ctx); err == nil {
		t.Fatal("the open session survived Close")
	}
	waitNoNewProxyGoroutines(t, baseline, 5*time.Second)
}

// TestStandbyPromotionThenIssues: sessions opened through the proxy while
// the server was a standby (and refused IDs) issue IDs of the proxy's node
// once the standby is promoted, without reconnecting; so do new sessions.
func TestStandbyPromotionThenIssues(t *testing.T) {
	t.Parallel()
	s := setupStandby(t)
	ref := s.referenceErrors(t)
	a := s.startStandbyProxy(t)
	conns := map[pgx.QueryExecMode]*pgx.Conn{}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectProxy(t, a, mode)
		for _, sql := range standbyIssuing {
			checkStandbyError(t, conn, sql, ref[sql], 'I')
		}
		conns[mode] = conn
	}
	s.promote(t)
	for mode, conn := range conns {
		t.Run(modeName(mode), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			var ids []int64
			for _, sql := range []string{
				"SELECT snowflake.nextval()",
				"SELECT snowflake.nextval()",
				"INSERT INTO items (item) VALUES ('promoted') RETURNING id",
				"INSERT INTO items (id, item) VALUES (DEFAULT, 'promoted') RETURNING id",
			} {
				got, err := queryInt64s(ctx, conn, sql)
				if err != nil || len(got) != 1 {
					t.Fatalf("after promotion, same session: %s = %v, %s", sql, got, describeErr(err))
				}
				ids = append(ids, got...)
			}
			checkIDs(t, "IDs after promotion", ids, standbyProxyNode)
			if _, err := queryInt64s(ctx, conn, "SELECT snowflake.nextval('s1')"); err != nil {
				t.Fatalf("after promotion, same session: nextval('s1'): %s", describeErr(err))
			}
		})
	}
	fresh := s.connectProxy(t, a, pgx.QueryExecModeCacheStatement)
	checkIDs(t, "IDs of a new session after promotion", mustInt64s(t, fresh, "SELECT snowflake.nextval() FROM generate_series(1, 3)"), standbyProxyNode)
}

// promote promotes the standby and waits until it leaves recovery.
func (s *standbySetup) promote(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := s.standby.Command(ctx, "pg_ctl", "-D", s.standby.DataDir(), "-w", "-t", "30", "promote")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl promote: %v: %s", err, out)
	}
	c := connectURL(t, s.standby.URL(s.db))
	defer c.Close(context.Background())
	for {
		var inRecovery bool
		if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
			t.Fatalf("after promote: pg_is_in_recovery(): %v", err)
		}
		if !inRecovery {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the standby is still in recovery after pg_ctl promote")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
