package wire

import "context"

// The end of a session that leaves a statement running on the server.

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
