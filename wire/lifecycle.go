package wire

import (
	"context"
	"errors"
	"time"
)

// How sessions end on the proxy's initiative: at the end of Close's grace
// (errShutdownCut), after Config.IdleClientTimeout (errIdleCut), and what
// is left on the server when a client goes away mid-statement.
//
// A cut never writes to the client from another goroutine: the session's
// writers change hands between its pumps, the event loop and its own
// goroutine without wmu. cut records the reason, cancels the session's
// context and wakes whatever relays it (read deadlines for the pumps,
// shutdown(SHUT_RD) of the descriptors an event loop polls); the server
// pump starts no new batch once a cut is recorded, so the client's stream
// stops at a message boundary; when everything has stopped, the session's
// goroutine writes the FATAL ErrorResponse under a write deadline of
// cutWrite (tellCut), cancels a statement still running on the server
// (cancelStatement) and closes both connections.

const (
	// cutWrite bounds writing the FATAL of a cut to the client, and the
	// writes of a pump that is still relaying when the cut comes.
	cutWrite = time.Second
	// cutWait is how long Close waits for cut sessions to end by
	// themselves before it closes their connections.
	cutWait = 2 * cutWrite
)

// errCut ends the server pump at the start of a batch after a cut.
var errCut = errors.New("session cut")

// cut ends the session with e, told to the client at the end (tellCut).
// It reports false when the session was already cut.
func (ss *session) cut(e *Error) bool {
	if !ss.sh.cutErr.CompareAndSwap(nil, e) {
		return false
	}
	ss.cancel()
	ss.connMu.Lock()
	defer ss.connMu.Unlock()
	now := time.Now()
	_ = ss.client.SetReadDeadline(now)
	_ = ss.client.SetWriteDeadline(now.Add(cutWrite))
	if ss.server != nil {
		_ = ss.server.SetDeadline(now)
	}
	// In the loop: both ends see end of input and the loop hands the
	// session back; leaveLoop then applies the deadlines of a cancelled
	// session, and the client's end can still be written.
	if ss.rel != nil {
		ss.rel.Shutdown(true)
	}
	return true
}

// tellCut sends the client the FATAL of a cut once the session's relay has
// stopped, unless the client may not be at a message boundary (a server
// message was cut short, a write failed) or already got a FATAL. It
// reports whether the FATAL was written.
func (ss *session) tellCut(e *Error) bool {
	if ss.sh.cw == nil || ss.sp.outBroken || ss.sh.fatalSent.Load() || ss.sh.sawFatal.Load() {
		return false
	}
	ss.connMu.Lock()
	if ss.aborted {
		ss.connMu.Unlock()
		return false
	}
	_ = ss.client.SetWriteDeadline(time.Now().Add(cutWrite))
	ss.connMu.Unlock()
	return ss.sh.fatal(e) == nil
}

// cutAll cuts every session at the end of Close's grace and waits, at most
// cutWait, until none is left (idle is closed then).
func (s *Server) cutAll(idle <-chan struct{}) {
	s.mu.Lock()
	n, left := 0, len(s.sessions)
	for ss := range s.sessions {
		if ss.cut(errShutdownCut) {
			n++
		}
	}
	s.mu.Unlock()
	if left == 0 {
		return
	}
	s.log.Warn("shutdown grace ended: terminating sessions", "sessions", n)
	t := time.NewTimer(cutWait)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}

// busy reports whether a statement is outstanding on the server: something
// was forwarded whose ReadyForQuery has not been relayed yet. It also
// returns the last transaction status.
func (sh *shared) busy() (bool, byte) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.track {
		return !sh.q.empty() || sh.dirty || sh.hiddenActive.Load(), sh.txStatus
	}
	return sh.syncs.Load() != sh.readies, sh.txStatus
}

// cancelStatement sends the server a CancelRequest for the session when a
// statement is still outstanding while the session ends without the
// server having ended it: otherwise the backend runs it to its end,
// holding its locks, although nobody will read the result. Once per
// session.
func (ss *session) cancelStatement() {
	if ss.cancelSent || len(ss.backendKey) == 0 || !ss.sh.relaying.Load() || ss.sh.serverLost.Load() || ss.sh.sawFatal.Load() {
		return
	}
	if b, _ := ss.sh.busy(); !b {
		return
	}
	ss.cancelSent = true
	ctx, cancel := context.WithTimeout(context.Background(), ss.cfg.DialTimeout)
	defer cancel()
	if err := ss.srv.sendCancel(ctx, ss.backendPID, ss.backendKey); err != nil {
		ss.log.Warn("cancel of the statement left running failed", logError, err)
		return
	}
	ss.srv.stats.endCancels.Add(1)
	ss.log.Debug("statement left running cancelled")
}

// Idle sessions (Config.IdleClientTimeout).
//
// No clock is read on the relay path: one reaper goroutine ticks every
// idlePeriod and looks at each relaying session's message counter
// (shared.msgs, which the client steps advance anyway, in the pumps and
// in the event loops alike) and at whether a statement is outstanding
// (busy). A session seen quiet with the same counter on ticks spanning the
// timeout has been idle at least that long: it cannot turn busy without a
// client message. A late tick only makes the cut later.

// idlePeriod is the reaper's tick for timeout d: an eighth of it, within
// 1 ms .. 1 s. A session is cut between d and d plus two ticks after its
// client went quiet.
func idlePeriod(d time.Duration) time.Duration {
	return min(max(d/8, time.Millisecond), time.Second)
}

// startReaper starts the idle reaper once, when a timeout is set (s.mu
// held).
func (s *Server) startReaper() {
	if s.reaping || s.idleTimeout.Load() <= 0 {
		return
	}
	s.reaping = true
	s.wg.Add(1)
	go s.reap()
}

// SetLimits changes MaxClients and IdleClientTimeout while the server runs
// (a reload): a lower MaxClients refuses new sessions only, and a new
// timeout applies from the reaper's next tick. Negative values are
// ignored.
func (s *Server) SetLimits(maxClients int, idle time.Duration) {
	if maxClients >= 0 {
		s.maxClients.Store(int64(maxClients))
	}
	if idle >= 0 {
		s.idleTimeout.Store(int64(idle))
		s.mu.Lock()
		if !s.closing {
			s.startReaper()
		}
		s.mu.Unlock()
	}
}

func (s *Server) reap() {
	defer s.wg.Done()
	d := time.Duration(s.idleTimeout.Load())
	period := idlePeriod(d)
	t := time.NewTicker(period)
	defer t.Stop()
	var tick uint64
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		tick++
		if nd := time.Duration(s.idleTimeout.Load()); nd != d {
			d = nd
			if d > 0 && idlePeriod(d) != period {
				period = idlePeriod(d)
				t.Reset(period)
			}
		}
		if d <= 0 {
			continue // turned off by SetLimits: keep counting, cut nobody
		}
		limit := uint64((d + period - 1) / period)
		s.mu.Lock()
		for ss := range s.sessions {
			if idle, status := ss.idleTicks(tick); idle >= limit {
				e := errIdleCut
				if status != 'I' {
					e = errIdleInTxCut
				}
				ss.cut(e)
			}
		}
		s.mu.Unlock()
	}
}

// idleTicks returns for how many ticks the session has been seen idle, and
// its transaction status. Reaper only (under Server.mu).
func (ss *session) idleTicks(tick uint64) (uint64, byte) {
	if !ss.sh.relaying.Load() || ss.sh.cutErr.Load() != nil {
		return 0, 0
	}
	m := ss.sh.msgs.Load()
	b, status := ss.sh.busy()
	if b || m != ss.reapMsgs {
		ss.reapMsgs, ss.reapSince = m, 0
		return 0, status
	}
	if ss.reapSince == 0 {
		ss.reapSince = tick
	}
	return tick - ss.reapSince, status
}
