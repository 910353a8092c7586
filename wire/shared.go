package wire

import (
	"bufio"
	"sync"
	"sync/atomic"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// shared is the part of a session that more than one goroutine touches:
// both pumps (or the loop thread in their place), the session goroutine,
// the idle reaper and Server.Close (docs/session.md). Lock order: wmu
// before mu.
type shared struct {
	track bool // a Rewriter is configured: responses are matched to requests (fixed)

	// cw writes to the client, under wmu: the server pump holds wmu for a
	// whole batch (serverPump.locked), the client pump takes it for a
	// local answer or a FATAL.
	wmu sync.Mutex
	cw  *bufio.Writer

	mu       sync.Mutex
	q        owedQueue
	txStatus byte // from the last ReadyForQuery
	// skipToSync: an error answered a message of the extended protocol,
	// and the server skips everything up to the next Sync (ready).
	skipToSync bool
	dirty      bool       // something was forwarded since the last safe ReadyForQuery
	invalid    plan.Touch // mirror state the server pump learned is stale
	pending    plan.Touch // touches of the current transaction, reapplied at each ReadyForQuery
	// shimBusy holds the touchFence bits of statements forwarded and not
	// yet answered: while they run, the server's shim may issue IDs, so the
	// fast path stays off (IDs of a session follow execution order). When
	// the response is complete they move to fenceDue, and the next fast-path
	// ID first fences (ids.go).
	shimBusy plan.Touch
	fenceDue plan.Touch
	params   map[string]string
	// copyView: the COPY whose rows the client pump completes, for its
	// errors (copyerr.go).
	copyView copyView
	// readies counts the server's ReadyForQuery messages without a
	// Rewriter (with one, the owed queue tells), against syncs.
	readies uint64

	// The hidden-query hand-off (ids.go): the client pump sends the query
	// and waits on hqDone; the server pump fills hq while hiddenActive.
	hiddenActive atomic.Bool
	hq           hiddenQuery
	hqDone       chan struct{}

	clientGone atomic.Bool // the client pump has ended, or the client sent Terminate
	terminated atomic.Bool // the client sent Terminate
	sawFatal   atomic.Bool // the server sent a FATAL error: its close is expected
	// serverFatal is the server's FATAL (or login refusal), for the
	// session's end (outcome.go).
	serverFatal atomic.Pointer[serverFatal]
	serverLost  atomic.Bool // the server connection ended without the proxy asking
	fatalSent   atomic.Bool // the proxy sent the client a FATAL error
	// relaying: startup is over. cutErr: why the proxy ends the session
	// (nil: it does not; lifecycle.go).
	relaying atomic.Bool
	cutErr   atomic.Pointer[Error]
	// syncs counts the client's Query, Sync and FunctionCall messages
	// without a Rewriter; msgs counts client messages. Both are written
	// only by whoever runs the client steps.
	syncs atomic.Uint64
	msgs  atomic.Uint64
	// copyRefused: the server sent an error for a COPY whose rows the
	// client pump completes (copyin.go): it issues no more IDs for it.
	copyRefused atomic.Bool
	// copyIn: the server is in a COPY FROM STDIN the client has not ended
	// (it had sent copyInEnds CopyDone and CopyFail messages before it),
	// where it ignores Sync (queue.go, copyInStarted).
	copyIn     bool
	copyInEnds uint64
}

func newShared(track bool) *shared {
	return &shared{track: track, txStatus: 'I', params: map[string]string{}, hqDone: make(chan struct{}, 1)}
}

// parseConfirm is the server's answer to a message whose owed entry
// carries it: ok when the server confirmed it (ParseComplete,
// BindComplete, CloseComplete, the CommandComplete of an Execute or of
// a Query's statement), failed when an error answered the message itself
// (not one that made the server skip it),
// done once its owed entry left the queue, answered or skipped. Shared
// state under shared.mu, set by the server pump (through the owed entry)
// and read by the client pump (confirmed, settleAnswered).
type parseConfirm struct{ ok, failed, done bool }

// confirmed reports whether the server confirmed the Parse of c.
func (sh *shared) confirmed(c *parseConfirm) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return c.ok
}

// quiet reports whether nothing sent to the server is unanswered (safe),
// and the transaction status of the last ReadyForQuery.
func (sh *shared) quiet() (safe bool, status byte) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.q.empty() && !sh.dirty, sh.txStatus
}

// pushSync records the ReadyForQuery owed for a Sync about to be
// forwarded, sent after copyEnds CopyDone and CopyFail messages, and
// reports whether it did: the server ignores a Sync it reads during a
// COPY FROM STDIN, and answers nothing (queue.go, copyInStarted).
func (sh *shared) pushSync(copyEnds uint64) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.copyIn && sh.copyInEnds == copyEnds {
		return false
	}
	sh.q.push(owed{kind: owedSync, copyEnds: copyEnds})
	sh.dirty = true
	return true
}

// push records a response owed for a message about to be forwarded. It
// must precede the write so the server pump never sees an answer first.
func (sh *shared) push(o owed) {
	sh.mu.Lock()
	sh.q.push(o)
	sh.dirty = true
	sh.mu.Unlock()
}

// sendToClient writes a message built outside the server pump to the
// client, after everything the server pump wrote before, and flushes.
func (sh *shared) sendToClient(b []byte) error {
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	if _, err := sh.cw.Write(b); err != nil {
		return err
	}
	return sh.cw.Flush()
}

// fatal sends err to the client as a FATAL ErrorResponse.
func (sh *shared) fatal(err error) error {
	sh.fatalSent.Store(true)
	b, _ := errorResponse(err).Encode(nil)
	return sh.sendToClient(b)
}
