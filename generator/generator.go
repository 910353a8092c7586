package generator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrClosed is returned by Next after Close.
	ErrClosed = errors.New("generator: closed")
	// ErrNode is returned (wrapped) for a Key whose Node is not in 1..MaxNode.
	ErrNode = errors.New("generator: node out of range 1..1023")
	// ErrExhausted is returned (wrapped) when the ms field would pass MaxMs
	// (the year 2092) or a store grants a lease that does not advance.
	ErrExhausted = errors.New("generator: positions exhausted")
)

// DefaultLeaseDuration is Config.LeaseDuration's default.
const DefaultLeaseDuration = 2 * time.Second

// Config configures a Generator. Zero values of the optional fields are
// documented defaults.
type Config struct {
	// Store reserves windows of positions durably. Required.
	Store LeaseStore
	// Clock gives the current time. If nil, SystemClock is used.
	Clock Clock
	// LeaseDuration is how far past now each lease reaches: a lease asks for
	// positions up to Position(now+LeaseDuration, MaxCount). It also bounds
	// how far IDs may run ahead of the clock. If 0, DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RenewBefore starts a background renewal once now is closer than this
	// to the end of the current lease, so the hot path does not wait for the
	// store. Must be less than LeaseDuration. If 0, LeaseDuration/2 is used.
	RenewBefore time.Duration
	// Logger receives failed background renewals. If nil, slog.Default() is
	// used.
	Logger *slog.Logger
}

// Generator issues IDs for any number of Keys, one allocator per Key. It is
// safe for concurrent use. Create it with New and stop it with Close.
type Generator struct {
	store         LeaseStore
	clock         Clock
	leaseMs       int64
	renewBeforeMs int64
	retryMs       int64 // pause before a failed background renewal is retried
	logger        *slog.Logger

	// allocs is copy-on-write: readers load it without a lock or an
	// allocation, writers (a new Key, rare) copy it under mu. Keys are few
	// (databases x sequences x nodes), so the copy is cheap.
	allocs atomic.Pointer[allocTable]
	closed atomic.Bool

	mu     sync.Mutex // serialises allocs writers; orders wg.Add before Close's Wait
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // running renewals

	stats leaseCounters // stats.go

	// tickets hands out session fences (FenceTicket); a renewal reads it
	// when it starts, so that its lease satisfies every ticket up to there.
	tickets atomic.Uint64
}

// New validates cfg and returns a Generator. It does not contact the store:
// the first Next for a Key takes that Key's first lease.
func New(cfg Config) (*Generator, error) {
	if cfg.Store == nil {
		return nil, errors.New("generator: Config.Store is required")
	}
	if cfg.LeaseDuration < 0 || cfg.RenewBefore < 0 {
		return nil, errors.New("generator: negative LeaseDuration or RenewBefore")
	}
	lease := cfg.LeaseDuration
	if lease == 0 {
		lease = DefaultLeaseDuration
	}
	if lease < time.Millisecond {
		return nil, fmt.Errorf("generator: LeaseDuration %v is below 1ms", lease)
	}
	renew := cfg.RenewBefore
	if renew == 0 {
		renew = lease / 2
	}
	if renew >= lease {
		return nil, fmt.Errorf("generator: RenewBefore %v must be less than LeaseDuration %v", renew, lease)
	}
	g := &Generator{
		store:         cfg.Store,
		clock:         cfg.Clock,
		leaseMs:       lease.Milliseconds(),
		renewBeforeMs: renew.Milliseconds(),
		logger:        cfg.Logger,
	}
	if g.clock == nil {
		g.clock = SystemClock{}
	}
	if g.logger == nil {
		g.logger = slog.Default()
	}
	g.logger = g.logger.With("component", "generator")
	g.retryMs = max(1, g.renewBeforeMs/10)
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.allocs.Store(newAllocTable(nil))
	return g, nil
}

// Next returns the next ID for key, with key.Node in the node bits, for a
// caller whose session sees the sequence's INCREMENT BY as inc (see
// Request.Inc). IDs of one Key are strictly increasing. Inside a lease it
// does not wait for the store; it blocks (until ctx is done) only for a
// Key's first lease and when the current lease has no room left. Store
// errors are returned wrapped.
func (g *Generator) Next(ctx context.Context, key Key, inc int64) (int64, error) {
	if g.closed.Load() {
		return 0, ErrClosed
	}
	for {
		a, err := g.lookup(key)
		if err != nil {
			return 0, err
		}
		pos, err := a.next(ctx, inc)
		if errors.Is(err, errRetired) {
			continue // it left the table meanwhile, having issued nothing
		}
		if err != nil {
			return 0, err
		}
		return IDAt(pos, key.Node), nil
	}
}

// TryNext is Next without waiting, for callers that must not block (an
// event loop): ok is false when Next would wait for a lease renewal, which
// has then been started, so that a later call is likely to succeed.
func (g *Generator) TryNext(key Key, inc int64) (id int64, ok bool, err error) {
	if g.closed.Load() {
		return 0, false, ErrClosed
	}
	for {
		a, err := g.lookup(key)
		if err != nil {
			return 0, false, err
		}
		pos, ok, err := a.tryNext(inc)
		if errors.Is(err, errRetired) {
			continue // it left the table meanwhile, having issued nothing
		}
		if !ok || err != nil {
			return 0, false, err
		}
		return IDAt(pos, key.Node), true, nil
	}
}

// FenceTicket fences one caller: IDs of requests that carry the ticket
// (Request.After) come from a lease taken after this call, whose store's
// high-water then reflects every position issued before it by other
// issuers (the SQL shim, an explicit setval), and the allocator continues
// above them: a session that had IDs issued by the shim gets larger IDs
// from the fast path afterwards, as the pgEdge rule gives. Other callers
// go on from the current lease: they need nothing from it, and a fence
// for everyone would let any session make every other one wait for a
// lease renewal at will. It never blocks.
func (g *Generator) FenceTicket() uint64 { return g.tickets.Add(1) }

// allocator returns key's allocator, creating it (slow path).
func (g *Generator) allocator(key Key) (*allocator, error) {
	if key.Node < 1 || key.Node > MaxNode {
		return nil, fmt.Errorf("%w: %d", ErrNode, key.Node)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.allocs.Load()
	if a := t.get(key); a != nil {
		return a, nil
	}
	now := g.clock.NowMs()
	a := &allocator{g: g, key: key, born: now}
	g.allocs.Store(t.with(a, now-idleAllocatorMs))
	return a, nil
}

// idleAllocatorMs is how long after its lease ended an allocator with no
// renewal in flight is dropped from the table, the next time a Key is
// added. Keys come and go (a session's temporary sequences): without this
// the table, which is copied for every new Key, grew with every Key ever
// used (regression). Dropping one is safe: a caller that still holds it
// issues inside its lease or renews it, and a new allocator for its Key
// starts with a first lease, which continues above the store's high-water
// as after a restart.
const idleAllocatorMs = 60_000

// goRenew starts a.renew(r) on a tracked goroutine, unless the Generator is
// closed. Holding mu makes wg.Add happen before Close's Wait.
func (g *Generator) goRenew(a *allocator, r *renewal) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Load() {
		return ErrClosed
	}
	g.wg.Add(1)
	go a.renew(r)
	return nil
}

// Close stops background renewals and waits for running ones to return, or
// for ctx to be done, then seals every Key's lease (nothing more is issued
// from it) and gives the store its last position: a Releaser takes back
// the unused end of the lease, so that a proxy started next continues from
// there and not from the lease's top, ahead of the clock; another store
// gets a Lease call with no room asked for. Failures are logged. Next
// fails with ErrClosed afterwards. After a crash the lease is not given
// back: a restarted proxy starts above its top.
func (g *Generator) Close(ctx context.Context) error {
	g.mu.Lock()
	g.closed.Store(true)
	g.mu.Unlock()
	g.cancel() // renewals in the store see a done context
	done := make(chan struct{})
	go g.waitRenewals(done)
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("generator: close: %w", ctx.Err())
	}
	releaser, _ := g.store.(Releaser)
	for _, a := range g.allocs.Load().all {
		hi := a.hi.Load()
		if hi == 0 {
			continue
		}
		last := a.seal()
		var err error
		switch {
		case releaser != nil:
			err = releaser.Release(ctx, a.key, hi, last)
		case last > a.jumpedTo && last > a.reported:
			_, err = g.store.Lease(ctx, a.key, hi, 0, last)
		}
		if err != nil {
			g.logger.Warn("reporting the last IDs issued failed", "database", a.key.Database,
				"seq", a.key.Seq, "node", a.key.Node, "err", err)
		}
	}
	return nil
}

func (g *Generator) waitRenewals(done chan<- struct{}) {
	g.wg.Wait()
	close(done)
}
