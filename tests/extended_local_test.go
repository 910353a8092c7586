package tests

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/compat"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite"
	"github.com/snowflake-proxy/snowflake-proxy/wire"
)

// statsProxy is a proxy assembled as the app does, whose wire.Server is
// at hand for its Stats.
type statsProxy struct {
	*testEnv
	ws   *wire.Server
	svc  *compat.Service
	addr string
}

func newStatsProxy(t *testing.T, node int) *statsProxy {
	t.Helper()
	return newStatsProxyWith(t, node, nil)
}

// newStatsProxyWith is newStatsProxy with adjust applied to the
// wire.Config first.
func newStatsProxyWith(t *testing.T, node int, adjust func(*wire.Config)) *statsProxy {
	t.Helper()
	srv := pgtest.Shared(t)
	e := &testEnv{srv: srv, db: pgtest.NewDatabase(t, srv), node: node}
	svc, err := compat.New(compat.Config{ControlURL: srv.URL("postgres"), Node: node, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := wire.Config{
		Upstream:   wire.Upstream{Network: "tcp", Address: srv.Addr()},
		Rewriter:   rewrite.New(rewrite.Config{}),
		Snowflakes: svc,
		Node:       node,
		Logger:     testLogger(),
	}
	if adjust != nil {
		adjust(&cfg)
	}
	ws, err := wire.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ws.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ws.Close(ctx)
		_ = svc.Close(ctx)
	})
	return &statsProxy{testEnv: e, ws: ws, svc: svc, addr: ln.Addr().String()}
}

func (p *statsProxy) url() string {
	return "postgres://postgres@" + p.addr + "/" + p.db + "?sslmode=disable"
}

func (p *statsProxy) connect(t *testing.T, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(p.url())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	return connectConfig(t, cfg)
}

// In every pgx mode SELECT snowflake.nextval() gives fresh increasing IDs
// of the proxy's node, in and out of transactions; in the default mode
// (Parse and Describe once, then Bind, Describe, Execute, Sync) the proxy
// answers the repeated executions itself.
func TestExtendedLocalPgx(t *testing.T) {
	const node = 11
	p := newStatsProxy(t, node)
	c := p.connect(t, pgx.QueryExecModeSimpleProtocol)
	mustRun(t, c, "CREATE EXTENSION snowflake")
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := p.connect(t, mode)
		ctx := context.Background()
		before := p.ws.Stats().LocalAnswers
		var ids []int64
		for i := 0; i < 20; i++ {
			ids = append(ids, mustInt64(t, conn, "SELECT snowflake.nextval()"))
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			var id int64
			if err := tx.QueryRow(ctx, "SELECT snowflake.nextval()").Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		var cur int64
		if err := tx.QueryRow(ctx, "SELECT snowflake.currval()").Scan(&cur); err != nil {
			t.Fatal(err)
		}
		if cur != ids[len(ids)-1] {
			t.Errorf("currval %d, want %d", cur, ids[len(ids)-1])
		}
		// A failed transaction: the server's 25P02, then recovery.
		if _, err := tx.Exec(ctx, "SELECT 1/0"); err == nil {
			t.Fatal("1/0 succeeded")
		}
		var id int64
		err = tx.QueryRow(ctx, "SELECT snowflake.nextval()").Scan(&id)
		if sqlState(err) != "25P02" {
			t.Fatalf("in failed transaction: %v, want 25P02", err)
		}
		_ = tx.Rollback(ctx)
		ids = append(ids, mustInt64(t, conn, "SELECT snowflake.nextval()"))
		checkIDs(t, "nextval", ids, node)
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				t.Fatalf("ids not increasing: %v", ids)
			}
		}
		local := p.ws.Stats().LocalAnswers - before
		t.Logf("%s: %d local answers", modeName(mode), local)
		if mode == pgx.QueryExecModeCacheStatement && local < 20 {
			t.Errorf("%d local answers in the default mode, want at least 20", local)
		}
	})
}

// pgbench -M prepared through the proxy: every transaction inserts a
// nextval; no errors, no duplicates, and the proxy answered locally.
func TestExtendedLocalPgbench(t *testing.T) {
	bin := filepath.Join(pgtest.Shared(t).BinDir(), "pgbench")
	if !fileExists(bin) {
		bin = pgtest.Tool(t, "pgbench")
	}
	const node = 12
	p := newStatsProxy(t, node)
	c := p.connect(t, pgx.QueryExecModeSimpleProtocol)
	mustRun(t, c, "CREATE EXTENSION snowflake")
	dir := t.TempDir()
	script := filepath.Join(dir, "nextval.sql")
	if err := os.WriteFile(script, []byte("SELECT snowflake.nextval();\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(p.addr)
	before := p.ws.Stats().LocalAnswers
	const clients, txs = 4, 2000
	cmd := exec.Command(bin, "-n", "-M", "prepared", "-f", script, "-t", strconv.Itoa(txs), "-c", strconv.Itoa(clients),
		"-h", host, "-p", port, "-U", "postgres", p.db)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pgbench: %v\n%s", err, out)
	}
	local := p.ws.Stats().LocalAnswers - before
	if local < clients*txs*9/10 {
		t.Fatalf("%d local answers for %d transactions\n%s", local, clients*txs, out)
	}
	// Values: a script that keeps them, through the proxy, fast path.
	mustRun(t, c, "CREATE TABLE ids (id int8 PRIMARY KEY)")
	ins := filepath.Join(dir, "insert.sql")
	if err := os.WriteFile(ins, []byte("INSERT INTO ids VALUES (snowflake.nextval());\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(bin, "-n", "-M", "prepared", "-f", ins, "-t", "500", "-c", strconv.Itoa(clients),
		"-h", host, "-p", port, "-U", "postgres", p.db)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pgbench insert: %v\n%s", err, out)
	}
	if n := mustInt64(t, c, "SELECT count(DISTINCT id) FROM ids"); n != clients*500 {
		t.Fatalf("%d distinct ids, want %d", n, clients*500)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
