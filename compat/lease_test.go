package compat

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
)

func newService(t *testing.T, url string, node int, log *slog.Logger) *Service {
	t.Helper()
	return newServiceWith(t, Config{ControlURL: url, Logger: log, Node: node})
}

// newServiceWith is newService with more of cfg: a nil Logger discards,
// Heartbeat and LeaseDuration default to the tests' short ones.
func newServiceWith(t *testing.T, cfg Config) *Service {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 100 * time.Millisecond
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 200 * time.Millisecond
	}
	s, err := New(cfg)
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

func leaseStore(t *testing.T, url string) *LeaseStore {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url+"&synchronous_commit=on")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return NewLeaseStore(func(string) (*pgxpool.Pool, error) { return pool, nil })
}

func TestLeaseStore(t *testing.T) {
	url := newDB(t)
	c := connect(t, url)
	install(t, c)
	mustExec(t, c, "CREATE SEQUENCE s INCREMENT 100")
	mustExec(t, c, "SET snowflake.node = 3")
	first := queryInt(t, c, "SELECT snowflake.nextval('s')") // before any lease: S only

	st := leaseStore(t, url)
	key := generator.Key{Database: dbName(t, c), Seq: seqOID(t, c, "s"), Node: 3}
	ctx := ctxT(t)
	sPos := func() int64 { return generator.PositionOf(queryInt(t, c, "SELECT last_value FROM s")) }

	// The first lease: no high water yet, S's position as the floor.
	want := generator.PositionOf(first) + 1000
	l, err := st.Lease(ctx, key, 0, want, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Lo != 0 || l.Floor != generator.PositionOf(first) || l.Hi != want {
		t.Fatalf("lease %+v, want Lo 0 Floor %d Hi %d", l, generator.PositionOf(first), want)
	}
	// A lease does not move S: S is not dated at the lease's top.
	if sPos() != generator.PositionOf(first) {
		t.Fatalf("S moved by a lease to %d", sPos())
	}
	// A renewal continues where the last ended, and raises S to what was
	// issued from the previous lease (never above that lease's top).
	l2, err := st.Lease(ctx, key, l.Hi, want+10, l.Floor+7)
	if err != nil || l2.Lo != l.Hi || l2.Hi != want+10 {
		t.Fatalf("renewal %+v %v", l2, err)
	}
	if sPos() != l.Floor+7 {
		t.Fatalf("S at %d after issued %d", sPos(), l.Floor+7)
	}
	if _, n, _ := generator.Decompose(queryInt(t, c, "SELECT last_value FROM s")); n != 3 {
		t.Fatalf("S raised with node %d", n)
	}
	// wantHi at or below the high water still advances by one; an issued
	// position past the lease's top is clamped to it.
	l3, err := st.Lease(ctx, key, l2.Hi, 5, l2.Hi+1_000_000)
	if err != nil || l3.Lo != l2.Hi || l3.Hi != l2.Hi+1 {
		t.Fatalf("small lease %+v %v", l3, err)
	}
	if sPos() != l2.Hi {
		t.Fatalf("S at %d, want the previous top %d", sPos(), l2.Hi)
	}

	// A setval (or the shim) above H: the next lease reaches above it.
	mustExec(t, c, "SELECT setval('s', $1)", generator.IDAt(l3.Hi+50, 8))
	l4, _ := st.Lease(ctx, key, l3.Hi, 0, 0)
	if l4.Lo != l3.Hi || l4.Floor != l3.Hi+50 || l4.Hi <= l4.Floor {
		t.Fatalf("lease after setval %+v, want Lo %d Floor %d", l4, l3.Hi, l3.Hi+50)
	}

	// Another node's lease moves neither S nor node 3.
	key9 := key
	key9.Node = 9
	before := sPos()
	if _, err := st.Lease(ctx, key9, 0, l4.Hi+1_000_000<<12, 0); err != nil {
		t.Fatal(err)
	}
	if sPos() != before {
		t.Fatal("S followed node 9's lease")
	}
	l5, _ := st.Lease(ctx, key, l4.Hi, l4.Hi+5, 0)
	if l5.Lo != l4.Hi || l5.Hi != l4.Hi+5 || l5.Floor != before {
		t.Fatalf("node 3 pushed by node 9: %+v", l5)
	}
	// A restarted proxy (no previous lease) continues above H, and S is
	// raised to H: the earlier run may have issued up to it unreported.
	l6, err := st.Lease(ctx, key, 0, l5.Hi+5, 0)
	if err != nil || l6.Lo != l5.Hi || sPos() != l5.Hi {
		t.Fatalf("lease after a restart %+v (%v): S at %d, want Lo and S at %d", l6, err, sPos(), l5.Hi)
	}

	// No shim: a clear error, remembered for a while.
	c2 := connect(t, newDB(t))
	mustExec(t, c2, "CREATE SEQUENCE s")
	st2 := leaseStore(t, c2.Config().ConnString())
	k2 := generator.Key{Database: "x", Seq: seqOID(t, c2, "s"), Node: 1}
	if _, err := st2.Lease(ctx, k2, 0, 1, 0); !errors.Is(err, ErrNoShim) {
		t.Fatalf("no shim: %v", err)
	}
	if _, err := st2.Lease(ctx, k2, 0, 1, 0); !errors.Is(err, ErrNoShim) {
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

	ids := newIDSet(t)
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
				ids.add(id, "fast")
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
				ids.add(id, "shim")
			}
		}()
	}
	wg.Wait()
	if len(ids.seen) != 4*5000+2*1500 {
		t.Fatalf("%d ids", len(ids.seen))
	}
	// S covers every position issued.
	lv := queryInt(t, c, "SELECT last_value FROM s")
	for id := range ids.seen {
		if generator.PositionOf(id) > generator.PositionOf(lv) {
			t.Fatalf("S.last_value %d below issued %d", lv, id)
		}
	}
}

func TestServiceControlSessions(t *testing.T) {
	url := newDB(t)
	c := connect(t, url)
	svc := newService(t, url, 0, nil)
	cp, err := svc.acquirePool(dbName(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.releasePool(cp)
	var sc string
	if err := cp.p.QueryRow(ctxT(t), "SHOW synchronous_commit").Scan(&sc); err != nil || sc != "on" {
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

// Regression: a lease waits for the sequence's lock, and nothing bounded
// that wait: a transaction that altered the sequence and stayed open held
// up the renewal, and every session waiting for it, for good. The lease
// now fails after LeaseStore.Timeout.
func TestLeaseTimesOutOnALockedSequence(t *testing.T) {
	url, locker, db, oid := shimDB(t)
	st := leaseStore(t, url)
	st.Timeout = 200 * time.Millisecond
	mustExec(t, locker, "BEGIN")
	mustExec(t, locker, "ALTER SEQUENCE s INCREMENT 2")
	key := generator.Key{Database: db, Seq: oid, Node: 1}
	done := make(chan error, 1)
	go func() {
		_, err := st.Lease(context.Background(), key, 0, 1, 0) // no deadline of its own
		done <- err
	}()
	select {
	case err := <-done:
		var pe interface{ SQLState() string }
		if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &pe) && pe.SQLState() == "57014") {
			t.Fatalf("lease on a locked sequence: %v, want the lease's timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the lease still waits for the sequence's lock after 30s")
	}
	mustExec(t, locker, "ROLLBACK")
	st.Timeout = 0 // the default: 200 ms is too short for a lease on a busy machine
	if _, err := st.Lease(ctxT(t), key, 0, 1, 0); err != nil {
		t.Fatalf("lease once the lock is gone: %v", err)
	}
}
