package wire

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// waitUntil polls cond (a state the proxy reaches on its own, such as a
// session's end, with no message to wait for) until it holds or 10 s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// proxy runs a Server on a loopback listener in front of srv.
type proxy struct {
	*Server
	addr string
	done chan error
}

func startProxy(t testing.TB, srv *pgserver.Server, cfg Config) *proxy {
	t.Helper()
	p := serveProxy(t, srv, cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
		<-p.done
	})
	return p
}

// serveProxy is startProxy without the Close at cleanup, for the tests of
// Close itself: p.done receives what Serve returns.
func serveProxy(t testing.TB, srv *pgserver.Server, cfg Config) *proxy {
	t.Helper()
	if cfg.Upstream.Address == "" {
		cfg.Upstream = Upstream{Network: "tcp", Address: srv.Addr()}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{Server: s, addr: ln.Addr().String(), done: make(chan error, 1)}
	go func() { p.done <- s.Serve(ln) }()
	return p
}

// url is a connection URL through the proxy.
func (p *proxy) url(srv *pgserver.Server, db string) string {
	host, port, _ := net.SplitHostPort(p.addr)
	return "postgres://" + srv.Superuser() + "@" + host + ":" + port + "/" + db + "?sslmode=disable"
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctxT(t), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func connectPg(t testing.TB, url string) *pgconn.PgConn {
	t.Helper()
	c, err := pgconn.Connect(ctxT(t), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// fakeRewriter recognises a few exact SQL strings.
type fakeRewriter struct {
	mu    sync.Mutex
	plans map[string]*plan.Plan
}

func (f *fakeRewriter) Plan(sql string) *plan.Plan {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.plans[sql]; ok {
		return p
	}
	return plan.Passthrough
}

// fakeSnowflakes issues IDs from an in-memory counter.
type fakeSnowflakes struct {
	next   atomic.Int64
	calls  atomic.Int64
	fail   atomic.Bool
	epoch  atomic.Uint64
	privs  atomic.Uint64
	fences atomic.Int64
	wait   atomic.Bool   // TryNextvalBatch reports that NextvalBatch would wait
	after  atomic.Uint64 // the fence ticket of the latest request
	awaits atomic.Int64  // AwaitBlocks calls
}

func (f *fakeSnowflakes) NextvalBatch(ctx context.Context, db string, node int, reqs []generator.Request) error {
	if f.fail.Load() {
		return io.ErrUnexpectedEOF
	}
	for i := range reqs {
		f.calls.Add(1)
		f.after.Store(reqs[i].After)
		reqs[i].ID = f.next.Add(1)<<12 | int64(node)
	}
	return nil
}

func (f *fakeSnowflakes) TryNextvalBatch(db string, node int, reqs []generator.Request) (bool, error) {
	if f.wait.Load() {
		return false, nil
	}
	err := f.NextvalBatch(context.Background(), db, node, reqs)
	return err == nil, err
}

// CatalogEpochs reports epoch and privs (0 until a test sets them:
// defaults stay with the server).
func (f *fakeSnowflakes) CatalogEpochs(db string) (uint64, uint64) {
	return f.epoch.Load(), f.privs.Load()
}

// AwaitBlocks counts its calls.
func (f *fakeSnowflakes) AwaitBlocks(db string) { f.awaits.Add(1) }

// FenceTicket counts fences; the fake's IDs only grow, so nothing else is
// needed.
func (f *fakeSnowflakes) FenceTicket() uint64 { return uint64(f.fences.Add(1)) }

func (f *fakeSnowflakes) ExtensionSQL(op plan.SlotOp, opts *plan.ExtensionOptions) (string, error) {
	return "DO $$BEGIN RAISE NOTICE 'installed'; END$$", nil
}

// shimSQL is a stand-in for the real shim, enough for wire's tests: the
// mirror checks snowflake._currval exists; invalid values call the server.
const shimSQL = `
CREATE SCHEMA snowflake;
CREATE SEQUENCE snowflake.id_seq;
CREATE FUNCTION snowflake.nextval(s regclass DEFAULT 'snowflake.id_seq') RETURNS int8
  LANGUAGE sql AS $$ SELECT -pg_catalog.nextval(s) $$;
CREATE FUNCTION snowflake._currval(s regclass, v int8) RETURNS int8
  LANGUAGE sql AS $$ SELECT coalesce(v, -1) $$;
`

// nextvalSlot is snowflake.nextval() on the default sequence.
var nextvalSlot = plan.Slot{Op: plan.Nextval, Seq: plan.DefaultSequence, Arg: "'snowflake.id_seq'::regclass"}

// snowflakePlans are plans a real rewriter would give for a few statements.
func snowflakePlans() map[string]*plan.Plan {
	return map[string]*plan.Plan{
		"SELECT snowflake.nextval()": {
			Template:   &plan.Template{Parts: []string{"SELECT ", " AS nextval"}, Slots: []plan.Slot{nextvalSlot}},
			Local:      &plan.Local{Columns: []string{"nextval"}},
			Statements: []plan.Statement{{}},
		},
		"SELECT snowflake.nextval() + $1::int8 * 0 AS x": {
			Template:   &plan.Template{Parts: []string{"SELECT ", " + $1::int8 * 0 AS x"}, Slots: []plan.Slot{nextvalSlot}},
			Statements: []plan.Statement{{}},
			MaxParam:   1,
		},
		"SELECT snowflake.nextval() AS a, $1::text AS b, $2::int8 AS c": {
			Template:   &plan.Template{Parts: []string{"SELECT ", " AS a, $1::text AS b, $2::int8 AS c"}, Slots: []plan.Slot{nextvalSlot}},
			Statements: []plan.Statement{{}},
			MaxParam:   2,
		},
		"CREATE EXTENSION snowflake": {
			Template:   &plan.Template{Parts: []string{"", ""}, Slots: []plan.Slot{{Op: plan.CreateExtension, Ext: &plan.ExtensionOptions{}}}},
			Statements: []plan.Statement{{Tag: "CREATE EXTENSION"}},
			Touches:    plan.TouchCatalog,
		},
		"SET snowflake.node = 9":                               {Statements: []plan.Statement{{}}, Touches: plan.TouchNode},
		"SELECT snowflake.nextval() FROM generate_series(1,3)": plan.Passthrough,
	}
}
