//go:build linux

package netloop

import (
	"errors"
	"net"
	"os"
)

// Enter hands the session to lp, relaying conns (client, server). It
// returns taken false, with nothing changed, when the connections are not
// plain TCP or Unix sockets (TLS, test pipes), a whole message is already
// buffered (no readiness event would report it), a writer cannot flush
// (the pumps meet the error again), or cancelled reports true under the
// descriptor lock (the session is being ended: see Shutdown). Otherwise
// the connections are closed (their sockets live on in duplicates the
// loop polls) and taken is true: call Leave, after Wait when err is nil
// (the loop relays the session), at once when err says why the loop
// refused it.
func (r *Relay) Enter(lp *Loop, conns [2]net.Conn, cancelled func() bool) (taken bool, err error) {
	var socks [2]net.Conn
	for s, c := range conns {
		socks[s] = c
		if tc := asTLS(c); tc != nil {
			// What the tls.Conn decrypts without reading the socket is
			// brought into the input first: no readiness event would
			// announce it in the loop.
			if r.in[s].drainTLS(tc.t) != nil {
				return false, nil
			}
			socks[s] = tc.t.rawConn()
		}
	}
	if !loopConn(socks[Client]) || !loopConn(socks[Server]) || !r.in[Client].loopReady() || !r.in[Server].loopReady() {
		return false, nil
	}
	if r.out[Server].Flush() != nil || r.out[Client].Flush() != nil {
		return false, nil
	}
	cfd, err := dupFD(syscallConn(socks[Client]))
	if err != nil {
		return false, nil
	}
	sfd, err := dupFD(syscallConn(socks[Server]))
	if err != nil {
		closeFD(cfd)
		return false, nil
	}
	r.mu.Lock()
	if cancelled() {
		r.mu.Unlock()
		closeFD(cfd)
		closeFD(sfd)
		return false, nil
	}
	// Closing the net.Conns takes the sockets out of the runtime's poller;
	// the duplicates keep them open. A TLS connection keeps its tls.Conn:
	// only the socket under it is closed, with no close_notify.
	_ = socks[Client].Close()
	_ = socks[Server].Close()
	r.fd = [2]int{cfd, sfd}
	r.mu.Unlock()

	for s, fd := range r.fd {
		in := r.in[s]
		r.wr[s] = &loopWriter{fd: fd}
		if tc := asTLS(conns[s]); tc != nil {
			// The plaintext stays in the input, which goes on reading the
			// tls.Conn; the ciphertext the pumps' reader held goes to the
			// loop's reader, under the tls.Conn.
			r.tls[s], r.conns[s] = tc, conns[s]
			r.rd[s] = &loopReader{fd: fd, pre: in.takeCiphertext()}
			in.src, in.tls = nil, tc.t
			tc.t.enterLoop(r.rd[s], r.wr[s])
			r.out[s].Reset(tc.rw)
			continue
		}
		r.rd[s] = &loopReader{fd: fd, pre: in.takeBuffered()}
		in.src = nil
		in.R.Reset(r.rd[s])
		r.out[s].Reset(r.wr[s])
	}
	if r.exit == nil {
		r.exit = make(chan Exit, 1)
	}
	r.last = Exit{}
	gen := r.gen.Add(1) // before inLoop: see Loop.run
	r.inLoop.Store(true)
	if lp.ur != nil {
		if err := lp.enterURing(r, cfd, sfd); err != nil {
			r.inLoop.Store(false)
			r.ur = nil
			r.last = Exit{Side: Client}
			return true, err
		}
		return true, nil
	}
	if err := lp.add(r, cfd, sfd, gen); err != nil {
		r.inLoop.Store(false)
		r.last = Exit{Side: Client}
		return true, err
	}
	return true, nil
}

// Wait waits until the loop hands the session back, and returns how its
// last turn ended. Session goroutine only, after Enter took the session.
func (r *Relay) Wait() Exit {
	MayWait("the return of a session from its loop")
	r.last = <-r.exit
	return r.last
}

// loopConn reports whether c is a socket the loop can take.
func loopConn(c net.Conn) bool {
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
		return true
	}
	return false
}

// Leave restores the session after the loop handed it back (or refused
// it): new net.Conns on the same sockets, the inputs' buffered bytes and
// read errors kept, the writes the sockets had not taken left for the
// pumps (WritePending), and the last step error (LastExit). On error the
// connections are gone, and the writers write to closed descriptors:
// nothing more may be written.
func (r *Relay) Leave() (conns [2]net.Conn, err error) {
	r.mu.Lock()
	cfd, sfd := r.fd[Client], r.fd[Server]
	r.fd = [2]int{-1, -1}
	client, err1 := fdConn(cfd)
	server, err2 := fdConn(sfd)
	r.mu.Unlock()
	if err := errors.Join(err1, err2); err != nil {
		for _, c := range []net.Conn{client, server} {
			if c != nil {
				_ = c.Close()
			}
		}
		return conns, err
	}
	conns = [2]net.Conn{client, server}
	for s, c := range conns {
		in := r.in[s]
		tc := r.tls[s]
		if tc != nil {
			// The same TLS connection, over the new net.Conn; what the
			// loop could not write goes before its next record.
			r.tlsPending[s] = len(r.wr[s].pending) > 0
			tc.t.leaveLoop(c, r.wr[s].pending)
			in.tls = nil
			c, conns[s] = r.conns[s], r.conns[s]
		}
		in.UsePoll(c)
		if in.src != nil {
			in.src.err = r.rd[s].err
			// What the loop read and its Input did not take yet (an
			// io_uring loop's receives), after what it did.
			in.src.pre = append(in.src.pre, r.rd[s].pre...)
		}
		if tc != nil {
			r.out[s].Reset(tc.rw)
			continue
		}
		// What the sockets did not take is written by the pumps, each
		// before anything else in its direction, so that neither waits
		// for a peer that waits for the other direction to move.
		r.pending[s] = r.wr[s].pending
		r.out[s].Reset(c)
	}
	r.rd, r.wr = [2]*loopReader{}, [2]*loopWriter{}
	return conns, nil
}

// fdConn makes a net.Conn of a descriptor the loop held, and closes the
// descriptor (the net.Conn has its own).
func fdConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "")
	c, err := net.FileConn(f)
	_ = f.Close()
	return c, err
}

// event handles a readiness event of one side on the loop thread.
func (r *Relay) event(lp *Loop, side Side) {
	err := r.in[side].loopRead(r.steps, side)
	if ferr := r.steps.EndTurn(side); ferr != nil && err == nil {
		err = ferr
	}
	if err == nil && (len(r.wr[Client].pending) > 0 || len(r.wr[Server].pending) > 0) {
		err = ErrHandover // a peer is slow to read: wait for it in a goroutine
	}
	if err != nil {
		lp.handover(r, side, err)
	}
}

// loopRead reads once (the loop's readiness is level-triggered: what is
// left is reported again) and steps through every whole message buffered.
// It returns ErrHandover when a goroutine must continue: end of input or
// a read error (read again there), a message that does not fit the buffer
// or has an invalid length (the pumps stream or refuse it), or a step that
// would wait.
//
// A TLS side reads on until its tls.Conn would block: one read of
// plaintext gives one record's, and the records the tls.Conn holds after
// the socket was read raise no readiness event. Its Transport reads the
// socket at most once per turn.
func (in *Input) loopRead(steps Steps, side Side) error {
	if in.tls != nil {
		in.tls.turn()
	}
	for {
		_, err := in.R.Peek(in.R.Buffered() + 1)
		if err != nil && err != errWouldBlock {
			return ErrHandover
		}
	steps:
		for {
			switch in.front() {
			case frameNone, framePartial:
				break steps
			case frameSlow:
				return ErrHandover
			}
			if err := steps.Step(side, in.typ()); err != nil {
				return err
			}
		}
		if in.tls == nil || err != nil {
			return nil
		}
	}
}
