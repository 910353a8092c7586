package generator

import (
	"context"
	"errors"
	"fmt"
)

// Request is one ID of a batch: the calls of one statement execution that
// the proxy serves together (NextBatch).
type Request struct {
	Seq uint32 // pg_class OID of the sequence
	// Inc is the sequence's INCREMENT BY (pg_sequence.seqincrement) as the
	// caller's session sees it: the extension reads it on every call, so
	// an ALTER SEQUENCE applies from the next call on, and inside the
	// altering transaction already. Below 1 every ID takes the next
	// millisecond (see Next in rule.go).
	Inc int64
	// After is a ticket of FenceTicket, 0 for none: the ID comes from a
	// lease taken after it was handed out. The requests of one batch carry
	// the same ticket.
	After uint64
	ID    int64 // the result

	pos  int64 // the position, while the batch is computed
	done bool  // handled with an earlier request of the same sequence
}

// NextBatch fills the ID of every request with the next ID of its sequence
// in database for node, in order, as the calls of one statement evaluated
// at one instant: the clock is read once, so within the batch a sequence's
// count grows by its INCREMENT and the ms moves only when the count would
// pass 4095 (INCREMENT 100 at a fresh ms gives counts 0, 100, 200). The
// requests of one sequence are issued together, so no other issuer's ID
// falls between them. On error some IDs may have been issued and lost
// (they are never issued again); the caller discards the whole batch.
func (g *Generator) NextBatch(ctx context.Context, database string, node int, reqs []Request) error {
	if g.closed.Load() {
		return ErrClosed
	}
	now := g.clock.NowMs()
	if _, err := g.eachSequence(ctx, stepTake, database, node, now, reqs); err != nil {
		return err
	}
	for i := range reqs {
		reqs[i].ID = IDAt(reqs[i].pos, node)
	}
	return nil
}

// TryNextBatch is NextBatch without waiting, for callers that must not
// block (an event loop): ok is false when NextBatch would wait for a lease
// renewal, which has then been started. A batch that is not ok issued
// nothing, unless a concurrent caller used up a lease between the check
// and the issue (then a few positions are lost, never issued twice), so a
// caller that retries with NextBatch sees the same IDs a single call
// would have given.
func (g *Generator) TryNextBatch(database string, node int, reqs []Request) (ok bool, err error) {
	if g.closed.Load() {
		return false, ErrClosed
	}
	now := g.clock.NowMs()
	multi := false
	for i := range reqs {
		if reqs[i].Seq != reqs[0].Seq {
			multi = true
			break
		}
	}
	if multi {
		// Check every sequence before issuing from any, so that a renewal
		// one of them needs does not cost the others their positions.
		if ok, err := g.eachSequence(context.Background(), stepReady, database, node, now, reqs); !ok || err != nil {
			return false, err
		}
	}
	if ok, err := g.eachSequence(context.Background(), stepTryTake, database, node, now, reqs); !ok || err != nil {
		return false, err
	}
	for i := range reqs {
		reqs[i].ID = IDAt(reqs[i].pos, node)
	}
	return true, nil
}

// batchStep is what eachSequence does with each sequence of a batch.
type batchStep uint8

const (
	stepTake    batchStep = iota // allocator.take: issue, waiting if need be
	stepTryTake                  // allocator.tryTake: issue without waiting
	stepReady                    // allocator.ready: check without issuing
)

// eachSequence applies step to the requests of reqs sequence by sequence,
// in the order of each sequence's first request (each step handles all
// requests of its sequence and marks them done). It stops at the first
// step that is not ok or fails. ctx is used by stepTake only.
func (g *Generator) eachSequence(ctx context.Context, step batchStep, database string, node int, now int64, reqs []Request) (bool, error) {
	for i := range reqs {
		reqs[i].done = false
	}
	for i := range reqs {
		if reqs[i].done {
			continue
		}
		ok := true
		for {
			a, err := g.lookup(Key{Database: database, Seq: reqs[i].Seq, Node: node})
			if err != nil {
				return false, err
			}
			switch step {
			case stepTake:
				err = a.take(ctx, now, reqs, i)
			case stepTryTake:
				ok, err = a.tryTake(now, reqs, i)
			default:
				ok, err = a.ready(now, reqs, i)
			}
			if errors.Is(err, errRetired) {
				continue // it left the table meanwhile, having issued nothing
			}
			if !ok || err != nil {
				return false, err
			}
			break
		}
	}
	return true, nil
}

// lookup returns key's allocator, creating it on first use.
func (g *Generator) lookup(key Key) (*allocator, error) {
	if a := g.allocs.Load().get(key); a != nil {
		return a, nil
	}
	return g.allocator(key)
}

// positions applies the rule at now to the requests of reqs[from:] for a's
// sequence, in order, starting from last; it marks them done, records
// their positions and returns the last one.
func (a *allocator) positions(now, last int64, reqs []Request, from int) int64 {
	p := last
	for j := from; j < len(reqs); j++ {
		if r := &reqs[j]; r.Seq == a.key.Seq {
			p = NextFast(p, now, r.Inc)
			r.pos, r.done = p, true
		}
	}
	return p
}

// take issues the positions of a's requests in reqs[from:] (see
// positions) with one compare-and-swap, waiting for the store when the
// lease has no room for all of them. After a wait for room the clock is
// read again: a lease may have moved it (compat holds it back to the
// server's), and the rule gives positions above last for any now. Not
// after a wait for a report (uncovered): positions that each take a
// millisecond (INCREMENT below 1) lie ahead of every reading, and one
// taken after the report would need another, and so on for as long as a
// report took a millisecond or more (regression: a session spun in
// leases for minutes on a busy machine). The position reported is
// covered, whatever the clock says by then.
func (a *allocator) take(ctx context.Context, now int64, reqs []Request, from int) error {
	if err := a.awaitTicket(ctx, reqs[from].After); err != nil {
		return err
	}
	for {
		hi := a.hi.Load()
		last := a.last.Load()
		p := a.positions(now, last, reqs, from)
		if p <= hi && a.uncovered(p, now) {
			raiseTo(&a.coverWant, p)
			if err := a.await(ctx, 0); err != nil {
				return err
			}
			continue
		}
		if p <= hi {
			if !a.last.CompareAndSwap(last, p) {
				continue
			}
			if now+a.g.renewBeforeMs >= hi>>CountBits && !a.renewing.Load() {
				a.renewSoon(now)
			}
			return nil
		}
		if err := a.await(ctx, p); err != nil {
			return err
		}
		now = a.g.clock.NowMs()
	}
}

// tryTake is take without waiting: ok is false when take would wait, and
// the renewal it would wait for has been started.
func (a *allocator) tryTake(now int64, reqs []Request, from int) (bool, error) {
	if a.ticketPending(reqs[from].After) {
		return false, a.startFor(0)
	}
	for {
		hi := a.hi.Load()
		last := a.last.Load()
		p := a.positions(now, last, reqs, from)
		if p > hi {
			return false, a.startFor(p)
		}
		if a.uncovered(p, now) {
			raiseTo(&a.coverWant, p)
			return false, a.startFor(p)
		}
		if !a.last.CompareAndSwap(last, p) {
			continue
		}
		if now+a.g.renewBeforeMs >= hi>>CountBits && !a.renewing.Load() {
			a.renewSoon(now)
		}
		return true, nil
	}
}

// ready reports whether a could issue its requests of reqs[from:] now
// without waiting; when not, it starts the renewal that would be waited
// for (unless failing fast, whose error it returns).
func (a *allocator) ready(now int64, reqs []Request, from int) (bool, error) {
	if a.ticketPending(reqs[from].After) {
		return false, a.startFor(0)
	}
	hi := a.hi.Load()
	p := a.positions(now, a.last.Load(), reqs, from)
	if p > hi {
		return false, a.startFor(p)
	}
	if a.uncovered(p, now) {
		raiseTo(&a.coverWant, p)
		return false, a.startFor(p)
	}
	return true, nil
}

// startFor starts (or joins) a renewal for position need without waiting
// for it, unless the allocator fails fast.
func (a *allocator) startFor(need int64) error {
	if err := a.failingFast(); err != nil {
		return err
	}
	if _, err := a.start(need); err != nil {
		return fmt.Errorf("generator: %v: %w", a.key, err)
	}
	return nil
}
