package wire

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"

	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

// clientPump reads client messages and forwards them to the server (phase
// 5 of doc.go). Without a Rewriter every message is copied raw. With one,
// queries go through simple.go and extended.go, and every forwarded message
// that the server answers gets an owed entry first. It owns the client
// reader, the writer to the server and everything the proxy records of the
// client's statements (docs/session.md).
type clientPump struct {
	sh  *shared
	rel *netloop.Relay // whether a loop thread runs the steps; its pending writes

	// From the session, fixed once the relay starts.
	srv        *Server
	cfg        *Config
	log        *slog.Logger
	ctx        context.Context
	db         string
	backendPID uint32 // from the server's BackendKeyData (simpleprep.go)

	cr frameReader   // from the client
	sw *bufio.Writer // to the server

	// Statement records (namedparse.go): per name, and the changes the
	// server has not answered, in the order sent (changes[changesHead:]).
	stmts       map[string]*stmtSlot
	unnamed     stmtSlot
	changes     []*stmtSlot
	changesHead int
	// groups counts the messages sent that end a group for sure: after
	// each, the server runs what comes next whatever became of what came
	// before (namedparse.go, answered). A Sync always; a Query when no
	// extended message was sent since the last Sync (inExtended), as
	// after an error the server skips a Query too, up to the Sync.
	groups     uint64
	inExtended bool
	// copyEnds counts the CopyDone and CopyFail messages sent: a Sync
	// before the one that ends a COPY FROM STDIN is ignored by the server
	// (queue.go, copyInStarted).
	copyEnds      uint64
	portals       map[string]*stmtRec
	unnamedPortal *stmtRec
	stmtLive      bool // an unnamed statement may exist on the server
	portalLive    bool // an unnamed portal may exist on the server
	// serverSeen: a mirror refresh has named the server process; pooled:
	// one named another than the BackendKeyData's (simpleprep.go).
	serverSeen bool
	pooled     bool
	// fbFree: names of fallback statements no record uses
	// (fallbackstmt.go).
	fbFree [][]byte
	mirror mirror
	out    []byte // scratch for messages the client pump builds
	vals   []plan.Value
	// fastIDs is how many of vals the fast path issued (ids.go), so that
	// a local answer can count them in Stats.LocalIDs.
	fastIDs int
	// slotFallback is why values (ids.go) left the first Nextval slot of
	// the last execution unfilled, for Stats.Fallbacks.
	slotFallback Fallback
	// Simple-protocol INSERTs prepared by the session (simpleprep.go):
	// by text with parameters, the texts seen once (hashes), and scratch
	// for the text.
	prepared map[string]*preparedQuery
	seen     map[uint64]struct{}
	text     []byte
	// carried is the plan a loop thread made for the Parse or Query it
	// handed over, for the pump that takes the message again (plan).
	carried carriedPlan
	// cin is the COPY whose rows the pump completes (copyin.go).
	cin copyIn
	// idleSeen: a state() call of the current Bind found a safe point in
	// status 'I', where the unnamed portal ends with the implicit
	// transaction (bind; scratch of one step).
	idleSeen bool
}

// carriedPlan is a plan made on a loop thread and the text it is for.
type carriedPlan struct {
	text []byte
	pl   *plan.Plan
}

// plan returns the Rewriter's plan of text: the one carried over from the
// loop thread when it is for this text, else a new one.
func (p *clientPump) plan(text []byte) *plan.Plan {
	if c := &p.carried; c.pl != nil {
		pl, same := c.pl, bytes.Equal(c.text, text)
		c.pl, c.text = nil, c.text[:0]
		if same {
			return pl
		}
	}
	pl := p.cfg.Rewriter.Plan(viewString(text))
	if pl == nil {
		pl = plan.Passthrough
	}
	return pl
}

// handOver ends a step on a loop thread with err (errHandover): the
// session goes to its pumps, and pl goes with it for the same text, so
// that the message is analysed once.
func (p *clientPump) handOver(text []byte, pl *plan.Plan, err error) error {
	if err == errHandover {
		p.carried.text = append(p.carried.text[:0], text...)
		p.carried.pl = pl
	}
	return err
}

// run is the client pump's goroutine.
func (p *clientPump) run() error {
	err := p.loop()
	if err != errWantLoop {
		p.sh.clientGone.Store(true)
	}
	return err
}

// onLoop reports whether the steps run on a loop thread now.
func (p *clientPump) onLoop() bool { return p.rel != nil && p.rel.InLoop() }

// Step is the netloop step of one whole client message, in Poll or on a
// loop thread. Terminate on a loop thread is handed over: the pumps end
// the session.
func (p *clientPump) Step(_ netloop.Side, typ byte) error {
	if typ == 'X' && p.onLoop() {
		return errHandover
	}
	_, _, _ = p.cr.next() // whole: the header is valid
	return p.step(typ)
}

// errTerminate ends the client pump after a Terminate message.
var errTerminate = errors.New("terminate")

func (p *clientPump) loop() error {
	if ok, err := p.rel.WritePending(netloop.Server, p.sw); err != nil {
		return &Error{Kind: KindUpstreamIO, Message: "write", Err: err}
	} else if ok {
		if err := p.sw.Flush(); err != nil {
			return &Error{Kind: KindUpstreamIO, Message: "write", Err: err}
		}
	}
	if x := p.rel.LastExit(); x.Side == netloop.Client && x.Err != nil {
		if x.Err == errPumpDone {
			return nil
		}
		return x.Err
	}
	for {
		if p.cr.CanPoll() {
			if err := p.cr.Poll(p, netloop.Client); err != nil {
				if err == errPumpDone {
					return nil
				}
				return err
			}
		}
		typ, _, err := p.cr.next()
		if err != nil {
			return p.readFailed(err)
		}
		if err := p.step(typ); err != nil {
			if err == errPumpDone {
				return nil
			}
			return err
		}
	}
}

// errPumpDone ends a pump without error (after the client's Terminate).
var errPumpDone = errors.New("pump done")

// step forwards or dispatches one client message whose header next has
// read, and flushes to the server when no more client input is buffered.
func (p *clientPump) step(typ byte) error {
	p.sh.msgs.Store(p.sh.msgs.Load() + 1) // one writer: no locked add per message
	if typ == 'X' {
		// Before the server can see the Terminate: its close is then
		// expected (regression: the server pump read the EOF before the
		// client pump had said so, and sent the client 08006).
		p.sh.clientGone.Store(true)
		p.sh.terminated.Store(true)
	}
	var err error
	if p.sh.track {
		err = p.dispatch(typ)
	} else {
		if typ == 'Q' || typ == 'S' || typ == 'F' {
			// Before the write: the server's ReadyForQuery must not be
			// counted first (busy, lifecycle.go).
			p.sh.syncs.Store(p.sh.syncs.Load() + 1)
		}
		err = p.cr.forward(p.sw)
		if err == nil && typ == 'X' {
			err = errTerminate
		}
	}
	if err != nil {
		if errors.Is(err, errTerminate) {
			_ = p.sw.Flush()
			return errPumpDone
		}
		var e *Error
		if errors.As(err, &e) && e.Kind == KindClientProtocol {
			_ = p.sw.Flush()
			p.sh.fatal(e)
		}
		return err
	}
	if p.cr.R.Buffered() == 0 {
		if err := p.sw.Flush(); err != nil {
			return &Error{Kind: KindUpstreamIO, Message: "write", Err: err}
		}
	}
	return nil
}

// readFailed ends the pump after a failed read: an oversized or malformed
// message is answered with 08P01 (after what was already forwarded); a
// vanished client gets its backend terminated politely.
func (p *clientPump) readFailed(err error) error {
	var tl *tooLarge
	if errors.As(err, &tl) {
		err = protocolError("invalid message length")
	}
	var e *Error
	if errors.As(err, &e) {
		_ = p.sw.Flush()
		p.sh.fatal(e)
		return e
	}
	if err == io.EOF {
		// Client closed between messages without Terminate.
		p.sh.clientGone.Store(true)
		_, _ = p.sw.Write(terminate)
		_ = p.sw.Flush()
		return nil
	}
	return &Error{Kind: KindClientIO, Message: "read", Err: err}
}

// dispatch handles one client message when a Rewriter is configured.
func (p *clientPump) dispatch(typ byte) error {
	if typ == 'c' || typ == 'f' {
		p.copyEnds++
	}
	if p.cin.active {
		if handled, err := p.copyMessage(typ); handled {
			return err
		}
	}
	switch typ {
	case 'Q':
		if p.inExtended && p.atSafePoint() {
			// Everything sent was answered, the last of it by a
			// ReadyForQuery: no skip after an error can be pending.
			p.inExtended = false
		}
		err := p.query()
		if err == nil && !p.inExtended {
			p.groups++ // not for a Query handed over to be taken again
		}
		return err
	case 'P':
		p.inExtended = true
		return p.parse()
	case 'B':
		p.inExtended = true
		return p.bind()
	case 'D':
		p.inExtended = true
		return p.describe()
	case 'E':
		p.inExtended = true
		return p.execute()
	case 'C':
		p.inExtended = true
		return p.closeMsg()
	case 'S':
		if p.sh.pushSync(p.copyEnds) {
			p.groupEnded()
		}
	case 'F':
		p.push(owed{kind: owedQuery})
	case 'X':
		if err := p.cr.forward(p.sw); err != nil {
			return err
		}
		return errTerminate
	}
	// Flush, CopyData, CopyDone, CopyFail and anything the server itself
	// must judge.
	return p.cr.forward(p.sw)
}

// groupEnded counts a Sync that reaches the server, or one the proxy
// answers with its group (extlocal.go): what comes after it runs whatever
// became of what came before.
func (p *clientPump) groupEnded() {
	p.groups++
	p.inExtended = false
}

// push records a response owed for a message about to be forwarded.
func (p *clientPump) push(o owed) {
	o.copyEnds = p.copyEnds
	p.sh.push(o)
}

// state returns whether the session is at a safe point and the current
// transaction status, and collects the mirror invalidations the server
// pump recorded.
func (p *clientPump) state() (safe bool, status byte) {
	p.sh.mu.Lock()
	safe = p.sh.q.empty() && !p.sh.dirty
	status = p.sh.txStatus
	inv := p.sh.invalid
	p.sh.invalid = 0
	p.sh.mu.Unlock()
	p.mirror.invalidate(inv)
	if safe && status == 'I' {
		p.portalLive = false // portals end with their transaction
		p.idleSeen = true
	}
	return safe, status
}
