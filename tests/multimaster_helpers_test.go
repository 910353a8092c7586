package tests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// mmSide is one master of the multi-master test: a server, the proxy in
// front of it (its env) and the outages made on purpose. An outage (a proxy
// or server restart) raises gen before it starts and closes up when it is
// over: a writer whose statement fails on a connection opened before the
// latest outage began reconnects, any other failure is the test's.
type mmSide struct {
	name string // "A" or "B"
	node int    // the proxy's --node; also the value of the rows' side column
	env  *testEnv

	mu  sync.Mutex
	gen int           // outages begun so far
	up  chan struct{} // closed while no outage is under way
}

func newMMSide(name string, node int, env *testEnv) *mmSide {
	s := &mmSide{name: name, node: node, env: env, up: make(chan struct{})}
	close(s.up)
	return s
}

func (s *mmSide) state() (int, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen, s.up
}

// outage runs restart as an outage of the side.
func (s *mmSide) outage(restart func() error) error {
	s.mu.Lock()
	s.gen++
	s.up = make(chan struct{})
	s.mu.Unlock()
	err := restart()
	s.mu.Lock()
	close(s.up) // on failure the writers fail to reconnect and say so
	s.mu.Unlock()
	return err
}

// restartServer restarts the side's server (fast shutdown, same port).
func (s *mmSide) restartServer() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return s.env.srv.Restart(ctx)
}

// mmWriter writes rows (side, client, n) into orders through its side's
// proxy, in one way (kind), until stop is closed.
type mmWriter struct {
	side *mmSide
	kind string // simple, cached, psql, copy
	psql string // the psql program, for kind psql

	committed  atomic.Int64 // rows of statements that succeeded
	inDoubt    int64        // rows of statements cut by an outage: committed or not
	ids        []int64      // ids RETURNING gave (kind cached)
	reconnects int
	okGen      atomic.Int64 // the side's gen when the connection of the last statement that succeeded was opened
	err        error        // why it gave up, read after it returned
	quit       atomic.Bool  // it gave up before stop

	conn    *pgx.Conn
	connGen int // the side's gen when conn was opened
	n       int
}

const (
	mmSimpleRows = 5   // rows per INSERT ... VALUES of the simple writer
	mmBatchRows  = 100 // rows per INSERT ... SELECT and COPY
)

func (w *mmWriter) describe() string { return w.side.name + "/" + w.kind }

// loop writes until stop is closed, reconnecting after outages.
func (w *mmWriter) loop(wg *sync.WaitGroup, stop <-chan struct{}, deadline time.Time) {
	defer wg.Done()
	defer func() { w.quit.Store(w.err != nil) }()
	defer func() {
		if w.conn != nil {
			_ = w.conn.Close(context.Background())
		}
	}()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if time.Now().After(deadline) {
			w.err = errors.New("still writing at the test's deadline")
			return
		}
		rows, err := w.write()
		if err == nil {
			w.committed.Add(int64(rows))
			w.okGen.Store(int64(w.connGen))
			continue
		}
		if err = w.recover(err, rows, deadline); err != nil {
			w.err = err
			return
		}
	}
}

// write runs one statement (or one psql run) and returns how many rows it
// writes.
func (w *mmWriter) write() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if w.kind == "psql" {
		return mmBatchRows, w.runPsql(ctx)
	}
	if w.conn == nil {
		if err := w.connect(ctx); err != nil {
			return 0, err
		}
	}
	w.n++
	switch w.kind {
	case "simple":
		// Client-side interpolation, one Query message: the proxy fills
		// the ids and, from the second run on, prepares the statement.
		_, err := w.conn.Exec(ctx, "INSERT INTO orders (side, client, n) VALUES ($1, 'simple', $2), ($1, 'simple', $2), ($1, 'simple', $2), ($1, 'simple', $2), ($1, 'simple', $2)", w.side.node, w.n)
		return mmSimpleRows, err
	case "cached":
		var id int64
		err := w.conn.QueryRow(ctx, "INSERT INTO orders (side, client, n) VALUES ($1, 'cached', $2) RETURNING id", w.side.node, w.n).Scan(&id)
		if err == nil {
			w.ids = append(w.ids, id)
		}
		return 1, err
	case "copy":
		rows := make([][]any, mmBatchRows)
		for i := range rows {
			rows[i] = []any{int32(w.side.node), "copy", int32(w.n)}
		}
		_, err := w.conn.CopyFrom(ctx, pgx.Identifier{"orders"}, []string{"side", "client", "n"}, pgx.CopyFromRows(rows))
		return mmBatchRows, err
	}
	return 0, fmt.Errorf("unknown writer kind %q", w.kind)
}

func (w *mmWriter) connect(ctx context.Context) error {
	w.connGen, _ = w.side.state()
	cfg, err := pgx.ParseConfig(w.side.env.proxyURL("postgres"))
	if err != nil {
		return err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	if w.kind == "simple" {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	w.conn = c
	return nil
}

// runPsql runs one INSERT ... SELECT (column defaults in the shim, per row)
// with psql, a new connection each time.
func (w *mmWriter) runPsql(ctx context.Context) error {
	w.connGen, _ = w.side.state()
	w.n++
	host, port, _ := net.SplitHostPort(w.side.env.proxyAddr())
	sql := fmt.Sprintf("INSERT INTO orders (side, client, n) SELECT %d, 'psql', %d FROM generate_series(1, %d)", w.side.node, w.n, mmBatchRows)
	out, err := exec.CommandContext(ctx, w.psql, "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-h", host, "-p", port, "-U", "postgres", "-d", w.side.env.db, "-c", sql).CombinedOutput()
	if err != nil {
		return fmt.Errorf("psql: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// recover handles a failed statement of rows rows: after an outage of the
// side that began since the connection was opened (or is under way), it
// waits for the outage's end and reconnects; otherwise the error is the
// test's.
func (w *mmWriter) recover(err error, rows int, deadline time.Time) error {
	gen, up := w.side.state()
	select {
	case <-up:
		if gen == w.connGen {
			return fmt.Errorf("%s (no outage of side %s since the connection was opened)", describeErr(err), w.side.name)
		}
	default:
	}
	w.inDoubt += int64(rows)
	select {
	case <-up:
	case <-time.After(time.Until(deadline)):
		return fmt.Errorf("side %s's outage did not end before the deadline (after %s)", w.side.name, describeErr(err))
	}
	if w.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = w.conn.Close(ctx)
		cancel()
		w.conn = nil
	}
	w.reconnects++
	return nil
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, deadline time.Time, cond func() bool) {
	t.Helper()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startMMServer starts a server for logical replication from bin.
func startMMServer(t *testing.T, bin string) *pgserver.Server {
	t.Helper()
	return pgtest.Start(t, pgserver.Options{
		BinDir: bin,
		Settings: map[string]string{
			"wal_level":             "logical",
			"max_replication_slots": "10",
			"max_wal_senders":       "10",
			// Subscribers report their progress every second (default 10 s):
			// the convergence check reads it.
			"wal_receiver_status_interval": "'1s'",
		},
	})
}
