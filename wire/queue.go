package wire

import "github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"

// owedKind says which client message a response belongs to and therefore
// which server message completes it.
type owedKind uint8

const (
	owedQuery          owedKind = iota + 1 // Query or FunctionCall: ends at ReadyForQuery
	owedParse                              // ParseComplete
	owedBind                               // BindComplete
	owedDescribeStmt                       // ParameterDescription, then RowDescription or NoData
	owedDescribePortal                     // RowDescription or NoData
	owedExecute                            // CommandComplete, EmptyQueryResponse or PortalSuspended
	owedClose                              // CloseComplete
	owedHiddenClose                        // CloseComplete of the proxy's own Close: not relayed
	owedHiddenParse                        // ParseComplete of the proxy's own Parse: not relayed
	owedHiddenBind                         // BindComplete of the proxy's own Bind: not relayed
	owedSync                               // ReadyForQuery
	// owedIgnoredSync: a Sync the server read during COPY FROM STDIN,
	// which it ignores: nothing answers it (copyInStarted).
	owedIgnoredSync
)

// extended reports whether the entry belongs to the extended protocol,
// where an ErrorResponse makes the server skip to the next Sync.
func (k owedKind) extended() bool { return k >= owedParse && k < owedSync }

// owed is a response the client is owed for a message the proxy forwarded,
// with what the server pump must change in it.
type owed struct {
	kind  owedKind
	strip int              // owedDescribeStmt: injected parameters to hide
	stmts []plan.Statement // command tags to rename (shared, read-only)
	n     int              // owedQuery: CommandCompletes seen
	pos   posMap           // owedQuery, owedParse of a rewritten text: error cursors to map
	// copyCols: owedQuery of a COPY whose rows the client pump completes
	// (copyin.go): the columns it added, hidden from CopyInResponse.
	copyCols int
	// confirm: owedParse, owedHiddenParse: the confirmation of the
	// record whose Parse this is, set at its ParseComplete (under
	// shared.mu); owedBind of a Bind to a fallback statement: its
	// confirmation, set at BindComplete, dropped at an error
	// (fallbackstmt.go); owedClose of a statement, owedExecute of a
	// DEALLOCATE or DISCARD ALL, owedQuery that destroys the unnamed
	// statement: the answer the records they change wait for
	// (namedparse.go).
	confirm *parseConfirm
	// sync: an owedQuery entry that stands for Execute and Sync (a
	// client's Query sent prepared, simpleprep.go): it ends at the Sync's
	// ReadyForQuery even when the server skipped the Execute.
	sync bool
	// confirms: owedQuery of a string that removes prepared statements:
	// per statement, the answer the records it changes wait for, set at
	// the statement's CommandComplete (nil for the others).
	confirms []*parseConfirm
	// copyEnds: the CopyDone and CopyFail messages the client had sent
	// when the message was (clientPump.copyEnds).
	copyEnds uint64
}

// owedQueue is a FIFO of owed responses. It reuses its array: no
// allocation in steady state. Guarded by shared.mu.
type owedQueue struct {
	items []owed
	head  int
	// wake, once a client pump waited for an answer (namedparse.go,
	// awaitAnswer), gets a token whenever an entry with a confirmation
	// leaves.
	wake chan struct{}
}

func (q *owedQueue) push(o owed) {
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head > 64 && q.head > len(q.items)/2 {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, o)
}

// front returns the oldest entry, nil when empty. The pointer is valid
// until the next push (callers hold shared.mu).
func (q *owedQueue) front() *owed {
	if q.head < len(q.items) {
		return &q.items[q.head]
	}
	return nil
}

// pop removes the oldest entry: answered, refused, or skipped after an
// error. A Parse's confirmation is then done.
func (q *owedQueue) pop() {
	o := &q.items[q.head]
	if c := o.confirm; c != nil {
		c.done = true
	}
	for _, c := range o.confirms {
		if c != nil {
			c.done = true
		}
	}
	if q.wake != nil && (o.confirm != nil || len(o.confirms) > 0) {
		select {
		case q.wake <- struct{}{}:
		default: // a token is already there
		}
	}
	q.items[q.head] = owed{}
	q.head++
	// Nothing answers an ignored Sync: the next answer is the next
	// entry's.
	for q.head < len(q.items) && q.items[q.head].kind == owedIgnoredSync {
		q.items[q.head] = owed{}
		q.head++
	}
}

func (q *owedQueue) empty() bool { return q.head == len(q.items) }

// copyInStarted marks the Syncs sent after the front entry, whose message
// started a COPY FROM STDIN (the server sent CopyInResponse), and before
// the client ended it: the server reads them during the COPY and ignores
// them, and no ReadyForQuery answers them (regression: libpq sends Parse,
// Bind, Execute, Sync, the data, CopyDone, Sync, and the first Sync's
// entry took the answer of every later message). A message other than a
// Sync there makes the server end the COPY with an error, and Syncs after
// it count again.
func (q *owedQueue) copyInStarted() {
	if q.empty() {
		return
	}
	ends := q.items[q.head].copyEnds
	for i := q.head + 1; i < len(q.items); i++ {
		o := &q.items[i]
		if o.kind != owedSync || o.copyEnds != ends {
			return
		}
		o.kind = owedIgnoredSync
	}
}
