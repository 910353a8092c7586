package wire

import (
	"errors"
	"io"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

// serverPump copies server messages to the client (phase 6 of doc.go). It
// holds wmu from the first message of a batch until it has flushed, which
// happens only when no more server input is buffered: one write per batch.
type serverPump session

func (p *serverPump) run(done chan<- pumpResult) {
	ss := (*session)(p)
	defer ss.srv.wg.Done()
	err := p.loop()
	if err == errWantLoop {
		_ = p.unlock() // a partial message may have kept the batch open
	}
	if ss.hiddenActive.Load() {
		ss.hq.err = errors.Join(ss.hq.err, io.ErrUnexpectedEOF)
	}
	done <- pumpResult{fromClient: false, err: err}
}

func (p *serverPump) loop() error {
	ss := (*session)(p)
	p.locked = false
	if b := ss.rel.TakePending(netloop.Client); b != nil {
		// runPumps took wmu for this.
		p.locked = true
		if _, err := ss.cw.Write(b); err != nil {
			_ = p.unlock()
			return &Error{Kind: KindClientIO, Message: "write", Err: err}
		}
		if err := p.unlock(); err != nil {
			return &Error{Kind: KindClientIO, Message: "write", Err: err}
		}
	}
	if x := ss.rel.LastExit(); x.Side == netloop.Server && x.Err != nil {
		return x.Err
	}
	for {
		if ss.sr.CanPoll() {
			if err := ss.sr.Poll(ss, netloop.Server); err != nil {
				return err
			}
		}
		typ, _, err := ss.sr.next()
		if err != nil {
			if ferr := p.unlock(); ferr != nil {
				return &Error{Kind: KindClientIO, Message: "write", Err: ferr}
			}
			if ss.clientGone.Load() || ss.sawFatal.Load() {
				return nil
			}
			return ss.upstreamLost(err)
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
	ss := (*session)(p)
	if !p.locked {
		ss.wmu.Lock()
		p.locked = true
		if ss.cutErr.Load() != nil {
			// The session is being cut (lifecycle.go): the client's
			// stream ends here, at a message boundary, for its FATAL.
			_ = p.unlock()
			return errCut
		}
	}
	if err := p.handle(typ); err != nil {
		// The message may have reached the client in part.
		ss.outBroken = true
		_ = p.unlock()
		return err
	}
	if ss.sr.R.Buffered() == 0 {
		if err := p.unlock(); err != nil {
			return &Error{Kind: KindClientIO, Message: "write", Err: err}
		}
	}
	return nil
}

// unlock ends a batch: flush to the client and release wmu.
func (p *serverPump) unlock() error {
	ss := (*session)(p)
	if !p.locked {
		return nil
	}
	p.locked = false
	err := ss.cw.Flush()
	ss.wmu.Unlock()
	return err
}

// handle relays one server message. Messages that need no change are
// copied raw; only the ones that carry state or end a response are read.
func (p *serverPump) handle(typ byte) error {
	ss := (*session)(p)
	if ss.hiddenActive.Load() {
		return p.hidden(typ)
	}
	switch typ {
	case 'Z':
		body, err := ss.sr.body()
		if err != nil {
			return err
		}
		p.ready(body)
		return ss.sr.pass(ss.cw)
	case 'E':
		body, err := ss.sr.body()
		if err != nil {
			return err
		}
		if isFatal(body) {
			ss.noteServerFatal(body)
		}
		var pm *posMap
		own := false
		if ss.track {
			ss.mu.Lock()
			if o := ss.q.front(); o != nil {
				pm, own = o.pos, ownStatement(o)
				if o.kind.extended() {
					// The server now skips to Sync; ready pops the rest.
					ss.q.pop()
				}
			}
			ss.mu.Unlock()
		}
		if fixed, ok := fixError(body, pm, own); ok {
			ss.sr.consume()
			return p.write('E', fixed)
		}
		return ss.sr.pass(ss.cw)
	case 'N':
		return p.notice()
	case 'S':
		return p.parameterStatus()
	}
	if !ss.track {
		return ss.sr.forward(ss.cw)
	}
	switch typ {
	case 'C':
		return p.commandComplete()
	case 't':
		ss.mu.Lock()
		strip := 0
		if o := ss.q.front(); o != nil && o.kind == owedDescribeStmt {
			strip = o.strip
		}
		ss.mu.Unlock()
		if strip > 0 {
			return p.parameterDescription(strip)
		}
	case 'T', 'n':
		p.complete(owedDescribeStmt, owedDescribePortal)
	case '1':
		if p.swallow(owedHiddenParse) {
			return ss.sr.skip()
		}
		p.complete(owedParse, 0)
	case '2':
		if p.swallow(owedHiddenBind) {
			return ss.sr.skip()
		}
		p.complete(owedBind, 0)
	case '3':
		if p.swallow(owedHiddenClose) {
			return ss.sr.skip()
		}
		p.complete(owedClose, 0)
	case 'I', 's':
		p.complete(owedExecute, 0)
	}
	return ss.sr.forward(ss.cw)
}

// parameterStatus notes a ParameterStatus (is_superuser, read-only
// settings) and relays it.
func (p *serverPump) parameterStatus() error {
	ss := (*session)(p)
	body, err := ss.sr.body()
	if err != nil {
		return err
	}
	ss.mu.Lock()
	ss.noteParameter(body)
	ss.mu.Unlock()
	return ss.sr.pass(ss.cw)
}

// complete pops the front entry when it is of kind a or b (0: none) and
// reports whether it did. The entry of a ParseComplete confirms its record
// as known to the server (extlocal.go answers only for statements the
// server has; simpleprep.go sends Parse again until it is confirmed).
func (p *serverPump) complete(a, b owedKind) bool {
	ss := (*session)(p)
	ss.mu.Lock()
	o := ss.q.front()
	done := o != nil && (o.kind == a || o.kind == b)
	if done {
		if o.rec != nil {
			o.rec.parsed = true
		}
		ss.q.pop()
	}
	ss.mu.Unlock()
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
	ss := (*session)(p)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(body) == 1 {
		ss.txStatus = body[0]
	}
	ss.readies++
	for !ss.q.empty() {
		k := ss.q.front().kind
		ss.q.pop()
		if k.endsAtReady() {
			break
		}
	}
	if ss.q.empty() {
		ss.dirty = false
		ss.fenceDue |= ss.shimBusy
		ss.shimBusy = 0
	}
	ss.invalid |= ss.pending
	if ss.txStatus == 'I' {
		ss.pending = 0
	}
}

// commandComplete renames the tag when the statement's plan says so.
func (p *serverPump) commandComplete() error {
	ss := (*session)(p)
	tag := ""
	ss.mu.Lock()
	if o := ss.q.front(); o != nil {
		switch o.kind {
		case owedQuery:
			if o.n < len(o.stmts) {
				tag = o.stmts[o.n].Tag
			}
			o.n++
		case owedExecute:
			if len(o.stmts) > 0 {
				tag = o.stmts[0].Tag
			}
			ss.q.pop()
		}
	}
	ss.mu.Unlock()
	if tag == "" {
		return ss.sr.forward(ss.cw)
	}
	if _, err := ss.sr.read(); err != nil {
		return err
	}
	var start int
	ss.sout, start = appendHeader(ss.sout[:0], 'C')
	ss.sout = append(ss.sout, tag...)
	ss.sout = append(ss.sout, 0)
	ss.sout = finishMsg(ss.sout, start)
	_, err := ss.cw.Write(ss.sout)
	return err
}

// parameterDescription hides the strip trailing parameters the proxy
// injected (pgx's default mode binds exactly the parameters it is told of).
func (p *serverPump) parameterDescription(strip int) error {
	ss := (*session)(p)
	body, err := ss.sr.read()
	if err != nil {
		return err
	}
	if len(body) >= 2 {
		n := int(body[0])<<8 | int(body[1])
		if n >= strip && len(body) == 2+4*n {
			n -= strip
			body[0], body[1] = byte(n>>8), byte(n)
			body = body[:2+4*n]
		}
	}
	return p.write('t', body)
}

// write sends a message whose body was read.
func (p *serverPump) write(typ byte, body []byte) error {
	ss := (*session)(p)
	var start int
	ss.sout, start = appendHeader(ss.sout[:0], typ)
	if len(body) < 1024 {
		ss.sout = append(ss.sout, body...)
		ss.sout = finishMsg(ss.sout, start)
		_, err := ss.cw.Write(ss.sout)
		return err
	}
	ss.sout = finishMsgLen(ss.sout, start, len(body))
	if _, err := ss.cw.Write(ss.sout); err != nil {
		return err
	}
	_, err := ss.cw.Write(body)
	return err
}

func finishMsgLen(dst []byte, start, bodyLen int) []byte {
	n := uint32(bodyLen + 4)
	dst[start+1], dst[start+2], dst[start+3], dst[start+4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return dst
}

// isFatal reports whether an ErrorResponse body has severity FATAL or PANIC.
func isFatal(body []byte) bool {
	for len(body) > 1 {
		f := body[0]
		v, rest, ok := cstring(body[1:])
		if !ok {
			return false
		}
		if f == 'V' || f == 'S' {
			return string(v) == "FATAL" || string(v) == "PANIC"
		}
		body = rest
	}
	return false
}

// touchSettings are the touches after which node, read-only state and role
// must be re-read.
const touchSettings = plan.TouchNode | plan.TouchReadOnly | plan.TouchRole | plan.TouchAll
