package wire

import (
	"context"
	"errors"
	"time"
)

// How sessions end on the proxy's initiative, at the end of Close's grace
// (errShutdownCut), and what is left on the server when a client goes
// away mid-statement.
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
	if !ss.cutErr.CompareAndSwap(nil, e) {
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
	for _, fd := range ss.loopFD {
		if fd >= 0 {
			shutdownReadFD(fd)
		}
	}
	return true
}

// tellCut sends the client the FATAL of a cut once the session's relay has
// stopped, unless the client may not be at a message boundary (a server
// message was cut short, a write failed) or already got a FATAL. It
// reports whether the FATAL was written.
func (ss *session) tellCut(e *Error) bool {
	if ss.cw == nil || ss.outBroken || ss.fatalSent.Load() || ss.sawFatal.Load() {
		return false
	}
	ss.connMu.Lock()
	if ss.aborted {
		ss.connMu.Unlock()
		return false
	}
	_ = ss.client.SetWriteDeadline(time.Now().Add(cutWrite))
	ss.connMu.Unlock()
	return ss.fatal(e) == nil
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
func (ss *session) busy() (bool, byte) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.track {
		return !ss.q.empty() || ss.dirty || ss.hiddenActive.Load(), ss.txStatus
	}
	return ss.syncs.Load() != ss.readies, ss.txStatus
}

// cancelStatement sends the server a CancelRequest for the session when a
// statement is still outstanding while the session ends without the
// server having ended it: otherwise the backend runs it to its end,
// holding its locks, although nobody will read the result. Once per
// session.
func (ss *session) cancelStatement() {
	if ss.cancelSent || !ss.haveKey || !ss.relaying.Load() || ss.serverLost.Load() || ss.sawFatal.Load() {
		return
	}
	if b, _ := ss.busy(); !b {
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
