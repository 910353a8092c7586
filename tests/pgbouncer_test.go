package tests

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// The topologies users deploy with PgBouncer, against the real program:
// the proxy in front of PgBouncer in transaction mode (sessions through
// PgBouncer, the proxy's own connections straight to the server), and
// PgBouncer in session and transaction mode in front of the proxy.

// proxyBeforePgBouncer is clients -> proxy -> PgBouncer (transaction
// mode, poolSize server connections) -> server, the proxy's control
// connections straight to the server, on a fresh database whose node is
// set on the server.
type proxyBeforePgBouncer struct {
	db  string
	pgb *pgtest.PgBouncer
	app *app.App
}

func startProxyBeforePgBouncer(t *testing.T, poolSize int) *proxyBeforePgBouncer {
	t.Helper()
	srv := pgtest.Shared(t)
	db := pgtest.NewDatabase(t, srv)
	nodeOnServer(t, srv, db, topoNode)
	pgb := pgtest.StartPgBouncer(t, pgtest.PgBouncerOptions{
		Host: "127.0.0.1", Port: srv.Port(), PoolMode: "transaction", PoolSize: poolSize,
		// The proxy passes --node as a startup parameter, which PgBouncer
		// refuses unless told to drop it; the server's setting applies.
		Settings: map[string]string{"ignore_startup_parameters": "snowflake.node"},
	})
	a := startProxyConfig(t, app.Config{
		Upstream:        "postgres://postgres@" + pgb.Addr() + "/postgres?sslmode=disable",
		ControlUpstream: srv.URL("postgres"),
		Node:            topoNode,
		AdminListen:     "127.0.0.1:0",
	})
	return &proxyBeforePgBouncer{db: db, pgb: pgb, app: a}
}

// TestProxyBeforePgBouncerTransactionMode: clients of every exec mode
// that suits transaction pooling, at once, through the proxy in front of
// PgBouncer in transaction mode with fewer server connections than
// clients: fast-path and shim IDs, currval in the transaction of its
// nextval (exact after the shim's, at least the value after the proxy's:
// see topoWorkload), INSERT defaults; every ID unique with the proxy's
// node, every client's rows its own.
func TestProxyBeforePgBouncerTransactionMode(t *testing.T) {
	t.Parallel()
	e := startProxyBeforePgBouncer(t, 2)
	topoSchema(t, e.app.Addr(), e.db)
	modes := append(append([]pgx.QueryExecMode{}, pooledModes...), pooledModes...)
	topoWorkload(t, e.app.Addr(), e.db, topoNode, modes, true)
	if n := metric(t, e.app, "snowflake_proxy_prepared_inserts_total"); n != 0 {
		t.Errorf("%d INSERTs prepared by the proxy behind a pooler in transaction mode, want 0", n)
	}
	if n := metric(t, e.app, `snowflake_proxy_ids_issued_total{path="injected"}`); n == 0 {
		t.Error("no fast-path ID: the workload ran in the shim only")
	}
}

// Regression: behind PgBouncer in transaction mode the proxy prepared a
// repeated simple-protocol INSERT on one server connection and sent its
// Bind in a later transaction, which PgBouncer ran on another: "prepared
// statement "snowflake-proxy insert 1" does not exist" (26000), or
// "already exists" (42P05) where another session had prepared its own
// statement under the same name, whose Bind could run the other session's
// INSERT. Here the third INSERT of a text is sent while another client
// holds the server connection of the first two.
func TestProxyBeforePgBouncerTransactionModeInsertsNotPrepared(t *testing.T) {
	t.Parallel()
	e := startProxyBeforePgBouncer(t, 2)
	topoSchema(t, e.app.Addr(), e.db)
	a := connectAddr(t, e.app.Addr(), e.db, pgx.QueryExecModeSimpleProtocol)
	b := connectAddr(t, e.app.Addr(), e.db, pgx.QueryExecModeSimpleProtocol)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	insert := "INSERT INTO items (client, v) VALUES (1, 'plain')"
	for range 2 {
		mustRun(t, a, insert)
	}
	first := backendPID(t, a)
	// b takes the server connection a used last (PgBouncer hands out the
	// most recently used): a's next transaction runs on another.
	mustRun(t, b, "BEGIN")
	if held := backendPID(t, b); held != first {
		t.Fatalf("premise: b holds server process %d, a ran on %d", held, first)
	}
	if _, err := run(ctx, a, insert); err != nil {
		t.Fatalf("third %s on another server connection: %s", insert, describeErr(err))
	}
	if other := backendPID(t, a); other == first {
		t.Fatalf("premise: a ran on server process %d again while b held it", other)
	}
	mustRun(t, b, "COMMIT")
	if n := mustInt64(t, b, "SELECT count(*) FROM items WHERE client = 1"); n != 3 {
		t.Fatalf("%d rows, want 3", n)
	}
	if n := metric(t, e.app, "snowflake_proxy_prepared_inserts_total"); n != 0 {
		t.Errorf("%d INSERTs prepared, want 0 behind a pooler", n)
	}
}

// TestProxyBeforePgBouncerTransactionModeNamedStatements: pgx's default
// mode keeps named statements between transactions, which PgBouncer 1.18
// in transaction mode does not: when the next transaction runs on another
// server connection, the statement is missing there (26000). Through the
// proxy exactly as directly through PgBouncer: the proxy adds no failure
// of its own.
func TestProxyBeforePgBouncerTransactionModeNamedStatements(t *testing.T) {
	t.Parallel()
	e := startProxyBeforePgBouncer(t, 2)
	topoSchema(t, e.app.Addr(), e.db)
	for _, via := range []struct{ name, addr string }{{"proxy", e.app.Addr()}, {"pgbouncer", e.pgb.Addr()}} {
		t.Run(via.name, func(t *testing.T) {
			a := connectAddr(t, via.addr, e.db, pgx.QueryExecModeCacheStatement)
			b := connectAddr(t, via.addr, e.db, pgx.QueryExecModeSimpleProtocol)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// A text of its own: pgx names the statement after it, and
			// PgBouncer's server connections keep what the other subtest
			// prepared.
			count := "SELECT count(*) FROM items WHERE client = $1 -- " + via.name
			var n int64
			if err := a.QueryRow(ctx, count, 1).Scan(&n); err != nil {
				t.Fatalf("%s, prepared by pgx: %s", count, describeErr(err))
			}
			first := backendPID(t, a)
			mustRun(t, b, "BEGIN")
			defer mustRun(t, b, "COMMIT")
			if held := backendPID(t, b); held != first {
				t.Fatalf("premise: b holds server process %d, a ran on %d", held, first)
			}
			err := a.QueryRow(ctx, count, 1).Scan(&n)
			if sqlState(err) != "26000" {
				t.Fatalf("%s again on another server connection: %s; want 26000 (the statement is on the first)", count, describeErr(err))
			}
			t.Logf("as expected: %s", describeErr(err))
		})
	}
}

// TestProxyBeforePgBouncerTransactionModeCurrvalAcrossTransactions: the
// shim keeps a session's currval on the server connection, which
// PgBouncer in transaction mode shares between clients. In a later
// transaction, currval returns what another client got on that connection
// (or 55000 on a fresh one), as PostgreSQL's own currval does behind
// PgBouncer; one server connection makes it certain here.
func TestProxyBeforePgBouncerTransactionModeCurrvalAcrossTransactions(t *testing.T) {
	t.Parallel()
	e := startProxyBeforePgBouncer(t, 1)
	topoSchema(t, e.app.Addr(), e.db)
	pgtest.Exec(t, pgtest.Shared(t), e.db, "CREATE SEQUENCE n")
	a := connectAddr(t, e.app.Addr(), e.db, pgx.QueryExecModeSimpleProtocol)
	b := connectAddr(t, e.app.Addr(), e.db, pgx.QueryExecModeSimpleProtocol)
	for _, c := range []struct{ what, nextval, currval string }{
		{"snowflake, shim per-row calls", "SELECT snowflake.nextval('s') FROM generate_series(1, 3)", "SELECT snowflake.currval('s')"},
		{"PostgreSQL's own sequence", "SELECT nextval('n') FROM generate_series(1, 3)", "SELECT currval('n')"},
	} {
		t.Run(c.what, func(t *testing.T) {
			fromA := mustInt64s(t, a, c.nextval)
			fromB := mustInt64s(t, b, c.nextval)
			got := mustInt64(t, a, c.currval)
			if got != fromB[len(fromB)-1] {
				t.Fatalf("a's %s in a later transaction = %d; a got %v, b got %v on the same server connection: want b's last (the pooler's semantics)",
					c.currval, got, fromA, fromB)
			}
			t.Logf("a got %v, b got %v; a's currval in a later transaction: %d (b's)", fromA, fromB, got)
		})
	}
}

// TestPgBouncerBeforeProxy: clients -> PgBouncer (session and transaction
// mode) -> proxy -> server. The proxy sees PgBouncer's few long-lived
// server connections, whatever the number of clients: the workload's IDs
// are unique with the proxy's node, and the proxy prepares its repeated
// INSERTs (its sessions keep their server connections). In session mode a
// client that gets a server connection another client used starts without
// that client's currval (PgBouncer's DISCARD ALL).
func TestPgBouncerBeforeProxy(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"session", "transaction"} {
		t.Run(mode, func(t *testing.T) {
			srv := pgtest.Shared(t)
			db := pgtest.NewDatabase(t, srv)
			a := startProxyConfig(t, app.Config{Upstream: srv.URL("postgres"), Node: topoNode, AdminListen: "127.0.0.1:0"})
			host, port := splitAddr(t, a.Addr())
			modes := append(append([]pgx.QueryExecMode{}, pooledModes...), pooledModes...)
			// In session mode a client keeps its server connection while
			// connected: the pool must hold every client of the workload.
			poolSize := 2
			if mode == "session" {
				modes = append(modes, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec)
				poolSize = len(modes)
			}
			pgb := pgtest.StartPgBouncer(t, pgtest.PgBouncerOptions{Host: host, Port: port, PoolMode: mode, PoolSize: poolSize})
			topoSchema(t, pgb.Addr(), db)
			topoWorkload(t, pgb.Addr(), db, topoNode, modes, mode == "transaction")
			clients := len(modes) + 3
			// The workload's own repeated INSERTs may all meet an unnamed
			// statement that another client left on the server connection
			// (in transaction mode), and then are not prepared. One client
			// alone sends one text six times: over one server connection
			// (session mode) or at most two (transaction mode), one of them
			// gets it three times, and the third
			// is prepared (the first clears any unnamed statement, the
			// second marks the text seen). Regression: the check below
			// failed 3 runs in 8 on a faster machine.
			repeat := connectAddr(t, pgb.Addr(), db, pgx.QueryExecModeSimpleProtocol)
			for range 6 {
				if _, err := run(context.Background(), repeat, "INSERT INTO items (client, v) VALUES (-1, 'repeated')"); err != nil {
					t.Fatal(err)
				}
			}
			_ = repeat.Close(context.Background())
			if mode == "session" {
				c := connectAddr(t, pgb.Addr(), db, pgx.QueryExecModeSimpleProtocol)
				mustInt64(t, c, "SELECT snowflake.nextval()")
				used := backendPID(t, c)
				_ = c.Close(context.Background())
				// New clients, each keeping its server connection, until one
				// gets c's: at most one per server connection of the pool.
				var next *pgx.Conn
				for i := 0; next == nil; i++ {
					if i == poolSize {
						t.Fatalf("%d new clients, none got server process %d", poolSize, used)
					}
					n := connectAddr(t, pgb.Addr(), db, pgx.QueryExecModeSimpleProtocol)
					clients++
					if backendPID(t, n) == used {
						next = n
					}
				}
				_, err := run(context.Background(), next, "SELECT snowflake.currval()")
				wantError(t, "currval of a new client on a reused server connection", err, "55000", `currval of sequence "id_seq" is not yet defined in this session`)
				clients++
			}
			// PgBouncer opens server connections (proxy sessions) as its
			// clients need them, up to the pool size, and keeps them.
			if n := metric(t, a, "snowflake_proxy_sessions_total"); n > int64(poolSize) {
				t.Errorf("the proxy saw %d sessions for %d clients through a pool of %d", n, clients, poolSize)
			}
			if n := metric(t, a, "snowflake_proxy_prepared_inserts_total"); n == 0 {
				t.Error("no INSERT prepared: the proxy's sessions behind PgBouncer are its own server connections")
			}
		})
	}
}

// splitAddr splits "host:port".
func splitAddr(t *testing.T, addr string) (string, int) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return host, port
}
