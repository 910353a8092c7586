package wire

import (
	"encoding/binary"
	"errors"
	"io"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// serverPump copies server messages to the client (phase 6 of doc.go). It
// holds wmu from the first message of a batch until it has flushed, which
// happens only when no more server input is buffered: one write per batch.
// It owns the server reader and its scratch (docs/session.md).
type serverPump struct {
	sh  *shared
	rel *netloop.Relay // its pending writes and the step error the loop met

	sr     frameReader // from the server
	sout   []byte      // scratch
	locked bool        // the pump holds wmu for the batch it relays
	// outBroken: a server message may have reached the client in part.
	// Set by whoever runs the server steps (or leaveLoop), read by the
	// session goroutine once they stopped.
	outBroken bool
}

// run is the server pump's goroutine.
func (p *serverPump) run() error {
	err := p.loop()
	if err == errWantLoop {
		_ = p.unlock() // a partial message may have kept the batch open
	}
	if p.sh.hiddenActive.Load() {
		p.sh.hq.err = errors.Join(p.sh.hq.err, io.ErrUnexpectedEOF)
	}
	return err
}

// Step is the netloop step of one whole server message, in Poll or on a
// loop thread.
func (p *serverPump) Step(_ netloop.Side, typ byte) error {
	_, _, _ = p.sr.next() // whole: the header is valid
	return p.step(typ)
}

func (p *serverPump) loop() error {
	p.locked = false
	if p.rel.HasPending(netloop.Client) {
		// runPumps took wmu for this.
		p.locked = true
		if _, err := p.rel.WritePending(netloop.Client, p.sh.cw); err != nil {
			_ = p.unlock()
			return &Error{Kind: KindClientIO, Message: "write", Err: err}
		}
		if err := p.unlock(); err != nil {
			return &Error{Kind: KindClientIO, Message: "write", Err: err}
		}
	}
	if x := p.rel.LastExit(); x.Side == netloop.Server && x.Err != nil {
		return x.Err
	}
	for {
		if p.sr.CanPoll() {
			if err := p.sr.Poll(p, netloop.Server); err != nil {
				return err
			}
		}
		typ, _, err := p.sr.next()
		if err != nil {
			if ferr := p.unlock(); ferr != nil {
				return &Error{Kind: KindClientIO, Message: "write", Err: ferr}
			}
			if p.sh.clientGone.Load() || p.sh.sawFatal.Load() {
				return nil
			}
			return p.sh.upstreamLost(err)
		}
		if err := p.step(typ); err != nil {
			return err
		}
	}
}

// step relays one server message whose header next has read. It takes
// wmu at the first message of a batch and flushes and releases it when no
// more server input is buffered.
func (p *serverPump) step(typ byte) error {
	if !p.locked {
		p.sh.wmu.Lock()
		p.locked = true
		if p.sh.cutErr.Load() != nil {
			// The session is being cut (lifecycle.go): the client's
			// stream ends here, at a message boundary, for its FATAL.
			_ = p.unlock()
			return errCut
		}
	}
	if err := p.handle(typ); err != nil {
		// The message may have reached the client in part.
		p.outBroken = true
		_ = p.unlock()
		return err
	}
	if p.sr.R.Buffered() == 0 {
		if err := p.unlock(); err != nil {
			return &Error{Kind: KindClientIO, Message: "write", Err: err}
		}
	}
	return nil
}

// unlock ends a batch: flush to the client and release wmu.
func (p *serverPump) unlock() error {
	if !p.locked {
		return nil
	}
	p.locked = false
	err := p.sh.cw.Flush()
	p.sh.wmu.Unlock()
	return err
}

// handle relays one server message. Messages that need no change are
// copied raw; only the ones that carry state or end a response are read.
func (p *serverPump) handle(typ byte) error {
	if p.sh.hiddenActive.Load() {
		return p.hidden(typ)
	}
	switch typ {
	case 'Z':
		body, err := p.sr.body()
		if err != nil {
			return err
		}
		p.ready(body)
		return p.sr.pass(p.sh.cw)
	case 'E':
		body, err := p.sr.body()
		if err != nil {
			return err
		}
		f, _ := pgmsg.ReadFields(body) // malformed: no fields, passed as it is
		if f.Fatal() {
			p.sh.noteServerFatal(f)
		}
		var pm posMap
		own := false
		var cv *copyView
		if p.sh.track {
			p.sh.mu.Lock()
			p.sh.copyIn = false // an error ends a COPY
			if o := p.sh.q.front(); o != nil {
				pm, own = o.pos, ownStatement(o)
				if o.copyCols > 0 {
					p.sh.copyRefused.Store(true)
					v := p.sh.copyView
					cv = &v
				}
				if o.confirm != nil {
					o.confirm.failed = true
					if o.kind == owedBind || o.kind == owedHiddenParse {
						// A Bind to a fallback statement failed, or a
						// Parse whose Close ran (regression: a second
						// pipelined Close and Parse, after the first
						// one's confirmation, left the server without the
						// statement): the server may not have it
						// (fallbackstmt.go).
						o.confirm.ok = false
					}
				}
				if o.kind.extended() {
					// The server now skips to Sync, Queries included;
					// ready pops the rest.
					p.sh.q.pop()
					p.sh.skipToSync = true
				}
			}
			if code, _ := f.Get('C'); string(code) == codeInsufficientPrivilege {
				// The server refused a privilege the session's cache may
				// still grant (a REVOKE the catalog watch has not seen
				// yet, the shim having checked at once): what the
				// session cached about sequences and targets goes, as
				// after DDL (not the node, role and settings).
				p.sh.invalid |= plan.TouchCatalog
			}
			p.sh.mu.Unlock()
		}
		fixed, ok := fixError(f, &pm, own)
		if cv != nil {
			if ok {
				f, _ = pgmsg.ReadFields(fixed)
			}
			if c, changed := cv.fix(f); changed {
				fixed, ok = c, true
			}
		}
		if ok {
			p.sr.consume()
			return p.write('E', fixed)
		}
		return p.sr.pass(p.sh.cw)
	case 'N':
		return p.notice()
	case 'S':
		return p.parameterStatus()
	}
	if !p.sh.track {
		return p.sr.forward(p.sh.cw)
	}
	switch typ {
	case 'C':
		return p.commandComplete()
	case 't':
		p.sh.mu.Lock()
		strip := 0
		if o := p.sh.q.front(); o != nil && o.kind == owedDescribeStmt {
			strip = o.strip
		}
		p.sh.mu.Unlock()
		if strip > 0 {
			return p.parameterDescription(strip)
		}
	case 'G':
		p.sh.mu.Lock()
		hide := 0
		if o := p.sh.q.front(); o != nil {
			hide = o.copyCols
			p.sh.copyIn, p.sh.copyInEnds = true, o.copyEnds
			p.sh.q.copyInStarted()
		}
		p.sh.mu.Unlock()
		if hide > 0 {
			return p.copyInResponse(hide)
		}
	case 'T', 'n':
		p.complete(owedDescribeStmt, owedDescribePortal)
	case '1':
		if p.swallow(owedHiddenParse) {
			return p.sr.skip()
		}
		p.complete(owedParse, 0)
	case '2':
		if p.swallow(owedHiddenBind) {
			return p.sr.skip()
		}
		p.complete(owedBind, 0)
	case '3':
		if p.swallow(owedHiddenClose) {
			return p.sr.skip()
		}
		p.complete(owedClose, 0)
	case 'I', 's':
		p.complete(owedExecute, 0)
	}
	return p.sr.forward(p.sh.cw)
}

// parameterStatus notes a ParameterStatus (is_superuser, read-only
// settings) and relays it.
func (p *serverPump) parameterStatus() error {
	body, err := p.sr.body()
	if err != nil {
		return err
	}
	p.sh.mu.Lock()
	p.sh.noteParameter(body)
	p.sh.mu.Unlock()
	return p.sr.pass(p.sh.cw)
}

// complete pops the front entry when it is of kind a or b (0: none) and
// reports whether it did. The entry of a ParseComplete confirms its record
// as known to the server (extlocal.go answers only for statements the
// server has; simpleprep.go sends Parse again until it is confirmed).
func (p *serverPump) complete(a, b owedKind) bool {
	p.sh.mu.Lock()
	o := p.sh.q.front()
	done := o != nil && (o.kind == a || o.kind == b)
	if done {
		if o.confirm != nil {
			o.confirm.ok = true
		}
		p.sh.q.pop()
	}
	p.sh.mu.Unlock()
	return done
}

// swallow completes the front entry when it is of kind k, a response to a
// message the proxy sent on its own (reprepare.go, simpleprep.go), and
// reports whether it did: the response is then not relayed.
func (p *serverPump) swallow(k owedKind) bool { return p.complete(k, 0) }

// ready handles ReadyForQuery: the transaction status, the entries it
// completes (after an error, every entry up to the Sync), the safe point,
// and the mirror state a SET LOCAL or a rollback may have changed.
func (p *serverPump) ready(body []byte) {
	p.sh.mu.Lock()
	defer p.sh.mu.Unlock()
	if m, ok := pgmsg.ReadReadyForQuery(body); ok {
		p.sh.txStatus = m.Status
	}
	p.sh.readies++
	p.sh.copyIn = false
	// After an error the server skipped everything up to Sync, a Query
	// or FunctionCall too, which then has no ReadyForQuery of its own
	// (regression: the Sync's was taken for the Query's, and every later
	// answer matched to the message before it).
	skipped := p.sh.skipToSync
	p.sh.skipToSync = false
	for !p.sh.q.empty() {
		o := p.sh.q.front()
		k, sync := o.kind, o.sync
		ran := k == owedQuery && !skipped
		if ran && o.confirm != nil {
			o.confirm.ok = true // it destroyed the unnamed statement
		}
		p.sh.q.pop()
		if ran || k == owedSync || sync {
			break
		}
	}
	if p.sh.q.empty() {
		p.sh.dirty = false
		p.sh.fenceDue |= p.sh.shimBusy
		p.sh.shimBusy = 0
	}
	p.sh.invalid |= p.sh.pending
	if p.sh.txStatus == 'I' {
		p.sh.pending = 0
	}
}

// commandComplete renames the tag when the statement's plan says so.
func (p *serverPump) commandComplete() error {
	tag := ""
	p.sh.mu.Lock()
	if o := p.sh.q.front(); o != nil {
		switch o.kind {
		case owedQuery:
			if o.n < len(o.stmts) {
				tag = o.stmts[o.n].Tag
			}
			if o.n < len(o.confirms) && o.confirms[o.n] != nil {
				o.confirms[o.n].ok = true // prepared statements are not transactional
			}
			o.n++
		case owedExecute:
			if len(o.stmts) > 0 {
				tag = o.stmts[0].Tag
			}
			if o.confirm != nil {
				o.confirm.ok = true
			}
			p.sh.q.pop()
		}
	}
	p.sh.mu.Unlock()
	if tag == "" {
		return p.sr.forward(p.sh.cw)
	}
	if err := p.sr.skip(); err != nil {
		return err
	}
	p.sout = pgmsg.AppendCommandComplete(p.sout[:0], tag)
	_, err := p.sh.cw.Write(p.sout)
	return err
}

// parameterDescription hides the strip trailing parameters the proxy
// injected (pgx's default mode binds exactly the parameters it is told of).
func (p *serverPump) parameterDescription(strip int) error {
	body, err := p.sr.body()
	if err != nil {
		return err
	}
	m, ok := pgmsg.ReadParameterDescription(body)
	if !ok || m.NumParams() < strip {
		return p.sr.pass(p.sh.cw)
	}
	p.sout = m.WithoutLast(strip).Append(p.sout[:0])
	p.sr.consume()
	_, err = p.sh.cw.Write(p.sout)
	return err
}

// copyInResponse hides the hide last columns of a CopyInResponse: those
// the client pump added to a COPY's column list (copyin.go).
func (p *serverPump) copyInResponse(hide int) error {
	body, err := p.sr.body()
	if err != nil {
		return err
	}
	if len(body) < 3 {
		return p.sr.pass(p.sh.cw)
	}
	n := int(binary.BigEndian.Uint16(body[1:3]))
	if n < hide || len(body) != 3+2*n {
		return p.sr.pass(p.sh.cw)
	}
	var start int
	p.sout, start = pgmsg.Begin(p.sout[:0], 'G')
	p.sout = append(p.sout, body[0])
	p.sout = binary.BigEndian.AppendUint16(p.sout, uint16(n-hide))
	p.sout = append(p.sout, body[3:3+2*(n-hide)]...)
	p.sout = pgmsg.Finish(p.sout, start)
	p.sr.consume()
	_, err = p.sh.cw.Write(p.sout)
	return err
}

// write sends a message whose body was read.
func (p *serverPump) write(typ byte, body []byte) error {
	var start int
	p.sout, start = pgmsg.Begin(p.sout[:0], typ)
	if len(body) < 1024 {
		p.sout = pgmsg.Finish(append(p.sout, body...), start)
		_, err := p.sh.cw.Write(p.sout)
		return err
	}
	p.sout = pgmsg.FinishLen(p.sout, start, len(body))
	if _, err := p.sh.cw.Write(p.sout); err != nil {
		return err
	}
	_, err := p.sh.cw.Write(body)
	return err
}

// touchSettings are the touches after which node, read-only state and role
// must be re-read.
const touchSettings = plan.TouchNode | plan.TouchReadOnly | plan.TouchRole | plan.TouchAll
