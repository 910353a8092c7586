package generator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var testKey = Key{Database: "db", Seq: 16384, Node: 7}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTestGen returns a Generator on a FakeClock at 100ms with a 10ms lease
// renewed in the last 5ms, closed at the end of the test.
func newTestGen(t *testing.T, store LeaseStore) (*Generator, *FakeClock) {
	t.Helper()
	clock := NewFakeClock(100)
	g, err := New(Config{Store: store, Clock: clock, LeaseDuration: 10 * time.Millisecond,
		RenewBefore: 5 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	return g, clock
}

// settle waits for renewals started by calls that have returned. Only for
// tests with no Next running concurrently.
func settle(g *Generator) { g.wg.Wait() }

func mustNext(t *testing.T, g *Generator, key Key) int64 {
	t.Helper()
	id, err := g.Next(context.Background(), key, 1)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	if _, node, _ := Decompose(id); node != key.Node {
		t.Fatalf("id %d has node %d, want %d", id, node, key.Node)
	}
	return id
}

// mustNextAfter issues one ID for key in a batch that carries ticket
// (Request.After): it comes from a lease taken after the ticket.
func mustNextAfter(t *testing.T, g *Generator, key Key, ticket uint64) int64 {
	t.Helper()
	reqs := []Request{{Seq: key.Seq, Inc: 1, After: ticket}}
	if err := g.NextBatch(context.Background(), key.Database, key.Node, reqs); err != nil {
		t.Fatalf("NextBatch after ticket %d: %v", ticket, err)
	}
	return reqs[0].ID
}

func wantPos(t *testing.T, id int64, ms int64, count int) {
	t.Helper()
	if got := PositionOf(id); got != Position(ms, count) {
		t.Fatalf("id at %d:%d, want %d:%d", got>>CountBits, got&MaxCount, ms, count)
	}
}

func TestNewValidates(t *testing.T) {
	s := NewMemStore()
	for name, cfg := range map[string]Config{
		"no store":            {},
		"negative lease":      {Store: s, LeaseDuration: -time.Second},
		"negative renew":      {Store: s, RenewBefore: -time.Second},
		"renew not below":     {Store: s, LeaseDuration: time.Second, RenewBefore: time.Second},
		"renew above default": {Store: s, RenewBefore: 3 * time.Second},
		"lease below 1ms":     {Store: s, LeaseDuration: time.Microsecond},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	g, err := New(Config{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	if g.leaseMs != 2000 || g.renewBeforeMs != 1000 {
		t.Fatalf("defaults: lease %dms, renew %dms", g.leaseMs, g.renewBeforeMs)
	}
	if _, ok := g.clock.(SystemClock); !ok {
		t.Fatalf("default clock %T", g.clock)
	}
}

func TestInvalidNode(t *testing.T) {
	g, _ := newTestGen(t, NewMemStore())
	for _, node := range []int{0, -1, 1024} {
		if _, err := g.Next(context.Background(), Key{Node: node}, 1); !errors.Is(err, ErrNode) {
			t.Errorf("node %d: err %v, want ErrNode", node, err)
		}
	}
}

func TestFirstLease(t *testing.T) {
	s := NewMemStore()
	g, _ := newTestGen(t, s)
	wantPos(t, mustNext(t, g, testKey), 100, 0)
	wantPos(t, mustNext(t, g, testKey), 100, 1)
	if s.Leases() != 1 || s.HighWater(testKey) != Position(110, MaxCount) {
		t.Fatalf("leases %d, high-water %d", s.Leases(), s.HighWater(testKey))
	}
	// Another node of the same sequence is another stream with its own lease.
	other := testKey
	other.Node = 8
	wantPos(t, mustNext(t, g, other), 100, 0)
	if s.Leases() != 2 {
		t.Fatalf("leases %d, want 2", s.Leases())
	}
}

// A restarted proxy resumes above the durable high-water, even when it is
// ahead of the clock.
func TestResumeAboveHighWater(t *testing.T) {
	s := NewMemStore()
	s.SetHighWater(testKey, Position(5000, 7))
	g, _ := newTestGen(t, s)
	wantPos(t, mustNext(t, g, testKey), 5000, 8)
}

func TestClockBackwards(t *testing.T) {
	g, clock := newTestGen(t, NewMemStore())
	wantPos(t, mustNext(t, g, testKey), 100, 0)
	clock.Set(50)
	wantPos(t, mustNext(t, g, testKey), 100, 1)
	clock.Set(101)
	wantPos(t, mustNext(t, g, testKey), 101, 0)
}

// A renewal with nobody issuing in between extends the window: the
// allocator continues from its last position.
func TestRenewalSeamless(t *testing.T) {
	s := NewMemStore()
	g, clock := newTestGen(t, s)
	mustNext(t, g, testKey) // lease (0, 110:4095]
	clock.Set(106)          // within RenewBefore of 110
	wantPos(t, mustNext(t, g, testKey), 106, 0)
	settle(g)
	if s.Leases() != 2 || s.HighWater(testKey) != Position(116, MaxCount) {
		t.Fatalf("leases %d, high-water %d", s.Leases(), s.HighWater(testKey))
	}
	wantPos(t, mustNext(t, g, testKey), 106, 1)
}

// After foreign issuance (the shim issued above our lease), the renewal's Lo
// is not our previous Hi and the allocator jumps above it.
func TestRenewalJumpsAboveForeignIssuance(t *testing.T) {
	s := NewMemStore()
	g, clock := newTestGen(t, s)
	mustNext(t, g, testKey)
	foreign := s.IssueForeign(testKey) // 111:0
	clock.Set(106)
	wantPos(t, mustNext(t, g, testKey), 106, 0) // still inside the old lease
	settle(g)
	if got := mustNext(t, g, testKey); PositionOf(got) != foreign+1 {
		t.Fatalf("after jump: %d, want position %d", PositionOf(got), foreign+1)
	}
}

// blockingStore lets the test hold Lease calls after the first one.
type blockingStore struct {
	*MemStore
	entered chan struct{}
	release chan struct{}
}

func newBlockingStore() *blockingStore {
	b := &blockingStore{MemStore: NewMemStore(), entered: make(chan struct{}, 10), release: make(chan struct{})}
	first := true
	b.BeforeLease = func(ctx context.Context, _ Key, _, _ int64) error {
		if first { // only renewals run here, one at a time
			first = false
			return nil
		}
		b.entered <- struct{}{}
		select {
		case <-b.release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b
}

type result struct {
	id  int64
	err error
}

func goNext(ctx context.Context, g *Generator) <-chan result {
	ch := make(chan result, 1)
	go func() {
		id, err := g.Next(ctx, testKey, 1)
		ch <- result{id, err}
	}()
	return ch
}

// When the clock has passed the lease, Next waits for the renewal instead of
// issuing outside the lease, and resumes once it is granted.
func TestBlocksWhenLeaseExhausted(t *testing.T) {
	s := newBlockingStore()
	g, clock := newTestGen(t, s)
	mustNext(t, g, testKey) // lease up to 110:4095
	clock.Set(200)
	ctx, cancel := context.WithCancel(context.Background())
	impatient := goNext(ctx, g)
	<-s.entered // the renewal is in the store
	waiting := goNext(context.Background(), g)
	select {
	case r := <-waiting:
		t.Fatalf("Next returned %v while the renewal was held", r)
	default:
	}
	cancel()
	if r := <-impatient; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled Next: %v", r)
	}
	close(s.release)
	r := <-waiting
	if r.err != nil {
		t.Fatal(r.err)
	}
	wantPos(t, r.id, 200, 0)
	if s.Leases() != 2 { // single flight: both callers shared one renewal
		t.Fatalf("leases %d, want 2", s.Leases())
	}
}

// More than 4096 IDs per ms (here INCREMENT 4096: one per ms) exhaust the
// window before the clock does. IDs run ahead of the clock by at most the
// lease length; beyond that each renewal grants one more position.
func TestRunAheadBoundedByLease(t *testing.T) {
	s := NewMemStore()
	g, _ := newTestGen(t, s)
	for ms := int64(100); ms <= 113; ms++ {
		id, err := g.Next(context.Background(), testKey, 4096)
		if err != nil {
			t.Fatal(err)
		}
		wantPos(t, id, ms, 0)
		// Dated after the clock: the store held its millisecond before it
		// was issued (allocator.uncovered).
		if ms > 100 && s.Issued(testKey)>>CountBits < ms {
			t.Fatalf("ID at %d issued while the store held only %s", ms, posString(s.Issued(testKey)))
		}
	}
}

// Positions dated after the clock reach the store before they are issued,
// once per millisecond: after a restart the generator continues above the
// dead run's lease top, ahead of the clock, and a shim ID the session gets
// next is dated by the clock and above the store's record only.
// Regression: 1,886 of 619,345 IDs of the chaos test came out below their
// connection's previous ID.
func TestAheadOfClockReportedBeforeIssued(t *testing.T) {
	s := NewMemStore()
	s.SetHighWater(testKey, Position(105, 0)) // a dead run's lease top
	g, clock := newTestGen(t, s)              // the clock reads 100
	leases := 0
	for i := 0; i < 2*FastPathCounts; i++ {
		id, err := g.Next(context.Background(), testKey, 1)
		if err != nil {
			t.Fatal(err)
		}
		pos := PositionOf(id)
		if pos>>CountBits <= clock.NowMs() {
			t.Fatalf("call %d: %s is not ahead of the clock", i, posString(pos))
		}
		if held := s.Issued(testKey); held>>CountBits < pos>>CountBits {
			t.Fatalf("call %d: %s issued while the store held only %s", i, posString(pos), posString(held))
		}
		leases = s.Leases()
	}
	// The first lease (its jump to 105:0 is held as issued), one report
	// for millisecond 106, and the background renewal that the lease's
	// near end (110) starts.
	if leases != 3 {
		t.Fatalf("%d leases for two milliseconds ahead", leases)
	}
}

func TestStoreErrorsPropagate(t *testing.T) {
	boom := errors.New("boom")
	s := NewMemStore()
	g, clock := newTestGen(t, s)

	s.SetLeaseError(boom)
	if _, err := g.Next(context.Background(), testKey, 1); !errors.Is(err, boom) {
		t.Fatalf("first lease error: %v", err)
	}
	s.SetLeaseError(nil)
	wantPos(t, mustNext(t, g, testKey), 100, 0)

	// A failed background renewal does not fail Next while the lease has
	// room; the next Next in the renewal zone retries it.
	s.SetLeaseError(boom)
	clock.Set(106)
	wantPos(t, mustNext(t, g, testKey), 106, 0)
	settle(g)
	before := s.Leases()
	wantPos(t, mustNext(t, g, testKey), 106, 1) // within the retry pause
	settle(g)
	if s.Leases() != before {
		t.Fatalf("retried within the pause: %d leases, want %d", s.Leases(), before)
	}
	s.SetLeaseError(nil)
	clock.Set(107)
	mustNext(t, g, testKey)
	settle(g)
	if s.HighWater(testKey) != Position(117, MaxCount) {
		t.Fatalf("background retry did not renew: high-water %d", s.HighWater(testKey))
	}

	// With the lease gone, the error reaches the caller.
	s.SetLeaseError(boom)
	clock.Set(500)
	if _, err := g.Next(context.Background(), testKey, 1); !errors.Is(err, boom) {
		t.Fatalf("blocking renewal error: %v", err)
	}
}

// Eight goroutines on one key with the clock moving, short leases and
// foreign issuance: every ID unique, each goroutine's IDs increasing, none
// equal to a foreign position, all covered by the store's high-water.
func TestConcurrentNext(t *testing.T) {
	s := NewMemStore()
	g, clock := newTestGen(t, s)
	const workers, perWorker = 8, 3000
	ids := make([][]int64, workers)
	var foreign []int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				if w == 0 && i%300 == 0 {
					clock.Advance(3 * time.Millisecond)
				}
				if w == 1 && i%500 == 0 {
					foreign = append(foreign, s.IssueForeign(testKey))
				}
				id, err := g.Next(context.Background(), testKey, 1)
				if err != nil {
					t.Error(err)
					return
				}
				ids[w] = append(ids[w], id)
			}
		})
	}
	wg.Wait()
	seen := make(map[int64]bool, workers*perWorker)
	for _, p := range foreign {
		seen[IDAt(p, testKey.Node)] = true
	}
	hw := s.HighWater(testKey)
	for w, list := range ids {
		for i, id := range list {
			if seen[id] {
				t.Fatalf("duplicate id %d", id)
			}
			seen[id] = true
			if i > 0 && id <= list[i-1] {
				t.Fatalf("worker %d: id %d after %d", w, id, list[i-1])
			}
			if PositionOf(id) > hw {
				t.Fatalf("id %d outside every lease (high-water %d)", id, hw)
			}
		}
	}
}

func TestCloseStopsRenewals(t *testing.T) {
	s := newBlockingStore()
	g, clock := newTestGen(t, s)
	mustNext(t, g, testKey)
	clock.Set(106)
	last := mustNext(t, g, testKey) // starts a background renewal, held in the store
	<-s.entered
	clock.Set(200)
	waiting := goNext(context.Background(), g)

	closed := make(chan error, 1)
	go func() { closed <- g.Close(context.Background()) }()
	// Once the renewal gave up, Close reports what was issued since the
	// last lease: a store call that the test lets through.
	<-s.entered
	close(s.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got, want := s.Issued(testKey), PositionOf(last); got != want {
		t.Fatalf("Close reported issued position %d, want the last ID's %d", got, want)
	}
	if r := <-waiting; !errors.Is(r.err, context.Canceled) && !errors.Is(r.err, ErrClosed) {
		t.Fatalf("Next waiting during Close: %v", r)
	}
	leases := s.Leases()
	if _, err := g.Next(context.Background(), testKey, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if s.Leases() != leases {
		t.Fatal("store called after Close")
	}
	if err := g.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Close waited for the renewal (wg); give its goroutine the few
	// instructions left after wg.Done to exit, without sleeping.
	for i := 0; renewGoroutines() > 0; i++ {
		if i == 10000 {
			t.Fatal("renewal goroutine left after Close")
		}
		runtime.Gosched()
	}
}

// Close gives up when its context ends before a renewal that ignores
// cancellation returns.
func TestCloseDeadline(t *testing.T) {
	s := NewMemStore()
	release := make(chan struct{})
	entered := make(chan struct{})
	s.BeforeLease = func(context.Context, Key, int64, int64) error {
		close(entered)
		<-release
		return nil
	}
	g, _ := newTestGen(t, s)
	done := goNext(context.Background(), g)
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close: %v", err)
	}
	close(release)
	<-done
}

func renewGoroutines() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "generator.(*allocator).renew(")
}

// SystemClock follows the wall clock (to the ms, allowing for the two reads
// straddling a ms boundary).
func TestSystemClock(t *testing.T) {
	for range 3 {
		before := time.Now().UnixMilli() - EpochUnixMs
		got := SystemClock{}.NowMs()
		after := time.Now().UnixMilli() - EpochUnixMs
		if got < before-1 || got > after+1 {
			t.Fatalf("NowMs %d outside [%d, %d]", got, before, after)
		}
	}
}

// A fence (a setval or ALTER SEQUENCE, which may lower what the store
// holds) makes the generator report a position dated after the clock
// again, even in a millisecond it reported before the fence (regression:
// it took the earlier report as still holding).
func TestAheadOfClockReportedAgainAfterFence(t *testing.T) {
	s := NewMemStore()
	s.SetHighWater(testKey, Position(105, 0))
	g, _ := newTestGen(t, s)              // the clock reads 100
	for i := 1; i < FastPathCounts; i++ { // 105:1 .. 105:3071
		if _, err := g.Next(context.Background(), testKey, 1); err != nil {
			t.Fatal(err)
		}
	}
	id, err := g.Next(context.Background(), testKey, 1) // the first of 106
	if err != nil {
		t.Fatal(err)
	}
	wantPos(t, id, 106, 0)
	before := s.Leases()
	id = mustNextAfter(t, g, testKey, g.FenceTicket())
	wantPos(t, id, 106, 1)
	if s.Leases()-before != 2 || s.Issued(testKey) < Position(106, 1) {
		t.Fatalf("after the fence: %d leases, store holds %s; want the fenced lease and one report of 106:1",
			s.Leases()-before, posString(s.Issued(testKey)))
	}
}

// A report a caller waits for is sent even when an earlier one reached as
// far: a batch refused on an event loop (TryNextBatch) had its top reported
// and then was not issued; after a fence reset what the store is known to
// hold, a single ID below that top waited for a renewal that skipped the
// report as nothing new, again and again (regression: the renewals never
// ended).
func TestCoverReportedAfterAnUnusedOne(t *testing.T) {
	s := NewMemStore()
	s.SetHighWater(testKey, Position(105, 0))
	leases := 0
	s.BeforeLease = func(context.Context, Key, int64, int64) error {
		if leases++; leases > 20 {
			return errors.New("20 leases: the renewals do not end")
		}
		return nil
	}
	g, _ := newTestGen(t, s) // the clock reads 100
	wantPos(t, mustNext(t, g, testKey), 105, 1)
	// A batch whose top is in 106: refused (its report is started), and
	// never retried.
	if ok, err := g.TryNextBatch(testKey.Database, testKey.Node, batch(testKey.Seq, 1, FastPathCounts)); ok || err != nil {
		t.Fatalf("TryNextBatch ahead of the store: %v, %v; want a refusal", ok, err)
	}
	settle(g)
	if s.Issued(testKey) != Position(106, 1) {
		t.Fatalf("store holds %s, want the refused batch's top 106:1", posString(s.Issued(testKey)))
	}
	wantPos(t, mustNextAfter(t, g, testKey, g.FenceTicket()), 105, 2)
}

// Positions that each take a millisecond (INCREMENT below 1) lie ahead of
// the clock whatever it reads, so each batch is reported before it is
// issued. The position was computed again from the clock after the report:
// when a report took a millisecond or more, the new position lay a
// millisecond further and needed another report, and so on (regression:
// a session spun in leases for minutes on a loaded machine). Here every
// lease takes a millisecond of the fake clock.
func TestReportOfPositionsAheadEndsWhenLeasesAreSlow(t *testing.T) {
	s := NewMemStore()
	g, clock := newTestGen(t, s)
	s.BeforeLease = func(context.Context, Key, int64, int64) error {
		clock.Advance(time.Millisecond)
		return nil
	}
	mustNext(t, g, testKey)
	settle(g)
	for round := 0; round < 5; round++ {
		clock.Advance(10 * time.Millisecond) // the statements in between: the clock passed the last ID
		before := s.Leases()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		reqs := batch(testKey.Seq, -1, 3)
		err := g.NextBatch(ctx, testKey.Database, testKey.Node, reqs)
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v after %d leases", round, err, s.Leases()-before)
		}
		settle(g)
		if n := s.Leases() - before; n > 3 {
			t.Fatalf("round %d: %d leases for one batch", round, n)
		}
		if held := s.Issued(testKey); PositionOf(reqs[2].ID) > held {
			t.Fatalf("round %d: %s issued while the store held only %s", round, posString(PositionOf(reqs[2].ID)), posString(held))
		}
	}
}
