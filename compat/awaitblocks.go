package compat

import (
	"sync"
	"time"
)

// Blocks after a session's own DDL, where the shim has no event triggers.
//
// Where the shim has its event triggers, the DDL that names a sequence in a
// snowflake.nextval default makes its per-row blocks itself
// (docs/state-model.md, "Blocks made with the DDL"). Without them (a shim
// installed by a non-superuser, as on managed servers) only the catalog
// watch makes them, at its next check: a script's INSERT ... SELECT right
// after its CREATE TABLE was planned before, and ran every row in the slow
// path. A session through the proxy that ran DDL therefore waits, before
// its next statement that may evaluate defaults in the server (an INSERT,
// COPY FROM, EXECUTE or DO: wire/defaults.go), for one run of the watch's
// makeBlocks begun after the DDL committed (AwaitBlocks).

// awaitBlocksMax bounds that wait: a watch that is not connected makes no
// run, and the statement then goes on without blocks, as before.
const awaitBlocksMax = 500 * time.Millisecond

// blockRuns counts a watch's runs of makeBlocks; waiters wake at the end
// of each.
type blockRuns struct {
	mu      sync.Mutex
	started uint64        // runs begun
	ended   uint64        // runs ended
	wake    chan struct{} // closed at the end of a run, then replaced
}

func (r *blockRuns) begin() {
	r.mu.Lock()
	r.started++
	r.mu.Unlock()
}

func (r *blockRuns) end() {
	r.mu.Lock()
	r.ended++
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
	r.mu.Unlock()
}

// next returns the number of ended runs after which a run begun after
// this call has ended (runs are one at a time: one under way ends first).
func (r *blockRuns) next() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started + 1
}

// wait returns a channel closed at the end of the next run, nil when
// target runs have ended.
func (r *blockRuns) wait(target uint64) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended >= target {
		return nil
	}
	if r.wake == nil {
		r.wake = make(chan struct{})
	}
	return r.wake
}

// AwaitBlocks implements wire.Snowflakes: it wakes database's catalog watch
// (starting one if there is none) and waits, at most awaitBlocksMax, until
// it has made the per-row blocks of what the catalog holds now.
func (s *Service) AwaitBlocks(database string) { s.awaitBlocks(database, awaitBlocksMax) }

func (s *Service) awaitBlocks(database string, max time.Duration) {
	v, ok := s.watches.Load(database)
	if !ok {
		s.startWatch(database)
		if v, ok = s.watches.Load(database); !ok {
			return // closing
		}
	}
	w := v.(*catalogWatch)
	w.use.mark()
	target := w.runs.next()
	select {
	case w.nudge <- struct{}{}:
	default:
	}
	timer := time.NewTimer(max)
	defer timer.Stop()
	for {
		ch := w.runs.wait(target)
		if ch == nil {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			return
		case <-s.ctx.Done():
			return
		}
	}
}
