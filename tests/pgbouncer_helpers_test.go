package tests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// topoNode is the node of the proxies in the topology tests.
const topoNode = 9

// pooledModes are pgx's exec modes that keep no statement on the server
// between transactions, which is what a pooler in transaction mode
// allows (pgx's default mode and DescribeExec prepare a statement in one
// transaction and use it in another).
var pooledModes = []pgx.QueryExecMode{
	pgx.QueryExecModeSimpleProtocol,
	pgx.QueryExecModeExec,
	pgx.QueryExecModeCacheDescribe,
}

// startProxyConfig starts a proxy with cfg (listening on a free port, the
// test logger) and closes it at the end of the test.
func startProxyConfig(t *testing.T, cfg app.Config) *app.App {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	a, err := app.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("starting the proxy: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return a
}

// connectAddr opens a pgx connection to db through addr (a proxy or a
// PgBouncer) as postgres, in mode; closed at the end of the test.
func connectAddr(t *testing.T, addr, db string, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", addr, db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	return connectConfig(t, cfg)
}

// nodeOnServer gives the test's database snowflake.node = node in the
// server's configuration: behind a pooler in transaction mode a session's
// statements run on server connections every client shares, so the node
// must come with them (the proxy's startup parameter is dropped by
// PgBouncer's ignore_startup_parameters).
func nodeOnServer(t *testing.T, srv *pgserver.Server, db string, node int) {
	t.Helper()
	pgtest.Exec(t, srv, "postgres", fmt.Sprintf("ALTER DATABASE %s SET snowflake.node = %d", db, node))
}

// topoSchema installs the extension, a table with a snowflake default and
// a sequence s, through addr, and waits until the proxy fills INSERT
// defaults itself.
func topoSchema(t *testing.T, addr, db string) {
	t.Helper()
	c := connectAddr(t, addr, db, pgx.QueryExecModeSimpleProtocol)
	for _, sql := range []string{
		"CREATE EXTENSION snowflake",
		"CREATE TABLE items (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), client int NOT NULL, v text NOT NULL)",
		"CREATE SEQUENCE s",
		"CREATE TABLE warm (id bigint PRIMARY KEY DEFAULT snowflake.nextval())",
	} {
		mustRun(t, c, sql)
	}
	waitFastDefaults(t, c, "warm")
	_ = c.Close(context.Background())
}

// topoRounds is how often each client of topoWorkload repeats its
// statements.
const topoRounds = 6

// topoWorkload runs one client per mode at once through addr: fast-path
// nextval, currval inside the transaction of its nextval, the shim's
// per-row calls, INSERT defaults (RETURNING, a repeated plain INSERT, and
// INSERT ... SELECT). Then every ID of a sequence is unique and carries
// node, and every client's rows are its own.
//
// sharedServer: the server connections are shared between clients from
// one transaction to the next (PgBouncer in transaction mode). The
// shim's currval lives on the server connection, where another client's
// shim call may have left a later value, and currval takes the later of
// it and the proxy's own fast-path value: after a nextval the proxy
// answered, currval is then only at least that value (after the shim's
// own nextval, set in this transaction, it is exact).
func topoWorkload(t *testing.T, addr, db string, node int, modes []pgx.QueryExecMode, sharedServer bool) {
	t.Helper()
	var mu sync.Mutex
	ids := map[string][]int64{} // by sequence: "id_seq", "s"
	var wg sync.WaitGroup
	errs := make(chan error, len(modes))
	conns := make([]*pgx.Conn, len(modes))
	for i, mode := range modes {
		conn := connectAddr(t, addr, db, mode)
		conns[i] = conn
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := topoClient(conn, i, sharedServer)
			if err != nil {
				errs <- fmt.Errorf("client %d (%s): %w", i, modeName(mode), err)
				return
			}
			mu.Lock()
			for k, v := range got {
				ids[k] = append(ids[k], v...)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	// Closed now: through PgBouncer in session mode each holds a server
	// connection the checks below need.
	for _, c := range conns {
		_ = c.Close(context.Background())
	}
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	for seq, list := range ids {
		checkUniqueNode(t, "sequence "+seq, list, node)
	}
	// Each client's rows, by what it inserted: a statement of one session
	// run in another's would show here.
	c := connectAddr(t, addr, db, pgx.QueryExecModeSimpleProtocol)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := c.Query(ctx, "SELECT client, v, count(*), count(DISTINCT id) FROM items GROUP BY client, v ORDER BY client, v")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for rows.Next() {
		var client int32
		var v string
		var n, distinct int64
		if err := rows.Scan(&client, &v, &n, &distinct); err != nil {
			t.Fatal(err)
		}
		if n != distinct {
			t.Errorf("client %d %s: %d rows, %d distinct ids", client, v, n, distinct)
		}
		got[fmt.Sprintf("%d %s", client, v)] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for i := range modes {
		want[fmt.Sprintf("%d plain", i)] = topoRounds
		want[fmt.Sprintf("%d returning", i)] = 2 * topoRounds
		want[fmt.Sprintf("%d select", i)] = 5 * topoRounds
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows per client and statement = %v, want %v", got, want)
	}
}

// topoClient is one client of topoWorkload; it returns the IDs it got per
// sequence.
func topoClient(c *pgx.Conn, client int, sharedServer bool) (map[string][]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ids := map[string][]int64{}
	one := func(seq, sql string, args ...any) (int64, error) {
		got, err := queryInt64s(ctx, c, sql, args...)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", sql, err)
		}
		if len(got) != 1 {
			return 0, fmt.Errorf("%s: %d rows, want 1", sql, len(got))
		}
		if seq != "" {
			ids[seq] = append(ids[seq], got[0])
		}
		return got[0], nil
	}
	many := func(seq, sql string, want int, args ...any) ([]int64, error) {
		got, err := queryInt64s(ctx, c, sql, args...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sql, err)
		}
		if len(got) != want {
			return nil, fmt.Errorf("%s: %d rows, want %d", sql, len(got), want)
		}
		ids[seq] = append(ids[seq], got...)
		return got, nil
	}
	exec := func(sql string) error {
		if _, err := run(ctx, c, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
		return nil
	}
	// currval inside the transaction of the nextval it follows; exact
	// false: at least that value (see topoWorkload).
	inTx := func(issue func() (int64, error), currval string, exact bool) error {
		if err := exec("BEGIN"); err != nil {
			return err
		}
		v, err := issue()
		if err != nil {
			return err
		}
		cv, err := one("", currval)
		if err != nil {
			return err
		}
		if cv != v && (exact || cv < v) {
			return fmt.Errorf("%s = %d in the transaction of nextval %d", currval, cv, v)
		}
		return exec("COMMIT")
	}
	plain := fmt.Sprintf("INSERT INTO items (client, v) VALUES (%d, 'plain')", client)
	for range topoRounds {
		if _, err := one("id_seq", "SELECT snowflake.nextval()"); err != nil {
			return nil, err
		}
		if _, err := one("s", "SELECT snowflake.nextval('s')"); err != nil {
			return nil, err
		}
		if _, err := many("s", "SELECT snowflake.nextval('s') FROM generate_series(1, 100)", 100); err != nil {
			return nil, err
		}
		if err := inTx(func() (int64, error) { return one("s", "SELECT snowflake.nextval('s')") }, "SELECT snowflake.currval('s')", !sharedServer); err != nil {
			return nil, err
		}
		if err := inTx(func() (int64, error) {
			got, err := many("s", "SELECT snowflake.nextval('s') FROM generate_series(1, 10)", 10)
			if err != nil {
				return 0, err
			}
			return got[len(got)-1], nil
		}, "SELECT snowflake.currval('s')", true); err != nil {
			return nil, err
		}
		if _, err := one("id_seq", "INSERT INTO items (client, v) VALUES ($1, 'returning') RETURNING id", client); err != nil {
			return nil, err
		}
		if err := inTx(func() (int64, error) {
			return one("id_seq", "INSERT INTO items (client, v) VALUES ($1, 'returning') RETURNING id", client)
		}, "SELECT snowflake.currval()", !sharedServer); err != nil {
			return nil, err
		}
		if err := exec(plain); err != nil {
			return nil, err
		}
		if _, err := many("id_seq", "INSERT INTO items (client, v) SELECT $1, 'select' FROM generate_series(1, 5) RETURNING id", 5, client); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// checkUniqueNode fails unless the IDs are distinct and all carry node.
func checkUniqueNode(t *testing.T, what string, ids []int64, node int) {
	t.Helper()
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	for i, id := range sorted {
		if i > 0 && id == sorted[i-1] {
			t.Errorf("%s: ID %d %v issued twice", what, id, decodeID(id))
		}
		if got := decodeID(id).Node; got != node {
			t.Errorf("%s: ID %d %v has node %d, want %d", what, id, decodeID(id), got, node)
		}
	}
	if len(ids) == 0 {
		t.Errorf("%s: no IDs", what)
	}
}

// backendPID is pg_backend_pid() through conn, in the simple protocol
// whatever conn's mode (a statement pgx prepared would stay on the server
// connection).
func backendPID(t *testing.T, conn *pgx.Conn) int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var pid int32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		t.Fatalf("SELECT pg_backend_pid(): %v", err)
	}
	return pid
}

// metric reads one counter of the proxy's admin listener, named as the
// exposition names it: family{label="value",...}.
func metric(t *testing.T, a *app.App, series string) int64 {
	t.Helper()
	name, rest, _ := strings.Cut(series, "{")
	var labels []string
	for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			labels = append(labels, k, strings.Trim(v, `"`))
		}
	}
	return int64(pgtest.Scrape(t, a.AdminAddr()).Value(t, name, labels...))
}
