package compat

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

func newService(t *testing.T, url string, node int, log *slog.Logger) *Service {
	t.Helper()
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(Config{ControlURL: url, Logger: log, Node: node, Heartbeat: 100 * time.Millisecond,
		LeaseDuration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

func dbName(t *testing.T, c *testConn) string { return c.Config().Database }

func seqOID(t *testing.T, c *testConn, name string) uint32 {
	return uint32(queryInt(t, c, "SELECT $1::regclass::oid::int8", name))
}

func TestLeaseStore(t *testing.T) {
	url := newDB(t)
	c := connect(t, url)
	install(t, c)
	mustExec(t, c, "CREATE SEQUENCE s INCREMENT 100")
	mustExec(t, c, "SET snowflake.node = 3")
	first := queryInt(t, c, "SELECT snowflake.nextval('s')") // before any lease: S only

	pool, err := pgxpool.New(context.Background(), url+"&synchronous_commit=on")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := NewLeaseStore(func(string) (*pgxpool.Pool, error) { return pool, nil })
	key := generator.Key{Database: dbName(t, c), Seq: seqOID(t, c, "s"), Node: 3}
	ctx := ctxT(t)

	// The first lease starts at S's position, re-tagged with the node.
	want := generator.PositionOf(first) + 1000
	l, err := st.Lease(ctx, key, 0, want)
	if err != nil {
		t.Fatal(err)
	}
	if l.Lo != generator.PositionOf(first) || l.Hi != want {
		t.Fatalf("lease %+v, want Lo %d Hi %d", l, generator.PositionOf(first), want)
	}
	// A renewal without foreign issuance continues where the last ended.
	l2, err := st.Lease(ctx, key, l.Hi, want+10)
	if err != nil || l2.Lo != l.Hi || l2.Hi != want+10 {
		t.Fatalf("renewal %+v %v", l2, err)
	}
	// wantHi at or below the high water still advances by one.
	l3, _ := st.Lease(ctx, key, l2.Hi, 5)
	if l3.Lo != l2.Hi || l3.Hi != l2.Hi+1 {
		t.Fatalf("small lease %+v", l3)
	}
	// The shim for the same node issues above the lease; S keeps up.
	shim := queryInt(t, c, "SELECT snowflake.nextval('s')")
	if generator.PositionOf(shim) <= l3.Hi {
		t.Fatalf("shim id position %d inside lease up to %d", generator.PositionOf(shim), l3.Hi)
	}
	if lv := queryInt(t, c, "SELECT last_value FROM s"); lv != shim {
		t.Fatalf("S.last_value %d, want %d", lv, shim)
	}
	// The next lease sees the shim's issuance.
	l4, _ := st.Lease(ctx, key, l3.Hi, 0)
	if l4.Lo != generator.PositionOf(shim) {
		t.Fatalf("lease after shim %+v, shim position %d", l4, generator.PositionOf(shim))
	}

	// Another node's lease does not push node 3 (no ratchet), though S
	// follows the highest position.
	key9 := key
	key9.Node = 9
	far := l4.Hi + 1_000_000<<12
	if _, err := st.Lease(ctx, key9, 0, far); err != nil {
		t.Fatal(err)
	}
	if generator.PositionOf(queryInt(t, c, "SELECT last_value FROM s")) != far {
		t.Fatal("S did not follow node 9's lease")
	}
	l5, _ := st.Lease(ctx, key, l4.Hi, l4.Hi+5)
	if l5.Lo != l4.Hi || l5.Hi != l4.Hi+5 {
		t.Fatalf("node 3 pushed by node 9: %+v", l5)
	}

	// No shim: a clear error, remembered for a while.
	c2 := connect(t, newDB(t))
	mustExec(t, c2, "CREATE SEQUENCE s")
	pool2, _ := pgxpool.New(context.Background(), c2.Config().ConnString())
	defer pool2.Close()
	st2 := NewLeaseStore(func(string) (*pgxpool.Pool, error) { return pool2, nil })
	k2 := generator.Key{Database: "x", Seq: seqOID(t, c2, "s"), Node: 1}
	if _, err := st2.Lease(ctx, k2, 0, 1); !errors.Is(err, ErrNoShim) {
		t.Fatalf("no shim: %v", err)
	}
	if _, err := st2.Lease(ctx, k2, 0, 1); !errors.Is(err, ErrNoShim) {
		t.Fatalf("no shim (cached): %v", err)
	}
}

// The fast path (Service.Nextval, leases) and the shim for the same
// (sequence, node) never issue the same ID.
func TestServiceAndShimInterleave(t *testing.T) {
	url := newDB(t)
	c := connect(t, url)
	install(t, c)
	mustExec(t, c, "CREATE SEQUENCE s")
	svc := newService(t, url, 5, nil)
	db, oid := dbName(t, c), seqOID(t, c, "s")

	var mu sync.Mutex
	seen := map[int64]string{}
	add := func(id int64, who string) {
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := seen[id]; dup {
			t.Errorf("duplicate %d from %s and %s", id, prev, who)
		}
		seen[id] = who
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last int64
			for i := 0; i < 5000; i++ {
				id, err := nextvalVia(context.Background(), svc, db, oid, 5)
				if err != nil {
					t.Error(err)
					return
				}
				if _, n, _ := generator.Decompose(id); n != 5 {
					t.Errorf("node %d", n)
				}
				if id <= last {
					t.Errorf("fast path not increasing in one goroutine: %d after %d", id, last)
				}
				last = id
				add(id, "fast")
				if i%500 == 0 {
					time.Sleep(50 * time.Millisecond) // let leases expire and renew
				}
			}
		}()
	}
	for g := 0; g < 2; g++ {
		sc := connect(t, url)
		mustExec(t, sc, "SET snowflake.node = 5")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1500; i++ {
				var id int64
				if err := sc.QueryRow(context.Background(), "SELECT snowflake.nextval('s')").Scan(&id); err != nil {
					t.Error(err)
					return
				}
				add(id, "shim")
			}
		}()
	}
	wg.Wait()
	if len(seen) != 4*5000+2*1500 {
		t.Fatalf("%d ids", len(seen))
	}
	// S covers every position issued.
	lv := queryInt(t, c, "SELECT last_value FROM s")
	for id := range seen {
		if generator.PositionOf(id) > generator.PositionOf(lv) {
			t.Fatalf("S.last_value %d below issued %d", lv, id)
		}
	}
}

// A shim session whose transaction began before the lease created the
// high-water sequence H cannot see H and writes only S: the lease must not
// trust H until that transaction is over, then start above what it issued.
func TestLeaseWaitsForOlderTransactions(t *testing.T) {
	url := newDB(t)
	c := connect(t, url)
	install(t, c)
	mustExec(t, c, "CREATE SEQUENCE s")
	old := connect(t, url)
	mustExec(t, old, "SET snowflake.node = 4")
	mustExec(t, old, "BEGIN")
	queryInt(t, old, "SELECT snowflake.nextval('s')")

	pool, err := pgxpool.New(context.Background(), url+"&synchronous_commit=on")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := NewLeaseStore(func(string) (*pgxpool.Pool, error) { return pool, nil })
	st.PendingWait = 300 * time.Millisecond
	key := generator.Key{Database: dbName(t, c), Seq: seqOID(t, c, "s"), Node: 4}
	if _, err := st.Lease(ctxT(t), key, 0, 1); !errors.Is(err, ErrPending) {
		t.Fatalf("lease with an older transaction open: %v", err)
	}
	if queryInt(t, c, "SELECT count(*) FROM pg_class WHERE relname LIKE '\\_hw\\_%'") != 1 {
		t.Fatal("H not created")
	}
	// The old transaction keeps issuing, blind to H.
	var last int64
	for i := 0; i < 100; i++ {
		last = queryInt(t, old, "SELECT snowflake.nextval('s')")
	}
	mustExec(t, old, "COMMIT")
	l, err := st.Lease(ctxT(t), key, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if l.Lo < generator.PositionOf(last) {
		t.Fatalf("lease %+v starts below the old transaction's last id (position %d)", l, generator.PositionOf(last))
	}
	// Now the shim sees H and writes it.
	mustExec(t, old, "SELECT snowflake.nextval('s')")
	if id := queryInt(t, c, "SELECT last_value FROM snowflake._hw_"+itoa(key.Seq)+"_4"); generator.PositionOf(id) <= l.Hi {
		t.Fatalf("H not advanced by the shim: %d", id)
	}

	// Dropping the sequence drops its H (event trigger), so a reused OID
	// cannot inherit it.
	mustExec(t, c, "DROP SEQUENCE s")
	if queryInt(t, c, "SELECT count(*) FROM pg_class WHERE relname LIKE '\\_hw\\_%'") != 0 {
		t.Fatal("H left after DROP SEQUENCE")
	}
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

func TestServiceControlSessions(t *testing.T) {
	url := newDB(t)
	c := connect(t, url)
	svc := newService(t, url, 0, nil)
	p, err := svc.pool(dbName(t, c))
	if err != nil {
		t.Fatal(err)
	}
	var sc string
	if err := p.QueryRow(ctxT(t), "SHOW synchronous_commit").Scan(&sc); err != nil || sc != "on" {
		t.Fatalf("control sessions run with synchronous_commit %q (%v): leases would not be durable", sc, err)
	}
	// Without the shim the fast path declines with a clear error.
	mustExec(t, c, "CREATE SEQUENCE s")
	if _, err := nextvalVia(ctxT(t), svc, dbName(t, c), seqOID(t, c, "s"), 3); !errors.Is(err, ErrNoShim) {
		t.Fatalf("no shim: %v", err)
	}
	if _, err := New(Config{Node: 1024}); err == nil {
		t.Fatal("node 1024 accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := nextvalVia(ctxT(t), svc, dbName(t, c), seqOID(t, c, "s"), 3); err == nil {
		t.Fatal("Nextval after Close")
	}
}
