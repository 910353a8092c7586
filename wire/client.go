package wire

import (
	"errors"
	"io"

	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

// clientPump reads client messages and forwards them to the server (phase
// 4 of doc.go). Without a Rewriter every message is copied raw. With one,
// queries go through simple.go and extended.go, and every forwarded message
// that the server answers gets an owed entry first.
type clientPump session

func (p *clientPump) run(done chan<- pumpResult) {
	ss := (*session)(p)
	defer ss.srv.wg.Done()
	err := p.loop()
	if err != errWantLoop {
		ss.clientGone.Store(true)
	}
	done <- pumpResult{fromClient: true, err: err}
}

// errTerminate ends the client pump after a Terminate message.
var errTerminate = errors.New("terminate")

func (p *clientPump) loop() error {
	ss := (*session)(p)
	if b := ss.rel.TakePending(netloop.Server); b != nil {
		if _, err := ss.sw.Write(b); err != nil {
			return &Error{Kind: KindUpstreamIO, Message: "write", Err: err}
		}
		if err := ss.sw.Flush(); err != nil {
			return &Error{Kind: KindUpstreamIO, Message: "write", Err: err}
		}
	}
	if x := ss.rel.LastExit(); x.Side == netloop.Client && x.Err != nil {
		if x.Err == errPumpDone {
			return nil
		}
		return x.Err
	}
	for {
		if ss.cr.CanPoll() {
			if err := ss.cr.Poll(ss, netloop.Client); err != nil {
				if err == errPumpDone {
					return nil
				}
				return err
			}
		}
		typ, _, err := ss.cr.next()
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
	ss := (*session)(p)
	ss.msgs.Store(ss.msgs.Load() + 1) // one writer: no locked add per message
	if typ == 'X' {
		// Before the server can see the Terminate: its close is then
		// expected (regression: the server pump read the EOF before the
		// client pump had said so, and sent the client 08006).
		ss.clientGone.Store(true)
		ss.terminated.Store(true)
	}
	var err error
	if ss.track {
		err = p.dispatch(typ)
	} else {
		if typ == 'Q' || typ == 'S' || typ == 'F' {
			// Before the write: the server's ReadyForQuery must not be
			// counted first (busy, lifecycle.go).
			ss.syncs.Store(ss.syncs.Load() + 1)
		}
		err = ss.cr.forward(ss.sw)
		if err == nil && typ == 'X' {
			err = errTerminate
		}
	}
	if err != nil {
		if errors.Is(err, errTerminate) {
			_ = ss.sw.Flush()
			return errPumpDone
		}
		var e *Error
		if errors.As(err, &e) && e.Kind == KindClientProtocol {
			_ = ss.sw.Flush()
			ss.fatal(e)
		}
		return err
	}
	if ss.cr.R.Buffered() == 0 {
		if err := ss.sw.Flush(); err != nil {
			return &Error{Kind: KindUpstreamIO, Message: "write", Err: err}
		}
	}
	return nil
}

// readFailed ends the pump after a failed read: an oversized or malformed
// message is answered with 08P01 (after what was already forwarded); a
// vanished client gets its backend terminated politely.
func (p *clientPump) readFailed(err error) error {
	ss := (*session)(p)
	var tl *tooLarge
	if errors.As(err, &tl) {
		err = protocolError("invalid message length")
	}
	var e *Error
	if errors.As(err, &e) {
		_ = ss.sw.Flush()
		ss.fatal(e)
		return e
	}
	if err == io.EOF {
		// Client closed between messages without Terminate.
		ss.clientGone.Store(true)
		_, _ = ss.sw.Write([]byte{'X', 0, 0, 0, 4})
		_ = ss.sw.Flush()
		return nil
	}
	return &Error{Kind: KindClientIO, Message: "read", Err: err}
}

// dispatch handles one client message when a Rewriter is configured.
func (p *clientPump) dispatch(typ byte) error {
	ss := (*session)(p)
	switch typ {
	case 'Q':
		return p.query()
	case 'P':
		return p.parse()
	case 'B':
		return p.bind()
	case 'D':
		return p.describe()
	case 'E':
		return p.execute()
	case 'C':
		return p.closeMsg()
	case 'S':
		p.push(owed{kind: owedSync})
	case 'F':
		p.push(owed{kind: owedQuery})
	case 'X':
		if err := ss.cr.forward(ss.sw); err != nil {
			return err
		}
		return errTerminate
	}
	// Flush, CopyData, CopyDone, CopyFail and anything the server itself
	// must judge.
	return ss.cr.forward(ss.sw)
}

// push records a response owed for a message about to be forwarded. It
// must precede the write so the server pump never sees an answer first.
func (p *clientPump) push(o owed) {
	ss := (*session)(p)
	ss.mu.Lock()
	ss.q.push(o)
	ss.dirty = true
	ss.mu.Unlock()
}

// state returns whether the session is at a safe point and the current
// transaction status, and collects the mirror invalidations the server
// pump recorded.
func (p *clientPump) state() (safe bool, status byte) {
	ss := (*session)(p)
	ss.mu.Lock()
	safe = ss.q.empty() && !ss.dirty
	status = ss.txStatus
	inv := ss.invalid
	ss.invalid = 0
	ss.mu.Unlock()
	p.mirror.invalidate(inv)
	if safe && status == 'I' {
		p.portalLive = false // portals end with their transaction
	}
	return safe, status
}
