// Package orm drives real ORMs and drivers through the proxy the way
// applications do: rows inserted without ids, ids read back with RETURNING.
// GORM (Go) and node-postgres (JavaScript, tests/orm/node) are covered.
//
//	go test ./tests/orm -v
//
// The node-postgres test needs node and npm in PATH; it fails (does not
// skip) without them.
package orm

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// node is the proxy's --node in these tests.
const node = 1

// The pgEdge layout (docs/compatibility.md).
const (
	epochUnixMs = 1672531200000
	countBits   = 12
	nodeBits    = 10
)

type decoded struct {
	ms    int64 // since the snowflake epoch
	node  int
	count int
}

func decode(id int64) decoded {
	return decoded{ms: id >> (countBits + nodeBits), node: int(id>>countBits) & (1<<nodeBits - 1), count: int(id) & (1<<countBits - 1)}
}

func (d decoded) time() time.Time { return time.UnixMilli(d.ms + epochUnixMs) }

// env is a proxy (--node 1) in front of the shared test server, a fresh
// database with the extension installed through the proxy, and the time
// window in which IDs issued during the test must fall.
type env struct {
	url    string // through the proxy
	direct string // straight to the server
	from   time.Time
	app    *app.App
	closed bool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := pgtest.Shared(t)
	db := pgtest.NewDatabase(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := app.Start(ctx, app.Config{Listen: "127.0.0.1:0", Upstream: srv.URL("postgres"), Node: node,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	e := &env{url: fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", a.Addr(), db), direct: srv.URL(db),
		from: time.Now().Add(-time.Second), app: a}
	t.Cleanup(func() { e.stopProxy(t) })
	c, err := pgx.Connect(ctx, e.url)
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE EXTENSION snowflake"); err != nil {
		t.Fatalf("CREATE EXTENSION snowflake through the proxy: %v", err)
	}
	return e
}

// stopProxy closes the proxy (once): it hands back the rest of its leases
// and raises each sequence to what it issued.
func (e *env) stopProxy(t *testing.T) {
	t.Helper()
	if e.closed {
		return
	}
	e.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.app.Close(ctx); err != nil {
		t.Errorf("close proxy: %v", err)
	}
}

// checkIDs asserts what is guaranteed for IDs issued one after the other on
// one connection for one sequence: each is a snowflake of node 1 issued
// during the test (leases may run a little ahead of the clock: a minute is
// allowed), all are distinct and they strictly increase in issue order.
func (e *env) checkIDs(t *testing.T, what string, ids []int64) {
	t.Helper()
	if len(ids) == 0 {
		t.Fatalf("%s: no ids", what)
	}
	to := time.Now().Add(time.Minute)
	seen := map[int64]bool{}
	for i, id := range ids {
		d := decode(id)
		if id <= 0 || d.node != node || d.time().Before(e.from) || d.time().After(to) {
			t.Errorf("%s: id %d (#%d) is not a snowflake of node %d issued now: ms %d (%s), node %d, count %d",
				what, id, i, node, d.ms, d.time().UTC().Format(time.RFC3339Nano), d.node, d.count)
		}
		if seen[id] {
			t.Errorf("%s: id %d issued twice", what, id)
		}
		seen[id] = true
		if i > 0 && id <= ids[i-1] {
			t.Errorf("%s: id #%d %d is not greater than #%d %d", what, i, id, i-1, ids[i-1])
		}
	}
}
