//go:build linux

package wire

import (
	"errors"
	"net"
	"os"
	"time"
)

// serveInLoop relays the session on lp while its traffic allows
// (loop.go), and returns once the loop has handed it back with both
// connections restored as net.Conns; the pumps take over from there. It
// returns at once, with the session unchanged and entered false, when the connections are
// not plain TCP or Unix sockets (TLS, test pipes) or a whole message is
// already buffered (no readiness event would report it).
func (ss *session) serveInLoop(lp *eventLoop) (entered bool, err error) {
	if !loopConn(ss.client) || !loopConn(ss.server) || !ss.cr.loopReady() || !ss.sr.loopReady() {
		return false, nil
	}
	if ss.sw.Flush() != nil || ss.cw.Flush() != nil {
		return false, nil // the pumps meet the error again
	}
	cfd, err := dupFD(syscallConn(ss.client))
	if err != nil {
		return false, nil
	}
	sfd, err := dupFD(syscallConn(ss.server))
	if err != nil {
		closeFD(cfd)
		return false, nil
	}
	ss.connMu.Lock()
	if ss.ctx.Err() != nil {
		ss.connMu.Unlock()
		closeFD(cfd)
		closeFD(sfd)
		return false, nil
	}
	// Closing the net.Conns takes the sockets out of the runtime's poller;
	// the duplicates keep them open.
	_ = ss.client.Close()
	_ = ss.server.Close()
	ss.loopFD = [2]int{cfd, sfd}
	ss.connMu.Unlock()

	ss.loopRd[0] = &loopReader{fd: cfd, pre: ss.cr.takeBuffered()}
	ss.loopRd[1] = &loopReader{fd: sfd, pre: ss.sr.takeBuffered()}
	ss.loopWr[0], ss.loopWr[1] = &loopWriter{fd: cfd}, &loopWriter{fd: sfd}
	ss.cr.src, ss.sr.src = nil, nil
	ss.cr.r.Reset(ss.loopRd[0])
	ss.sr.r.Reset(ss.loopRd[1])
	ss.cw.Reset(ss.loopWr[0])
	ss.sw.Reset(ss.loopWr[1])
	if ss.loopStep[0] == nil {
		ss.loopStep[0] = ss.loopClientStep
		ss.loopStep[1] = (*serverPump)(ss).step
		ss.loopExit = make(chan loopExit, 1)
	}
	ss.loopErr = loopExit{}
	ss.msgsAtSwitch = ss.msgs.Load()
	gen := ss.loopGen.Add(1) // before inLoop: see eventLoop.run
	ss.inLoop.Store(true)
	x := loopExit{client: true}
	if err := lp.add(ss, cfd, sfd, gen); err != nil {
		ss.inLoop.Store(false)
		ss.log.Warn("event loop refused the session", logError, err)
	} else {
		entered = true
		ss.loopOK = true
		ss.srv.stats.loopIn.Add(1)
		x = <-ss.loopExit
		ss.srv.stats.handovers.Add(1)
		ss.noteHandover()
		ss.log.Debug("event loop handed the session over", "client_side", x.client, logError, x.err, "back_off", ss.loopMin)
	}
	return entered, ss.leaveLoop(x)
}

// loopConn reports whether c is a socket the loop can take.
func loopConn(c net.Conn) bool {
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
		return true
	}
	return false
}

// leaveLoop restores the session after the loop handed it back: net.Conns
// on the same sockets, the readers' buffered input and read errors kept,
// the writes the sockets had not taken and a step's error left for the
// pumps.
func (ss *session) leaveLoop(x loopExit) error {
	ss.connMu.Lock()
	cfd, sfd := ss.loopFD[0], ss.loopFD[1]
	ss.loopFD = [2]int{-1, -1}
	client, err1 := fdConn(cfd)
	server, err2 := fdConn(sfd)
	if err := errors.Join(err1, err2); err != nil {
		for _, c := range []net.Conn{client, server} {
			if c != nil {
				_ = c.Close()
			}
		}
		// cw still writes to the descriptor, now closed: nothing more may
		// be written to the client (tellCut).
		ss.outBroken = true
		ss.connMu.Unlock()
		return &Error{Kind: KindClientIO, Message: "leave event loop", Err: err}
	}
	ss.client, ss.server = client, server
	if ss.ctx.Err() != nil {
		_ = client.SetDeadline(time.Now())
		_ = server.SetDeadline(time.Now())
	}
	ss.connMu.Unlock()

	ss.cr.usePoll(client)
	ss.sr.usePoll(server)
	if ss.cr.src != nil {
		ss.cr.src.err = ss.loopRd[0].err
	}
	if ss.sr.src != nil {
		ss.sr.src.err = ss.loopRd[1].err
	}
	// What the sockets did not take is written by the pumps, each before
	// anything else in its direction, so that neither waits for a peer
	// that waits for the other direction to move.
	ss.pendingOut = [2][]byte{ss.loopWr[0].pending, ss.loopWr[1].pending}
	ss.loopRd, ss.loopWr = [2]*loopReader{}, [2]*loopWriter{}
	ss.cw.Reset(client)
	ss.sw.Reset(server)
	ss.loopErr = x
	return nil
}

// fdConn makes a net.Conn of a descriptor the loop held, and closes the
// descriptor (the net.Conn has its own).
func fdConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "")
	c, err := net.FileConn(f)
	_ = f.Close()
	return c, err
}

// loopEvent handles a readiness event of one side on the loop thread.
func (ss *session) loopEvent(lp *eventLoop, client bool) {
	var err error
	if client {
		err = ss.cr.loopRead(ss.loopStep[0])
		if ferr := ss.sw.Flush(); ferr != nil && err == nil {
			err = &Error{Kind: KindUpstreamIO, Message: "write", Err: ferr}
		}
	} else {
		err = ss.sr.loopRead(ss.loopStep[1])
		if ferr := (*serverPump)(ss).unlock(); ferr != nil && err == nil {
			err = &Error{Kind: KindClientIO, Message: "write", Err: ferr}
		}
	}
	if err == nil && (len(ss.loopWr[0].pending) > 0 || len(ss.loopWr[1].pending) > 0) {
		err = errHandover // a peer is slow to read: wait for it in a goroutine
	}
	if err != nil {
		lp.handover(ss, client, err)
	}
}

// loopReady reports whether the loop can take over f: no read error kept
// for the next read, and no whole message (nor a header for the blocking
// path) buffered: the loop steps only after a readiness event.
func (f *frameReader) loopReady() bool {
	if f.src != nil && f.src.err != nil {
		return false
	}
	st := f.front()
	return st == frameNone || st == framePartial
}

// takeBuffered returns a copy of what f has read and not consumed,
// including what its sockReader still holds from an earlier reader.
func (f *frameReader) takeBuffered() []byte {
	var out []byte
	if n := f.r.Buffered(); n > 0 {
		b, _ := f.r.Peek(n)
		out = append(out, b...)
	}
	if f.src != nil && len(f.src.pre) > 0 {
		out = append(out, f.src.pre...)
	}
	return out
}

// loopClientStep is the client pump's step on the loop thread. Terminate
// is handed over: the pumps end the session.
func (ss *session) loopClientStep(typ byte) error {
	if typ == 'X' {
		return errHandover
	}
	return (*clientPump)(ss).step(typ)
}

// loopRead reads once (the loop's readiness is level-triggered: what is
// left is reported again) and steps through every whole message buffered.
// It returns errHandover when a goroutine must continue: end of input or
// a read error (read again there), a message that does not fit the buffer
// or has an invalid length (the pumps stream or refuse it), or a step that
// would wait.
func (f *frameReader) loopRead(step func(typ byte) error) error {
	if _, err := f.r.Peek(f.r.Buffered() + 1); err != nil && err != errWouldBlock {
		return errHandover
	}
	for {
		switch f.front() {
		case frameNone, framePartial:
			return nil
		case frameSlow:
			return errHandover
		}
		typ, _, _ := f.next()
		if err := step(typ); err != nil {
			return err
		}
	}
}
