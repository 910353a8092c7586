package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// floors are the floor relays every floor test runs against.
var floors = []struct {
	name  string
	relay floorRelay
}{{"epoll", floorEpoll}, {"io_uring", floorUring}}

// runFloor builds floor from the tree and runs it in front of srv until
// the end of the test.
func runFloor(t *testing.T, ctx context.Context, floor floorRelay, srv *pgserver.Server) (*proc, int) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := floor.build(ctx, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, port, err := floor.start(ctx, bin, t.TempDir(), srv.SocketDir(), srv.Port())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	return p, port
}

// viaConfig is the configuration of a session on url's server through
// 127.0.0.1:port.
func viaConfig(t *testing.T, url string, port int) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host, cfg.Port = "127.0.0.1", uint16(port)
	return cfg
}

// connectVia opens a session on the shared server through 127.0.0.1:port.
func connectVia(t *testing.T, ctx context.Context, url string, port int) *pgx.Conn {
	t.Helper()
	c, err := pgx.ConnectConfig(ctx, viaConfig(t, url, port))
	if err != nil {
		t.Fatalf("connect through the floor relay: %v", err)
	}
	return c
}

// The floor relays carry whole sessions, the startup exchange included, in
// front of the server's Unix socket: concurrent sessions, a result larger
// than one read, and a session that ends while another goes on.
func TestFloorRelayCarriesSessions(t *testing.T) {
	for _, f := range floors {
		t.Run(f.name, func(t *testing.T) { testFloorCarriesSessions(t, f.relay) })
	}
}

func testFloorCarriesSessions(t *testing.T, floor floorRelay) {
	srv := pgtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, port := runFloor(t, ctx, floor, srv)

	url := srv.URL("postgres")
	a := connectVia(t, ctx, url, port)
	defer a.Close(ctx)
	b := connectVia(t, ctx, url, port)

	var pidA, pidB int
	if err := a.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pidA); err != nil {
		t.Fatal(err)
	}
	if err := b.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pidB); err != nil {
		t.Fatal(err)
	}
	if pidA == pidB {
		t.Fatalf("two sessions share backend %d", pidA)
	}

	// 1 MB: many reads and writes of the relay's 64 KiB buffer.
	var big string
	if err := b.QueryRow(ctx, "SELECT repeat('ab', 500000)").Scan(&big); err != nil {
		t.Fatal(err)
	}
	if big != strings.Repeat("ab", 500000) {
		t.Fatalf("large result came back as %d bytes, want 1000000", len(big))
	}

	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := a.QueryRow(ctx, "SELECT $1::int + 1", 41).Scan(&n); err != nil || n != 42 {
		t.Fatalf("session after another ended: %d, %v", n, err)
	}
	c := connectVia(t, ctx, url, port)
	defer c.Close(ctx)
	if err := c.QueryRow(ctx, "SELECT 7").Scan(&n); err != nil || n != 7 {
		t.Fatalf("new session after one ended: %d, %v", n, err)
	}
	if dead, why := p.exited(); dead {
		t.Fatalf("floor relay exited: %v: %s", why, tailFile(p.log, 5))
	}
}

// Regression: a session closed while the same epoll batch also held an
// accept and a stale event of the closed session let the relay read,
// blocking, from the new session's server socket before anything had been
// sent on it: the relay hung until the server's authentication timeout,
// and pgbench runs of the floor column failed with "timeout expired".
// Sessions opened and closed back to back make such batches (and, in the
// io_uring relay, completions of a closed session after its descriptor
// number was reused).
func TestFloorRelaySurvivesSessionChurn(t *testing.T) {
	for _, f := range floors {
		t.Run(f.name, func(t *testing.T) { testFloorSurvivesChurn(t, f.relay) })
	}
}

func testFloorSurvivesChurn(t *testing.T, floor floorRelay) {
	srv := pgtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, port := runFloor(t, ctx, floor, srv)
	cfg := viaConfig(t, srv.URL("postgres"), port)
	cfg.ConnectTimeout = 5 * time.Second
	for i := range 300 {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		var n int
		if err := c.QueryRow(ctx, "SELECT $1::int", i).Scan(&n); err != nil || n != i {
			t.Fatalf("session %d: %d, %v", i, n, err)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatalf("session %d close: %v", i, err)
		}
	}
}
