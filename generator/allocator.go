package generator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// allocator issues the positions of one Key inside its current lease.
//
// The hot path is lock-free: the last issued position is one atomic word
// advanced by compare-and-swap, and the lease end (hi) another. Invariants:
//
//   - only a renewal writes hi, and only one renewal runs at a time;
//   - hi only grows; a renewal that must jump (foreign issuance) raises last
//     to Lo or Floor before it publishes the new hi. An issuer that read the
//     old hi can only issue p <= old hi, and its CAS fails if the jump came
//     first; an issuer that read the new hi also sees the jump. So every
//     issued position lies in a lease and above anything issued by others
//     in its range.
type allocator struct {
	g    *Generator
	key  Key
	born int64 // ms when it was made (Generator.allocator)

	last atomic.Int64 // last issued position (or the jump target)
	hi   atomic.Int64 // end of the current lease, inclusive; 0 before the first

	renewing atomic.Bool  // a renewal is in flight: spares the hot path a.mu
	retryAt  atomic.Int64 // ms; no background renewal before this after a failure
	// failUntil (ms): after a renewal that failed slowly (the store waited,
	// as compat's does while a lease is pending), callers that need a new
	// lease fail at once with failErr until this time, instead of each
	// waiting as long for the next attempt (slowFail).
	failUntil atomic.Int64
	failErr   atomic.Pointer[error]

	// ticketDone is Generator.tickets as read at the start of the latest
	// successful fenced renewal: it satisfies the tickets up to it.
	// ticketWant is the highest ticket a caller waits for; while it is
	// above ticketDone the next renewal is fenced.
	ticketDone atomic.Uint64
	ticketWant atomic.Uint64

	mu     sync.Mutex
	flight *renewal // the renewal in flight, shared by everyone waiting
	// retired: the allocator left the table (Generator.allocator) and
	// starts no renewal; a caller that still holds it looks its Key up
	// again (errRetired). Under mu.
	retired bool

	// jumpedTo is the position last was raised to by the latest jump
	// (lease): last equals it until an ID is issued above it. reported is
	// the highest issued position passed to the store. Both are owned by
	// the renewal in flight.
	jumpedTo int64
	reported int64

	// covered is the highest position the store is known to hold as
	// issued (the sequence's last_value in compat): a report, a floor or a
	// jump. coverWant is the highest one a caller waits to see covered
	// before it issues a position dated after the clock (see uncovered);
	// it lies in the lease, so the next renewal reports it. Both only
	// grow (raiseTo) but for a fenced lease's reset of covered.
	covered   atomic.Int64
	coverWant atomic.Int64
}

// uncovered reports whether issuing position p at now must first wait
// for a renewal that reports it: p is dated after the clock, and after the
// millisecond of what the store holds. The server's shim issues above
// what the store holds (S), at the later of its clock (which the
// generator's does not run ahead of) and S's millisecond, with a count the
// generator never uses or above every lease: its next ID is larger than
// p unless p's millisecond is after both. Without this a shim ID that the
// same session gets next would be smaller (regression: after a proxy
// restart the fast path continues above the dead proxy's lease top, up to
// a lease ahead of the clock, and per-row shim IDs came out one
// millisecond below fast-path IDs that preceded them on the same
// connection). It costs one round trip per millisecond that IDs run
// ahead of the clock, and nothing while they follow it.
func (a *allocator) uncovered(p, now int64) bool {
	ms := p >> CountBits
	return ms > now && ms > a.covered.Load()>>CountBits
}

// raiseTo raises v to x unless it holds as much already.
func raiseTo(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if cur >= x || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// raiseToU64 is raiseTo for an atomic.Uint64.
func raiseToU64(v *atomic.Uint64, x uint64) {
	for {
		cur := v.Load()
		if cur >= x || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// seal ends issuing from the current lease: last is moved to the lease's
// end with a compare-and-swap, so an issuer racing with it either issued
// before (and its position is returned) or finds no room. It returns the
// last position issued (or jumped to) before the seal.
func (a *allocator) seal() int64 {
	for {
		last, hi := a.last.Load(), a.hi.Load()
		if last >= hi || a.last.CompareAndSwap(last, hi) {
			return last
		}
	}
}

// clockWaitMs bounds how long a renewal waits for the clock.
const clockWaitMs = 10

// awaitClockPast waits, a few ms at most, until the clock has passed the
// millisecond of floor when the next position would otherwise be dated
// after the clock: a floor in the shim's counts of the current
// millisecond leaves the generator only the next one, and a shim ID that
// the same session gets next, dated by the server's clock, would be
// smaller. Further ahead (a setval to the future) waiting would not help.
func (a *allocator) awaitClockPast(floor int64) {
	ms := floor >> CountBits
	if floor&MaxCount < FastPathCounts-1 || ms-a.g.clock.NowMs() >= clockWaitMs {
		return
	}
	deadline := time.Now().Add(clockWaitMs * time.Millisecond)
	for a.g.clock.NowMs() <= ms && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
}

// renewal is one Lease call; err is valid once done is closed.
type renewal struct {
	need int64 // position the starter is blocked on (0: background)
	done chan struct{}
	err  error
}

// next issues the next position for a caller whose session sees INCREMENT
// BY inc. It waits for the store only when the lease has no room for that
// position.
func (a *allocator) next(ctx context.Context, inc int64) (int64, error) {
	// One clock read per call (it is most of the cost, see SystemClock); a CAS
	// retry reuses it, which the rule allows: it only ever moves forward.
	now := a.g.clock.NowMs()
	for {
		hi := a.hi.Load()
		last := a.last.Load()
		p := NextFast(last, now, inc)
		if p <= hi && a.uncovered(p, now) {
			raiseTo(&a.coverWant, p)
			if err := a.await(ctx, 0); err != nil {
				return 0, err
			}
			continue // with the same now, as take (batch.go) explains
		}
		if p <= hi {
			if !a.last.CompareAndSwap(last, p) {
				continue
			}
			if now+a.g.renewBeforeMs >= hi>>CountBits && !a.renewing.Load() {
				a.renewSoon(now)
			}
			return p, nil
		}
		if err := a.await(ctx, p); err != nil {
			return 0, err
		}
		now = a.g.clock.NowMs()
	}
}

// tryNext is next without waiting: ok is false when next would wait for a
// lease (the lease used up, or a report), and the renewal it would wait
// for has been started; in fail-fast mode (failUntil) it returns that
// error and starts nothing.
//
// Its loop repeats next's on purpose: with the loop in a function both
// call, BenchmarkNextParallel was much slower (bench/README.md, "Figures
// behind design choices").
func (a *allocator) tryNext(inc int64) (int64, bool, error) {
	now := a.g.clock.NowMs()
	for {
		hi := a.hi.Load()
		last := a.last.Load()
		p := NextFast(last, now, inc)
		if p > hi || a.uncovered(p, now) {
			if err := a.failingFast(); err != nil {
				return 0, false, err
			}
			if p <= hi {
				raiseTo(&a.coverWant, p)
			}
			_, err := a.start(p)
			return 0, false, err
		}
		if !a.last.CompareAndSwap(last, p) {
			continue
		}
		if now+a.g.renewBeforeMs >= hi>>CountBits && !a.renewing.Load() {
			a.renewSoon(now)
		}
		return p, true, nil
	}
}

// awaitTicket waits for a fenced renewal that started after ticket was
// handed out, so that its lease reflects everything issued before it. A
// renewal already in flight may have asked the store too early: then
// another one is started.
func (a *allocator) awaitTicket(ctx context.Context, ticket uint64) error {
	for a.ticketDone.Load() < ticket {
		a.wantTicket(ticket)
		if err := a.await(ctx, 0); err != nil {
			return err
		}
	}
	return nil
}

// ticketPending reports whether a caller holding ticket must wait for a
// renewal, and records the ticket for that renewal.
func (a *allocator) ticketPending(ticket uint64) bool {
	if ticket > a.ticketDone.Load() {
		a.wantTicket(ticket)
		return true
	}
	return false
}

// wantTicket records that a caller waits for ticket.
func (a *allocator) wantTicket(ticket uint64) { raiseToU64(&a.ticketWant, ticket) }

// renewSoon starts a background renewal unless one failed very recently.
func (a *allocator) renewSoon(now int64) {
	if now < a.retryAt.Load() {
		return
	}
	// ErrClosed only: the next Next reports it.
	_, _ = a.start(0)
}

// await starts a renewal for position need (or joins the one in flight)
// and waits for it. The renewal itself runs under the Generator's context,
// so one caller giving up does not fail it for the others.
func (a *allocator) await(ctx context.Context, need int64) error {
	if err := a.failingFast(); err != nil {
		return err
	}
	r, err := a.start(need)
	if err != nil {
		return err
	}
	a.g.stats.waits.Add(1)
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("generator: waiting for a lease for %v: %w", a.key, ctx.Err())
	}
}

// failingFast returns the error of the last slow failed renewal while
// callers must not wait for another (failUntil), nil otherwise.
func (a *allocator) failingFast() error {
	if a.g.clock.NowMs() < a.failUntil.Load() {
		if p := a.failErr.Load(); p != nil {
			return *p
		}
	}
	return nil
}

// slowFailMs: a renewal failing after at least this long puts the allocator
// in fail-fast mode for as long again.
const slowFailMs = 250

// errRetired is start's answer for an allocator that left the table.
var errRetired = errors.New("generator: allocator retired")

// retire takes the allocator out of use when it was made and its lease
// ended before the millisecond endedBefore and no renewal is in flight:
// from then on it starts none, so that no lease is ever taken from an
// allocator outside the table (Close seals and releases only those in
// it). It reports whether it did.
func (a *allocator) retire(endedBefore int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.flight == nil && max(a.hi.Load()>>CountBits, a.born) < endedBefore {
		a.retired = true
	}
	return a.retired
}

// start returns the renewal in flight, starting one if there is none.
//
// The renewal is published under mu and its goroutine started after:
// goRenew takes the Generator's mu, which is held while allocators
// retire (they take mu), so holding both here would deadlock.
func (a *allocator) start(need int64) (*renewal, error) {
	a.mu.Lock()
	if a.flight != nil {
		r := a.flight
		a.mu.Unlock()
		return r, nil
	}
	if a.retired {
		a.mu.Unlock()
		return nil, errRetired
	}
	r := &renewal{need: need, done: make(chan struct{})}
	a.flight = r
	a.renewing.Store(true)
	a.mu.Unlock()
	if err := a.g.goRenew(a, r); err != nil {
		a.finish(r, err) // closed: those who joined r meanwhile get the error too
		return nil, err
	}
	return r, nil
}

// finish ends renewal r with err: those waiting for it return, and the
// next start begins another.
func (a *allocator) finish(r *renewal, err error) {
	a.mu.Lock()
	a.flight = nil
	a.renewing.Store(false)
	a.mu.Unlock()
	r.err = err
	close(r.done)
}

// renew runs one renewal on its own goroutine and publishes the outcome.
func (a *allocator) renew(r *renewal) {
	defer a.g.wg.Done()
	ticket := a.g.tickets.Load()
	began := a.g.clock.NowMs()
	fenced := a.ticketWant.Load() > a.ticketDone.Load()
	err := a.lease(a.g.ctx, r.need, fenced)
	a.g.stats.renewals.Add(1)
	if err == nil {
		// Only a fenced lease satisfies tickets: one that started before a
		// caller recorded its ticket (ticketWant) was not.
		if fenced {
			raiseToU64(&a.ticketDone, ticket)
		}
	}
	if err != nil {
		a.g.stats.failures.Add(1)
		now := a.g.clock.NowMs()
		if took := now - began; took >= slowFailMs {
			a.failErr.Store(&err)
			a.failUntil.Store(now + took)
		}
		a.retryAt.Store(now + a.g.retryMs)
		a.g.logger.Warn("lease renewal failed", "database", a.key.Database,
			"seq", a.key.Seq, "node", a.key.Node, "err", err)
	}
	a.finish(r, err)
}

// lease takes the next lease from the store and installs it; the lease
// covers at least position need. Only one runs at a time per allocator
// (start's single flight). fenced: a ticket asked for it; then, and for
// the first lease, the allocator continues above the lease's Floor.
func (a *allocator) lease(ctx context.Context, need int64, fenced bool) error {
	store, key := a.g.store, a.key
	prevHi := a.hi.Load()
	if prevHi >= MaxPosition {
		return fmt.Errorf("generator: %v: %w", key, ErrExhausted)
	}
	// A lease reaches LeaseDuration past now, which bounds how far IDs run
	// ahead of the clock. When they already ran past that (a setval to a
	// future snowflake, more than 4096 IDs per ms, INCREMENT >= 4096 at
	// more than 1000 IDs/s), a blocked caller still needs its position: ask
	// for exactly that position. The store then records the last position
	// really issued, so a shim call that follows continues right after it
	// as the pgEdge rule would, instead of skipping a reserved remainder
	// (equivalence suite, increment.sql); the price is a store round trip
	// per ID while IDs run that far ahead. The extension has no bound at
	// all there; sleeping for the clock would stall clients.
	// At least one past the previous lease: a store that lost its record of
	// it (a failover to a standby that lagged) is raised above everything
	// this allocator may have issued, instead of granting less.
	want := Position(a.g.clock.NowMs()+a.g.leaseMs, MaxCount)
	want = min(max(want, need, prevHi+1), MaxPosition)
	issued := a.last.Load()
	if issued <= a.jumpedTo || issued <= a.reported {
		issued = 0 // nothing issued since the jump or the last report
	}
	if cover := min(a.coverWant.Load(), prevHi); cover > a.covered.Load() {
		// A caller waits for this report (uncovered); after a fence it
		// may repeat an earlier one.
		issued = max(issued, cover)
	}
	l, err := store.Lease(ctx, key, prevHi, want, issued)
	if err != nil {
		return fmt.Errorf("generator: lease for %v: %w", key, err)
	}
	l.Hi = min(l.Hi, MaxPosition)
	if l.Hi <= l.Lo || l.Hi <= prevHi || l.Hi <= l.Floor {
		return fmt.Errorf("generator: lease for %v: store granted (%d, %d] after %d: %w",
			key, l.Lo, l.Hi, prevHi, ErrExhausted)
	}
	a.reported = max(a.reported, issued)
	if fenced {
		// A setval or ALTER SEQUENCE may have lowered what the store holds.
		a.covered.Store(0)
	}
	raiseTo(&a.covered, max(issued, l.Floor))
	var jump int64
	if l.Lo != prevHi {
		// Someone else issued (or reserved) positions since our last lease:
		// continue above them. With Lo == prevHi the window simply extends.
		jump = l.Lo
	}
	if l.Floor > jump && (l.Floor > prevHi || fenced || prevHi == 0) {
		// Above the previous lease's top, the floor is what the shim
		// issued with every count once that lease had ended (or a setval):
		// the new window must start above it. Below it the shim kept to
		// its own counts, and the floor is a matter of order only: the
		// pgEdge rule continues above the sequence on a first lease, and a
		// session that fenced gets larger IDs than the shim gave it.
		jump = l.Floor
		a.awaitClockPast(jump)
	}
	if jump > 0 {
		for {
			last := a.last.Load()
			if last >= jump {
				break
			}
			if a.last.CompareAndSwap(last, jump) {
				a.jumpedTo = jump
				break
			}
		}
		// The store raised the sequence to a jump above Lo (compat's
		// _lease: to H when another run moved it), as it holds Floor.
		raiseTo(&a.covered, jump)
	}
	a.hi.Store(l.Hi)
	return nil
}
