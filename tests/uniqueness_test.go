package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestUniquenessUnderConcurrencyAcrossARestart is the uniqueness
// check: 16 connections through the proxy and 2 straight to the server (the
// shim), all issuing from ONE sequence for the same node, mixing fast-path
// calls, per-row calls, INSERT ... VALUES and INSERT ... SELECT with a
// snowflake default; the proxy is closed and started again on the same
// address halfway. No ID may repeat, and each client's IDs must increase
// strictly in the order it received them (the pgEdge rule: per sequence and
// node, IDs only grow). A session idle in a transaction since before the
// sequence existed stays open throughout.
func TestUniquenessUnderConcurrencyAcrossARestart(t *testing.T) {
	t.Parallel()
	const (
		node           = 5
		proxyClients   = 16
		directClients  = 2
		restartAfterID = 0.5 // fraction of the target
	)
	target := int64(500_000)
	if testing.Short() {
		target = 50_000
	}
	e := newEnv(t, node)
	e.installExtension(t)
	// A session idle in a transaction from before the sequence existed,
	// as on a busy server: it must hold up neither path.
	idle := e.connectDirect(t)
	mustRun(t, idle, "BEGIN ISOLATION LEVEL REPEATABLE READ")
	mustRun(t, idle, "SELECT count(*) FROM pg_class")
	e.execDirect(t, `CREATE SEQUENCE useq;
		CREATE TABLE uniq_rows (id bigint PRIMARY KEY DEFAULT snowflake.nextval('useq'), client int NOT NULL)`)

	run := &uniquenessRun{
		env:              e,
		target:           target,
		restartAt:        int64(float64(target) * restartAfterID),
		up:               make(chan struct{}),
		restartRequested: make(chan struct{}),
		stop:             make(chan struct{}),
	}
	close(run.up)

	start := time.Now()
	var wg sync.WaitGroup
	clients := make([]*uniquenessClient, proxyClients+directClients)
	for i := range clients {
		c := &uniquenessClient{run: run, index: i, direct: i >= proxyClients, mode: queryExecModes[i%len(queryExecModes)]}
		clients[i] = c
		wg.Add(1)
		go c.loop(t, &wg)
	}
	restartErr := make(chan error, 1)
	go run.restartOnce(restartErr)
	wg.Wait()
	elapsed := time.Since(start)
	close(run.stop) // releases restartOnce if the run ended before it
	if err := <-restartErr; err != nil {
		t.Fatal(err)
	}
	for _, c := range clients {
		if c.err != nil {
			t.Errorf("client %d (%s): %v", c.index, c.describe(), c.err)
		}
	}
	if t.Failed() {
		return
	}

	var all []issued
	for _, c := range clients {
		all = append(all, c.ids...)
	}
	t.Logf("%d IDs from %d proxy and %d direct clients in %s (%.0f IDs/s); proxy restarted after %d IDs; %d reconnects",
		len(all), proxyClients, directClients, elapsed.Round(time.Millisecond), float64(len(all))/elapsed.Seconds(), run.restartAt, run.reconnects.Load())
	if int64(len(all)) < target {
		t.Fatalf("only %d IDs issued, want at least %d", len(all), target)
	}
	if !run.didRestart.Load() {
		t.Fatal("the proxy was never restarted")
	}

	// Per client: strictly increasing in the order received, node bits
	// right. The first violation of each client is shown, and a count of
	// violations by (previous statement, statement) says which paths
	// disagree.
	decreases := map[string]int{}
	for _, c := range clients {
		shown := false
		for i, x := range c.ids {
			if got := decodeID(x.id).Node; got != node {
				t.Fatalf("client %d: ID %d (%s) has node %d, want %d", c.index, x.id, x.op, got, node)
			}
			if i == 0 || x.id > c.ids[i-1].id {
				continue
			}
			p := c.ids[i-1]
			key := fmt.Sprintf("%s after %s", x.op, p.op)
			if p.conn != x.conn {
				key += " across the restart"
			}
			decreases[key]++
			if !shown {
				t.Errorf("client %d (%s): ID #%d %d %v from %s (connection %d) is not greater than the previous %d %v from %s (connection %d)",
					c.index, c.describe(), i, x.id, decodeID(x.id), x.op, x.conn, p.id, decodeID(p.id), p.op, p.conn)
				shown = true
			}
		}
	}
	if len(decreases) > 0 {
		t.Errorf("IDs that did not increase within a client, by statement kinds: %v", decreases)
	}

	// Overall: no duplicates.
	slices.SortFunc(all, func(a, b issued) int { return cmpInt64(a.id, b.id) })
	dups := 0
	for i := 1; i < len(all); i++ {
		if all[i].id == all[i-1].id {
			if dups < 10 {
				t.Errorf("duplicate ID %d %v: client %d %s and client %d %s",
					all[i].id, decodeID(all[i].id), all[i-1].client, all[i-1].op, all[i].client, all[i].op)
			}
			dups++
		}
	}
	if dups > 0 {
		t.Errorf("%d duplicate IDs among %d", dups, len(all))
	}

	// The sequence's last_value covers everything issued from it, once the
	// proxy has stopped (while it runs it trails by up to one lease).
	e.closeProxy(t, cancelledContext())
	direct := e.connectDirect(t)
	last := mustInt64(t, direct, "SELECT last_value FROM useq")
	if maxID := all[len(all)-1].id; last < maxID {
		t.Errorf("useq.last_value = %d %v is below the largest issued ID %d %v", last, decodeID(last), maxID, decodeID(maxID))
	}
	var rows, distinct int64
	if err := direct.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT id) FROM uniq_rows").Scan(&rows, &distinct); err != nil || rows != distinct {
		t.Errorf("uniq_rows: %d rows, %d distinct ids, %v", rows, distinct, err)
	}
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// issued is one ID as a client received it.
type issued struct {
	id     int64
	client int
	conn   int // the client's connection number: 0, then 1 after a reconnect
	op     string
}

// uniquenessRun is the state shared by the clients of one run.
type uniquenessRun struct {
	env       *testEnv
	target    int64
	restartAt int64
	total     atomic.Int64

	mu               sync.Mutex
	up               chan struct{} // closed while a proxy is serving
	generation       int           // proxies started so far minus one
	restartRequested chan struct{}
	requestOnce      sync.Once
	stop             chan struct{}
	didRestart       atomic.Bool
	reconnects       atomic.Int64
}

// count adds n issued IDs and asks for the restart when half are done.
func (r *uniquenessRun) count(n int) {
	if r.total.Add(int64(n)) >= r.restartAt {
		r.requestOnce.Do(func() { close(r.restartRequested) })
	}
}

func (r *uniquenessRun) done() bool { return r.total.Load() >= r.target }

// restartOnce waits for the half-way mark, then closes the proxy at once
// (sessions are cut mid-statement) and starts a new one on the same address.
func (r *uniquenessRun) restartOnce(result chan<- error) {
	select {
	case <-r.restartRequested:
	case <-r.stop:
		result <- nil
		return
	}
	r.mu.Lock()
	r.up = make(chan struct{})
	r.generation++
	r.mu.Unlock()
	err := r.env.restartProxy()
	r.didRestart.Store(err == nil)
	r.mu.Lock()
	close(r.up) // on failure, clients fail to reconnect and report it
	r.mu.Unlock()
	result <- err
}

// uniquenessClient is one connection's worth of work: it cycles through the
// statement kinds until the run has issued enough IDs.
type uniquenessClient struct {
	run    *uniquenessRun
	index  int
	direct bool
	mode   pgx.QueryExecMode
	conn   *pgx.Conn
	connNo int
	gen    int // proxy generation the connection was opened under
	ids    []issued
	err    error
}

func (c *uniquenessClient) describe() string {
	if c.direct {
		return "direct to the server"
	}
	return "through the proxy, " + c.mode.String()
}

// statement kinds: the SQL, and what the proxy does with it.
// The single-call SELECTs are the proxy's fast path; the others go to the
// shim (INSERT VALUES may be served by the fast path too).
var uniquenessOps = []struct{ name, sql string }{
	{"SELECT nextval", "SELECT snowflake.nextval('useq')"},
	{"per-row nextval", "SELECT snowflake.nextval('useq') FROM generate_series(1, 400)"},
	{"INSERT VALUES default", "INSERT INTO uniq_rows (client) VALUES ($1), ($1), ($1), ($1), ($1), ($1), ($1), ($1), ($1), ($1) RETURNING id"},
	{"INSERT SELECT default", "INSERT INTO uniq_rows (client) SELECT $1 FROM generate_series(1, 200) RETURNING id"},
	{"SELECT nextval + $1", "SELECT snowflake.nextval('useq') + $1::int8 * 0"},
}

func (c *uniquenessClient) loop(t *testing.T, wg *sync.WaitGroup) {
	defer wg.Done()
	defer func() {
		if c.conn != nil {
			_ = c.conn.Close(context.Background())
		}
	}()
	ctx := context.Background()
	if err := c.connect(ctx); err != nil {
		c.err = err
		return
	}
	for i := 0; !c.run.done(); i++ {
		op := uniquenessOps[i%len(uniquenessOps)]
		repeat := 1
		if strings.HasPrefix(op.name, "SELECT nextval") {
			repeat = 40 // one ID per round trip: do several
		}
		for r := 0; r < repeat; r++ {
			var args []any
			if strings.Contains(op.sql, "$1") {
				args = []any{int64(c.index)}
			}
			ids, err := queryInt64s(ctx, c.conn, op.sql, args...)
			c.record(ids, op.name)
			if err != nil {
				if err = c.recover(ctx, err); err != nil {
					c.err = fmt.Errorf("%s: %w", op.name, err)
					return
				}
			}
		}
	}
}

func (c *uniquenessClient) record(ids []int64, op string) {
	for _, id := range ids {
		c.ids = append(c.ids, issued{id: id, client: c.index, conn: c.connNo, op: op})
	}
	c.run.count(len(ids))
}

// recover reconnects after an error caused by the proxy restart; any other
// error is returned.
func (c *uniquenessClient) recover(ctx context.Context, err error) error {
	c.run.mu.Lock()
	gen, up := c.run.generation, c.run.up
	c.run.mu.Unlock()
	if c.direct || gen == c.gen {
		return err // not caused by a restart
	}
	<-up
	_ = c.conn.Close(ctx)
	c.conn = nil
	c.connNo++
	c.run.reconnects.Add(1)
	if cerr := c.connect(ctx); cerr != nil {
		return errors.Join(err, cerr)
	}
	return nil
}

func (c *uniquenessClient) connect(ctx context.Context) error {
	c.run.mu.Lock()
	c.gen = c.run.generation
	c.run.mu.Unlock()
	var url string
	if c.direct {
		url = c.run.env.srv.URL(c.run.env.db)
	} else {
		url = c.run.env.proxyURL("postgres")
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.DefaultQueryExecMode = c.mode
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	c.conn = conn
	if c.direct {
		// The shim in a direct session issues for the same node as the proxy.
		_, err = conn.Exec(ctx, fmt.Sprintf("SET snowflake.node = %d", c.run.env.node))
	}
	return err
}
