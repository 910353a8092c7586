package tests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// steppedClock is the system clock moved by a step the test changes.
type steppedClock struct{ stepMs atomic.Int64 }

func (c *steppedClock) NowMs() int64 { return generator.SystemClock{}.NowMs() + c.stepMs.Load() }

// The state model's argument (docs/state-model.md) under everything at
// once, on one server and one sequence: an in-process proxy for node 5
// whose fast-path clock steps forward and back, a proxy binary for node 6
// killed with SIGKILL and started again, direct sessions for both nodes,
// the server itself restarted; clients use SELECT nextval, per-row calls
// (also in transactions rolled back; the per-row path's blocks,
// docs/state-model.md), INSERT ... VALUES and INSERT ... SELECT defaults,
// and COPY in the
// binary, text and csv formats (through a proxy, its rows get the proxy's
// ids, wire/copyin.go; directly, the shim's), on a sequence narrower than a
// snowflake (AS integer). No ID may repeat: none returned twice, no unique
// violation on the table's key, and every row's id distinct from every
// returned one; and on each connection every ID is larger than the one
// before, whichever path issued each (regression: after a kill -9 of a
// proxy, per-row shim IDs came out one millisecond below fast-path IDs
// that preceded them on the same connection).
func TestChaos(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t, pgserver.Options{}) // its own: it is restarted
	db := pgtest.NewDatabase(t, srv)
	bin := proxyBinary(t)
	clock := &steppedClock{}

	a, err := app.Start(context.Background(), app.Config{Listen: "127.0.0.1:0", Upstream: srv.URL("postgres"),
		Node: 5, Logger: testLogger(), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(cancelledContext()) })
	b := &proxyProcess{bin: bin, upstream: srv.URL("postgres"), node: 6, port: mustFreePort(t)}
	b.start(t)
	t.Cleanup(b.kill)

	proxyURL := func(addr string) string {
		return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", addr, db)
	}
	setupCfg := mustParse(t, proxyURL(a.Addr()))
	setupCfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	setup := connectConfig(t, setupCfg)
	mustRun(t, setup, "CREATE EXTENSION snowflake")
	mustRun(t, setup, `CREATE SEQUENCE cs AS integer;
		CREATE TABLE ct (id bigint PRIMARY KEY DEFAULT snowflake.nextval('cs'), src text NOT NULL)`)
	_ = setup.Close(context.Background())

	run := &chaosRun{target: 40_000, done: make(chan struct{})}
	type clientSpec struct {
		name string
		url  func() string
		node int
		mode pgx.QueryExecMode
		opts string
	}
	direct := srv.URL(db)
	specs := []clientSpec{
		{"A cache", func() string { return proxyURL(a.Addr()) }, 5, pgx.QueryExecModeCacheStatement, ""},
		{"A simple", func() string { return proxyURL(a.Addr()) }, 5, pgx.QueryExecModeSimpleProtocol, ""},
		{"A exec", func() string { return proxyURL(a.Addr()) }, 5, pgx.QueryExecModeExec, ""},
		{"B cache", func() string { return proxyURL(b.addr()) }, 6, pgx.QueryExecModeCacheStatement, ""},
		{"B simple", func() string { return proxyURL(b.addr()) }, 6, pgx.QueryExecModeSimpleProtocol, ""},
		{"direct 5", func() string { return direct }, 5, pgx.QueryExecModeCacheStatement, "-c snowflake.node=5"},
		{"direct 6", func() string { return direct }, 6, pgx.QueryExecModeSimpleProtocol, "-c snowflake.node=6"},
	}
	clients := make([]*chaosClient, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		c := &chaosClient{run: run, name: s.name, url: s.url, node: s.node, mode: s.mode, opts: s.opts}
		clients[i] = c
		wg.Go(c.loop)
	}

	// The events, each once the run has issued its share of the target.
	events := []struct {
		at   float64
		what string
		do   func() error
	}{
		{0.10, "kill -9 the node 6 proxy", func() error { b.kill(); return nil }},
		{0.20, "start the node 6 proxy again", func() error { return b.startErr() }},
		{0.30, "step node 5's clock 3 s ahead", func() error { clock.stepMs.Store(3000); return nil }},
		{0.45, "restart the server", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			return srv.Restart(ctx)
		}},
		{0.60, "step node 5's clock 5 s back", func() error { clock.stepMs.Store(-5000); return nil }},
		{0.75, "kill -9 the node 6 proxy and start it again", func() error { b.kill(); return b.startErr() }},
		{0.85, "step node 5's clock back to the system's", func() error { clock.stepMs.Store(0); return nil }},
	}
	deadline := time.Now().Add(5 * time.Minute)
	for _, ev := range events {
		if err := run.waitFor(int64(ev.at*float64(run.target)), deadline); err != nil {
			close(run.done)
			wg.Wait()
			t.Fatalf("before %q: %v", ev.what, err)
		}
		if err := ev.do(); err != nil {
			close(run.done)
			wg.Wait()
			t.Fatalf("%s: %v", ev.what, err)
		}
		t.Logf("%d IDs: %s", run.issued.Load(), ev.what)
	}
	err = run.waitFor(run.target, deadline)
	close(run.done)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}

	// Where each ID came from, to name both sides of a duplicate.
	from := map[int64]string{}
	var all []int64
	add := func(id int64, who string) {
		if prev, dup := from[id]; dup {
			t.Errorf("duplicate id %d %v: %s and %s", id, decodeID(id), prev, who)
		}
		from[id] = who
		all = append(all, id)
	}
	errs, inserted := 0, 0
	for _, c := range clients {
		if c.uniqueViolation != nil {
			t.Errorf("%s: a unique violation on the ids: %v", c.name, c.uniqueViolation)
		}
		if c.backwards > 0 {
			t.Errorf("%s: %d IDs below their connection's previous ID, the first %s after %s",
				c.name, c.backwards, decodeID(c.firstBack[1]), decodeID(c.firstBack[0]))
		}
		for _, id := range append(slices.Clone(c.selected), c.inserted...) {
			if got := int(id>>12) & 1023; got != c.node {
				t.Fatalf("%s: id %d has node %d, want %d", c.name, id, got, c.node)
			}
		}
		for _, id := range c.selected {
			add(id, c.name+" SELECT")
		}
		errs += c.errors
		inserted += len(c.inserted)
	}
	check := connectConfig(t, mustParse(t, direct))
	rows, err := check.Query(context.Background(), "SELECT id, src FROM ct")
	if err != nil {
		t.Fatal(err)
	}
	inTable := map[int64]bool{}
	for rows.Next() {
		var id int64
		var src string
		if err := rows.Scan(&id, &src); err != nil {
			t.Fatal(err)
		}
		inTable[id] = true
		add(id, src+" row")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range clients {
		for _, id := range c.inserted {
			if !inTable[id] {
				t.Fatalf("%s: INSERT returned id %d but its row is not in the table", c.name, id)
			}
		}
	}
	if len(inTable) == 0 || len(all) == len(inTable) || inserted == 0 {
		t.Fatalf("%d rows, %d ids: the run proves nothing", len(inTable), len(all))
	}
	// The per-row calls ran with cs's blocks of both nodes there
	// (docs/state-model.md, "Blocks"): every ID of the locked path, and of
	// a block, moves the node's B.
	for _, node := range []int{5, 6} {
		var drawn bool
		if err := check.QueryRow(context.Background(), `SELECT pg_sequence_last_value(
			format('snowflake._blk_%s_%s', 'cs'::regclass::oid, $1::int)::regclass) IS NOT NULL`, node).Scan(&drawn); err != nil || !drawn {
			t.Fatalf("node %d's per-row calls ran without cs's blocks (%v)", node, err)
		}
	}
	t.Logf("%d ids (%d rows), all distinct; %d statements failed during the outages", len(all), len(inTable), errs)
}

func mustParse(t *testing.T, url string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

type chaosRun struct {
	target int64
	issued atomic.Int64
	done   chan struct{}
}

// waitFor polls until n IDs were issued, with a deadline.
func (r *chaosRun) waitFor(n int64, deadline time.Time) error {
	for r.issued.Load() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d IDs issued by the deadline", r.issued.Load(), n)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	return nil
}

// chaosClient issues IDs in a loop of statement kinds, reconnecting after
// failures (the outages are the point): selected holds the IDs SELECT
// nextval returned, inserted those INSERT ... RETURNING returned (their
// rows are in the table, with COPY's).
type chaosClient struct {
	run  *chaosRun
	name string
	url  func() string
	node int
	mode pgx.QueryExecMode
	opts string

	selected        []int64
	inserted        []int64
	errors          int
	uniqueViolation error

	// last is the latest ID the current connection got (0 after a
	// reconnect); backwards counts IDs below it, firstBack the first pair.
	last      int64
	backwards int
	firstBack [2]int64
}

func (c *chaosClient) loop() {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	for i := 0; ; i++ {
		select {
		case <-c.run.done:
			return
		default:
		}
		if conn == nil {
			cfg, err := pgx.ParseConfig(c.url())
			if err == nil {
				cfg.DefaultQueryExecMode = c.mode
				if c.opts != "" {
					cfg.RuntimeParams["options"] = c.opts
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				conn, err = pgx.ConnectConfig(ctx, cfg)
				cancel()
			}
			c.last = 0 // a new session
			if err != nil {
				conn = nil
				c.errors++
				select {
				case <-c.run.done:
					return
				case <-time.After(20 * time.Millisecond): // retry pacing while a server or proxy is down
				}
				continue
			}
		}
		n, err := c.step(conn, i)
		c.run.issued.Add(int64(n))
		if err != nil {
			c.errors++
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "23505" {
				c.uniqueViolation = err
			}
			_ = conn.Close(context.Background())
			conn = nil
		}
	}
}

// step runs statement kind i and returns how many IDs it issued.
func (c *chaosClient) step(conn *pgx.Conn, i int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src := c.name
	collect := func(into *[]int64, sql string, args ...any) (int, error) {
		ids, err := queryInt64s(ctx, conn, sql, args...)
		*into = append(*into, ids...)
		for _, id := range ids {
			if id <= c.last {
				if c.backwards == 0 {
					c.firstBack = [2]int64{c.last, id}
				}
				c.backwards++
			}
			c.last = id
		}
		return len(ids), err
	}
	switch i % 8 {
	case 7:
		// Per-row calls in a transaction rolled back: the IDs were handed
		// out and must never come again.
		if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
			return 0, err
		}
		n, err := collect(&c.selected, "SELECT snowflake.nextval('cs') FROM generate_series(1, 20)")
		if err != nil {
			return n, err
		}
		_, err = conn.Exec(ctx, "ROLLBACK")
		return n, err
	case 0:
		return collect(&c.selected, "SELECT snowflake.nextval('cs')")
	case 1:
		return collect(&c.selected, "SELECT snowflake.nextval('cs') FROM generate_series(1, 20)")
	case 2:
		return collect(&c.inserted, "INSERT INTO ct (src) VALUES ($1), ($1) RETURNING id", src)
	case 3:
		return collect(&c.inserted, "INSERT INTO ct (src) SELECT $1 FROM generate_series(1, 20) RETURNING id", src)
	case 4:
		// Binary COPY: the proxy appends the ids (wire/copyin.go).
		rows := make([][]any, 50)
		for j := range rows {
			rows[j] = []any{src}
		}
		n, err := conn.CopyFrom(ctx, pgx.Identifier{"ct"}, []string{"src"}, pgx.CopyFromRows(rows))
		return int(n), err
	default:
		// Text and csv COPY.
		sql := "COPY ct (src) FROM STDIN"
		if i%8 == 6 {
			sql += " WITH (FORMAT csv)"
		}
		tag, err := conn.PgConn().CopyFrom(ctx, strings.NewReader(strings.Repeat(src+"\n", 50)), sql)
		return int(tag.RowsAffected()), err
	}
}

// proxyProcess is the proxy binary, run as a child that dies with the test
// binary (SIGKILL on the parent's death).
type proxyProcess struct {
	bin      string
	upstream string
	node     int
	port     int

	mu  sync.Mutex
	cmd *exec.Cmd
}

func (p *proxyProcess) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

func (p *proxyProcess) start(t *testing.T) {
	t.Helper()
	if err := p.startErr(); err != nil {
		t.Fatal(err)
	}
}

// startErr starts the proxy and waits until it accepts connections.
func (p *proxyProcess) startErr() error {
	cmd := exec.Command(p.bin, "--listen", p.addr(), "--upstream", p.upstream,
		"--node", strconv.Itoa(p.node), "--log-level", "warn")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if *proxyLog {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.bin, err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.addr(), time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("proxy on %s not accepting after 30s: %w", p.addr(), err)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
}

// kill sends SIGKILL and reaps the process.
func (p *proxyProcess) kill() {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// proxyBinary builds cmd/snowflake-proxy into the test's directory.
func proxyBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "snowflake-proxy")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/snowflake-proxy").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func mustFreePort(t *testing.T) int {
	t.Helper()
	port, err := pgserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
