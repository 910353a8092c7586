//go:build linux

package netloop

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// The io_uring backend of Loop. Where the epoll loop makes a system call
// per readiness event, per read and per write, this one keeps a receive
// armed on each side of every session and, once per batch of completions,
// makes one io_uring_enter that submits the sends and receives the batch
// queued and waits for the next completion.
//
// Per completed receive, the session's steps run exactly as in the epoll
// loop: the bytes received (in a buffer the kernel picked from the loop's
// provided buffers, so that an idle session holds none) are what the
// side's loop reader returns, and what the steps write is copied into the
// destination side's send queue, sent with the batch. Sends never wait in
// the kernel: non-blocking, all or nothing (MSG_DONTWAIT, MSG_WAITALL), and
// posting no completion when they sent everything (IOSQE_CQE_SKIP_SUCCESS),
// so that a send the socket took does not end the next wait with nothing
// to do, and once io_uring_enter has returned every send it submitted is
// over: one that posted no completion sent everything, one that did says
// how much went (a full socket buffer: the peer is slow to read, and the
// session goes to its goroutines, which wait for it, as from epoll).
//
// Handover (a step's ErrHandover, end of input, an error, a peer slow to
// read) cannot be immediate: a receive may be armed on the other side,
// and a send submitted by the last enter is confirmed only after it. The
// session is marked leaving, its armed receives are cancelled, and once
// the last completion is in, what was received and not consumed is kept
// for the pumps' inputs, what was not sent becomes the pumps' pending
// writes, and the session goes to its goroutine as from the epoll loop.

// recvBuffers is how many receive buffers (of BufferSize) a loop provides
// the kernel; a variable for the tests that run a loop short of them.
var recvBuffers = 256

const (
	ringEntries = 256 // submission queue; completions 4x

	bufGroup = 1

	uOpRecv   = 1
	uOpSend   = 2
	uOpCancel = 3
	uOpWake   = 4
)

// uringLoop is the io_uring state of a Loop (loop thread only, but for
// incoming, under Loop.mu).
type uringLoop struct {
	rg       *ring
	bufs     *bufRing
	wakeFD   int
	wakeBuf  [8]byte
	woken    atomic.Bool // a wake is in flight: Enter need not write again
	incoming []*Relay    // entered, not yet armed (Loop.mu)
	arriving []*Relay    // the loop thread's copy of incoming
	slots    []*Relay    // by slot; nil: free
	free     []uint32
	active   atomic.Int32 // sessions holding a slot
	// noBuffers counts receives that found no buffer (ENOBUFS), armed
	// again once buffers came back.
	noBuffers atomic.Uint64
	flush     []uslot // sides with bytes queued and no send in flight
	sends     []uslot // sides whose send the last enter submitted
	rearm     []uslot // sides whose receive must be armed again
}

// uslot names one side of the session in a slot.
type uslot struct {
	slot uint32
	side Side
}

// uringRelay is a session's io_uring state, the loop thread's.
type uringRelay struct {
	slot     uint32
	side     [2]uringSide
	inflight int // operations submitted and not over (sends until confirmed)
	leaving  bool
	exit     Exit
}

// uringSide is one side's.
type uringSide struct {
	fd      int
	armed   bool   // a receive is in flight
	busy    bool   // a send of sending[sent:] was submitted, not yet confirmed
	dirty   bool   // in uringLoop.flush
	sending []byte // bytes of the send in flight: untouched until it completes
	sent    int
	queued  []byte // written since, for the next send
}

// uringWriter is the writer under a session's bufio.Writer of one side
// while an io_uring loop relays it: it queues.
type uringWriter struct {
	u    *uringLoop
	r    *Relay
	side Side
}

func (w *uringWriter) Write(p []byte) (int, error) {
	s := &w.r.ur.side[w.side]
	s.queued = append(s.queued, p...)
	if !s.dirty && !s.busy {
		s.dirty = true
		w.u.flush = append(w.u.flush, uslot{w.r.ur.slot, w.side})
	}
	return len(p), nil
}

// URingAvailable reports whether this kernel gives the loop io_uring with
// what it uses (Linux 6.1: single issuer, deferred task work, provided
// buffer rings, sends that end at once), and if not, why: it sets up a
// loop's io_uring state and closes it.
func URingAvailable() error {
	runtime.LockOSThread() // the ring's one submitter
	defer runtime.UnlockOSThread()
	u, err := newURingLoop()
	if err != nil {
		return err
	}
	u.close()
	return nil
}

// probeSendNoWait checks that a send to a full socket ends at once with
// EAGAIN, as the loop's sends rely on (they must never be left waiting:
// see above), rather than waiting for room.
func probeSendNoWait(rg *ring) error {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("io_uring probe: %w", err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	_ = syscall.SetsockoptInt(fds[0], syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096)
	fill := make([]byte, 4096)
	for {
		if _, err := syscall.Write(fds[0], fill); err != nil {
			break
		}
	}
	s := rg.next()
	s.opcode = opSend
	s.fd = int32(fds[0])
	s.addr = uint64(uintptr(unsafe.Pointer(&fill[0])))
	s.len = 1
	s.opFlags = syscall.MSG_NOSIGNAL | syscall.MSG_DONTWAIT | syscall.MSG_WAITALL
	s.flags = sqeSkipSuccess
	if err := rg.enter(false); err != nil {
		return err
	}
	res, got := int32(0), false
	rg.reap(func(c cqe) { res, got = c.res, true })
	runtime.KeepAlive(fill)
	if !got || res != -int32(syscall.EAGAIN) {
		return fmt.Errorf("io_uring: a non-blocking send to a full socket did not end at once with EAGAIN (completion %v, result %d)", got, res)
	}
	return nil
}

func littleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// newURingLoop sets up the io_uring backend of lp.
func newURingLoop() (*uringLoop, error) {
	if !littleEndian() {
		return nil, errors.New("io_uring loop: big-endian machine")
	}
	rg, err := newRing(ringEntries)
	if err != nil {
		return nil, err
	}
	br, err := newBufRing(rg, recvBuffers, BufferSize, bufGroup)
	if err != nil {
		rg.close()
		return nil, err
	}
	if err := probeSendNoWait(rg); err != nil {
		br.close()
		rg.close()
		return nil, err
	}
	fd, _, e := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC, 0)
	if e != 0 {
		br.close()
		rg.close()
		return nil, os.NewSyscallError("eventfd2", e)
	}
	return &uringLoop{rg: rg, bufs: br, wakeFD: int(fd)}, nil
}

func (u *uringLoop) close() {
	u.bufs.close()
	u.rg.close()
	_ = syscall.Close(u.wakeFD)
}

// wake makes the loop thread look at incoming and stopping.
func (u *uringLoop) wake() {
	if u.woken.Swap(true) {
		return
	}
	one := [8]byte{1}
	_, _ = syscall.Write(u.wakeFD, one[:])
}

func tag(op int, slot uint32, side Side) uint64 {
	return uint64(op)<<56 | uint64(side)<<48 | uint64(slot)
}

func (u *uringLoop) armWake() {
	s := u.rg.next()
	s.opcode = opRead
	s.fd = int32(u.wakeFD)
	s.addr = uint64(uintptr(unsafe.Pointer(&u.wakeBuf[0])))
	s.len = 8
	s.userData = tag(uOpWake, 0, 0)
}

func (u *uringLoop) armRecv(r *Relay, side Side) {
	us := &r.ur.side[side]
	s := u.rg.next()
	s.opcode = opRecv
	s.fd = int32(us.fd)
	s.flags = sqeBufferSelect
	s.bufGroup = bufGroup
	s.userData = tag(uOpRecv, r.ur.slot, side)
	us.armed = true
	r.ur.inflight++
}

func (u *uringLoop) send(r *Relay, side Side) {
	us := &r.ur.side[side]
	b := us.sending[us.sent:]
	s := u.rg.next()
	s.opcode = opSend
	s.fd = int32(us.fd)
	s.addr = uint64(uintptr(unsafe.Pointer(&b[0])))
	s.len = uint32(len(b))
	s.opFlags = syscall.MSG_NOSIGNAL | syscall.MSG_DONTWAIT | syscall.MSG_WAITALL
	s.flags = sqeSkipSuccess
	s.userData = tag(uOpSend, r.ur.slot, side)
	u.sends = append(u.sends, uslot{r.ur.slot, side})
	us.busy = true
	r.ur.inflight++
}

// runURing is the loop thread of an io_uring loop. It makes the ring and
// reports whether it could on started.
func runURing(lp *Loop, started chan<- error) {
	runtime.LockOSThread()
	u, err := newURingLoop()
	if err != nil {
		started <- err
		return // the thread ends with its goroutine: locked, it is not reused
	}
	lp.ur = u
	started <- nil
	defer close(lp.done)
	u.run(lp)
}

func (u *uringLoop) run(lp *Loop) {
	leave := enterLoopThread()
	defer leave()
	u.armWake()
	complete := u.complete // bound once: no allocation per batch
	var pass schedPass
	for {
		pass.maybe(lp)
		u.submitBatch()
		if err := u.rg.enter(true); err != nil {
			lp.log.Error("event loop stopped", "err", err)
			return
		}
		u.rg.reap(complete)
		u.confirmSends()
		lp.mu.Lock()
		stopping := lp.stopping
		u.arriving, u.incoming = u.incoming, u.arriving[:0]
		lp.mu.Unlock()
		if stopping {
			return
		}
		for i, r := range u.arriving {
			u.arrive(r)
			u.arriving[i] = nil
		}
	}
}

// submitBatch queues the sends and receives the batch's completions asked
// for; the next enter submits them.
func (u *uringLoop) submitBatch() {
	for _, f := range u.flush {
		r := u.slots[f.slot]
		if r == nil {
			continue // left the loop after it wrote (its bytes went to pending)
		}
		us := &r.ur.side[f.side]
		us.dirty = false
		if us.busy || len(us.queued) == 0 || r.ur.leaving {
			continue
		}
		us.sending, us.queued = us.queued, us.sending[:0]
		us.sent = 0
		u.send(r, f.side)
	}
	u.flush = u.flush[:0]
	u.bufs.publish()
	for _, a := range u.rearm {
		if r := u.slots[a.slot]; r != nil && !r.ur.leaving && !r.ur.side[a.side].armed {
			u.armRecv(r, a.side)
		}
	}
	u.rearm = u.rearm[:0]
}

// arrive gives an entered session a slot and arms its receives.
func (u *uringLoop) arrive(r *Relay) {
	var slot uint32
	if n := len(u.free); n > 0 {
		slot = u.free[n-1]
		u.free = u.free[:n-1]
	} else {
		slot = uint32(len(u.slots))
		u.slots = append(u.slots, nil)
	}
	u.slots[slot] = r
	u.active.Add(1)
	r.ur.slot = slot
	for s := range r.ur.side {
		u.armRecv(r, Side(s))
	}
}

// complete handles one completion.
func (u *uringLoop) complete(c cqe) {
	op := int(c.userData >> 56)
	if op == uOpWake {
		u.woken.Store(false)
		u.armWake()
		return
	}
	r := u.slots[uint32(c.userData)]
	side := Side(c.userData >> 48 & 0xff)
	r.ur.inflight--
	switch op {
	case uOpRecv:
		u.received(r, side, c)
	case uOpSend:
		u.sentSome(r, side, c.res)
	}
	if r.ur.leaving && r.ur.inflight == 0 {
		u.finish(r)
	}
}

// received handles a receive's completion: a step turn on what came.
func (u *uringLoop) received(r *Relay, side Side, c cqe) {
	us := &r.ur.side[side]
	us.armed = false
	rd := r.rd[side]
	var data []byte
	if c.flags&cqeFBuffer != 0 {
		id := uint16(c.flags >> cqeBufferShift)
		if c.res > 0 {
			data = u.bufs.buf(id, int(c.res))
		}
		defer u.bufs.put(id)
	}
	if r.ur.leaving {
		// Cancelled, or came before the cancel: keep it for the pumps.
		rd.pre = append(rd.pre, data...)
		// A receive cancelled, or that found no buffer, read nothing: the
		// pumps read the socket themselves.
		if c.res < 0 && c.res != -int32(syscall.ECANCELED) && c.res != -int32(syscall.ENOBUFS) && rd.err == nil {
			rd.err = os.NewSyscallError("read", syscall.Errno(-c.res))
		}
		return
	}
	switch {
	case c.res == -int32(syscall.ENOBUFS):
		u.noBuffers.Add(1)
		u.rearm = append(u.rearm, uslot{r.ur.slot, side})
		return
	case c.res == 0:
		u.leave(r, side, ErrHandover) // end of input: the pumps read it again
		return
	case c.res < 0:
		rd.err = os.NewSyscallError("read", syscall.Errno(-c.res))
		u.leave(r, side, ErrHandover)
		return
	}
	rd.pre = data
	var err error
	for {
		if err = r.in[side].loopRead(r.steps, side); err != nil || len(rd.pre) == 0 {
			break
		}
	}
	if ferr := r.steps.EndTurn(side); ferr != nil && err == nil {
		err = ferr
	}
	if len(rd.pre) > 0 {
		rd.pre = append([]byte(nil), rd.pre...) // the buffer goes back
	} else {
		rd.pre = nil
	}
	if err != nil {
		u.leave(r, side, err)
		return
	}
	u.rearm = append(u.rearm, uslot{r.ur.slot, side})
}

// sentSome handles a send's completion, which it posts only when it did
// not send everything: res is how much went, or an error (EAGAIN: nothing
// went).
func (u *uringLoop) sentSome(r *Relay, side Side, res int32) {
	us := &r.ur.side[side]
	us.busy = false
	if res > 0 {
		us.sent += int(res)
	}
	if us.sent >= len(us.sending) {
		u.sendDone(r, side) // a kernel that posts successes too
		return
	}
	// A peer slow to read (EAGAIN, or part sent) or an error: the pumps
	// send the rest first, and wait for the peer or meet the error
	// themselves, as after the epoll loop's write; the exit names the side
	// whose turn wrote.
	u.leave(r, 1-side, ErrHandover)
}

// confirmSends ends the sends the last enter submitted that posted no
// completion: they sent everything.
func (u *uringLoop) confirmSends() {
	for _, a := range u.sends {
		r := u.slots[a.slot]
		if r == nil || !r.ur.side[a.side].busy {
			continue // over: sentSome had its completion
		}
		r.ur.side[a.side].busy = false
		r.ur.inflight--
		u.sendDone(r, a.side)
		if r.ur.leaving && r.ur.inflight == 0 {
			u.finish(r)
		}
	}
	u.sends = u.sends[:0]
}

// sendDone clears a side's sent bytes and lists what was queued behind
// them for the next batch.
func (u *uringLoop) sendDone(r *Relay, side Side) {
	us := &r.ur.side[side]
	us.sending, us.sent = us.sending[:0], 0
	if len(us.queued) > 0 && !us.dirty && !r.ur.leaving {
		us.dirty = true
		u.flush = append(u.flush, uslot{r.ur.slot, side})
	}
}

// leave starts the handover of r: everything in flight is cancelled, and
// finish runs once it has all completed.
func (u *uringLoop) leave(r *Relay, side Side, err error) {
	if r.ur.leaving {
		return
	}
	if err == ErrHandover {
		err = nil
	}
	r.ur.leaving = true
	r.ur.exit = Exit{Side: side, Err: err}
	for s := range r.ur.side {
		us := &r.ur.side[s]
		if us.armed { // a send is never left waiting: nothing to cancel
			c := u.rg.next()
			c.opcode = opAsyncCancel
			c.fd = int32(us.fd)
			c.opFlags = cancelFD | cancelAll
			c.userData = tag(uOpCancel, r.ur.slot, Side(s))
			r.ur.inflight++
		}
	}
}

// finish hands r, with nothing in flight, to its goroutine. What its
// loop readers hold is already a copy (received), not a receive buffer.
func (u *uringLoop) finish(r *Relay) {
	for s := range r.ur.side {
		us := &r.ur.side[s]
		var pending []byte
		if us.sent < len(us.sending) {
			pending = append(pending, us.sending[us.sent:]...)
		}
		r.wr[s].pending = append(pending, us.queued...)
	}
	u.slots[r.ur.slot] = nil
	u.free = append(u.free, r.ur.slot)
	u.active.Add(-1)
	exit := r.ur.exit
	r.ur = nil
	r.inLoop.Store(false)
	r.exit <- exit
}

// enterURing registers an entered session with an io_uring loop: the loop
// thread arms it (only that thread submits).
func (lp *Loop) enterURing(r *Relay, cfd, sfd int) error {
	// io_uring waits for readiness itself unless the file is non-blocking,
	// where some kernels complete with EAGAIN instead: the duplicates
	// share the sockets' file status, which Leave's net.FileConn sets
	// non-blocking again.
	for _, fd := range []int{cfd, sfd} {
		if err := syscall.SetNonblock(fd, false); err != nil {
			return fmt.Errorf("io_uring loop: %w", err)
		}
	}
	r.ur = &uringRelay{side: [2]uringSide{{fd: cfd}, {fd: sfd}}}
	for s := range r.out {
		w := &uringWriter{u: lp.ur, r: r, side: Side(s)}
		if r.in[s].tls != nil {
			r.tls[s].t.setDst(w) // the plaintext writer stays the tls.Conn's
		} else {
			r.out[s].Reset(w)
		}
		r.rd[s].fd = -1
	}
	lp.mu.Lock()
	if lp.stopping {
		lp.mu.Unlock()
		return errors.New("io_uring loop: stopping")
	}
	lp.ur.incoming = append(lp.ur.incoming, r)
	lp.mu.Unlock()
	lp.ur.wake()
	return nil
}
