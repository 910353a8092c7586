//go:build linux

package netloop

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Available reports whether this platform has event loops (Linux, epoll).
const Available = true

// Loop relays sessions whose traffic needs no waiting on one OS thread,
// with level-triggered epoll: one read per readiness event and no
// goroutine wake-up per message. Readiness stays reported while data or a
// FIN is unread, so the loop never needs the extra read that ends in
// EAGAIN which the runtime's edge-triggered poller requires (sockReader).
//
// The descriptors it polls are duplicates taken out of the runtime's
// poller (the net.Conns are closed, which does not close the sockets), so
// the runtime never wakes for them. Lifetime: started by its user, stopped
// once every session has left it.
type Loop struct {
	epfd int
	wake [2]int     // pipe: Stop writes to wake[1]
	ur   *uringLoop // the io_uring backend; nil: epoll
	log  *slog.Logger

	mu       sync.Mutex
	sides    map[int32]loopSide // registered descriptors
	stopping bool
	done     chan struct{}
}

// loopSide is one registered descriptor: a session's client or server end,
// and the registration it belongs to (Relay.gen).
type loopSide struct {
	r    *Relay
	side Side
	gen  uint64
}

// IO returns the backend the loop runs.
func (lp *Loop) IO() IO {
	if lp.ur != nil {
		return IOURing
	}
	return IOEpoll
}

// NewLoopIO starts a loop thread on the given backend. IOAuto falls back
// to epoll where io_uring is refused; IOURing fails there.
func NewLoopIO(kind IO, log *slog.Logger) (*Loop, error) {
	if kind == IOEpoll {
		return NewLoop(log)
	}
	lp := &Loop{epfd: -1, wake: [2]int{-1, -1}, log: log, done: make(chan struct{})}
	// The ring is made on the loop thread: it is its only submitter
	// (IORING_SETUP_SINGLE_ISSUER ties the ring to the thread that made it).
	started := make(chan error, 1)
	go runURing(lp, started)
	if err := <-started; err != nil {
		if kind == IOURing {
			return nil, err
		}
		return NewLoop(log)
	}
	return lp, nil
}

// NewLoop starts an epoll loop thread.
func NewLoop(log *slog.Logger) (*Loop, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	lp := &Loop{epfd: epfd, log: log, sides: map[int32]loopSide{}, done: make(chan struct{})}
	if err := syscall.Pipe2(lp.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		_ = syscall.Close(epfd)
		return nil, fmt.Errorf("pipe2: %w", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(lp.wake[0])}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, lp.wake[0], &ev); err != nil {
		lp.closeFDs()
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	go lp.run()
	return lp, nil
}

func (lp *Loop) closeFDs() {
	if lp.ur != nil {
		lp.ur.close()
		return
	}
	_ = syscall.Close(lp.epfd)
	_ = syscall.Close(lp.wake[0])
	_ = syscall.Close(lp.wake[1])
}

// Stop ends the loop thread and releases its descriptors. Every session
// must have left the loop.
func (lp *Loop) Stop() {
	lp.mu.Lock()
	lp.stopping = true
	lp.mu.Unlock()
	if lp.ur != nil {
		lp.ur.wake()
	} else {
		_, _ = syscall.Write(lp.wake[1], []byte{1})
	}
	<-lp.done
	lp.closeFDs()
}

// Registered returns how many descriptors the loop's epoll set holds,
// its own pipe included, as the kernel reports them, and how many
// session sides it knows: after every session has left, 1 and 0.
func (lp *Loop) Registered() (epoll, sides int, err error) {
	if lp.ur != nil {
		// What an epoll set would hold: the wake and each side.
		n := 2 * int(lp.ur.active.Load())
		return 1 + n, n, nil
	}
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", lp.epfd))
	if err != nil {
		return 0, 0, err
	}
	for i := 0; i+4 <= len(info); i++ {
		if string(info[i:i+4]) == "tfd:" {
			epoll++
		}
	}
	lp.mu.Lock()
	sides = len(lp.sides)
	lp.mu.Unlock()
	return epoll, sides, nil
}

// add registers a session's two descriptors. Their sides are recorded
// only once both are in the epoll set: an event for the first before that
// finds no side and is ignored (readiness is level-triggered: it is
// reported again), so the loop cannot hand the session over while the
// second descriptor is still being added. Regression: that handover
// removed only the first, and the second stayed registered after its
// close, its events reported forever. On failure nothing stays registered.
func (lp *Loop) add(r *Relay, cfd, sfd int, gen uint64) error {
	for i, fd := range []int{cfd, sfd} {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
		if err := syscall.EpollCtl(lp.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			if i == 1 {
				_ = syscall.EpollCtl(lp.epfd, syscall.EPOLL_CTL_DEL, cfd, nil)
			}
			return fmt.Errorf("epoll_ctl add %d: %w", fd, err)
		}
		if h := TestHookBetweenAdds.Load(); i == 0 && h != nil {
			(*h)(r)
		}
	}
	lp.mu.Lock()
	lp.sides[int32(cfd)] = loopSide{r: r, side: Client, gen: gen}
	lp.sides[int32(sfd)] = loopSide{r: r, side: Server, gen: gen}
	lp.mu.Unlock()
	return nil
}

// TestHookBetweenAdds, when set by a test, runs between the two epoll
// additions of a session.
var TestHookBetweenAdds atomic.Pointer[func(*Relay)]

// TestHookUnknownEvent, when set by a test, runs on the loop thread for an
// event of a descriptor the loop knows no side of (yet).
var TestHookUnknownEvent atomic.Pointer[func(fd int32)]

func (lp *Loop) remove(cfd, sfd int) {
	lp.mu.Lock()
	delete(lp.sides, int32(cfd))
	delete(lp.sides, int32(sfd))
	lp.mu.Unlock()
}

// run is the loop thread. Sides are looked up for a whole batch of events
// before any is handled, and an event is handled only while its session is
// in the loop under the same registration: a session handed over while
// the batch is handled has inLoop false for its later events, and once its
// goroutine has registered it again (new descriptors, a new gen), they are
// stale too: without that check the loop thread could act on the
// session's next registration while its goroutine was still setting it
// up.
func (lp *Loop) run() {
	runtime.LockOSThread()
	defer close(lp.done)
	leave := enterLoopThread()
	defer leave()
	var evs [128]syscall.EpollEvent
	var sides [128]loopSide
	var pass schedPass
	for {
		pass.maybe(lp)
		n, err := syscall.EpollWait(lp.epfd, evs[:], -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			// Cannot happen with a valid epoll descriptor; sessions still
			// registered would hang, so say so loudly.
			lp.log.Error("event loop stopped", "err", err)
			return
		}
		lp.mu.Lock()
		for i := 0; i < n; i++ {
			sides[i] = lp.sides[evs[i].Fd]
		}
		stopping := lp.stopping
		lp.mu.Unlock()
		if stopping {
			return
		}
		for i := 0; i < n; i++ {
			s := sides[i]
			if s.r == nil {
				if h := TestHookUnknownEvent.Load(); h != nil && evs[i].Fd != int32(lp.wake[0]) {
					(*h)(evs[i].Fd)
				}
				continue
			}
			if s.r.inLoop.Load() && s.r.gen.Load() == s.gen {
				s.r.event(lp, s.side)
			}
		}
		clear(sides[:n])
	}
}

// handover takes a session out of the loop: its goroutine continues with
// the pumps (Relay.Wait). err is a step's error, for the pump of that side
// to return.
func (lp *Loop) handover(r *Relay, side Side, err error) {
	r.inLoop.Store(false)
	cfd, sfd := r.fd[Client], r.fd[Server]
	_ = syscall.EpollCtl(lp.epfd, syscall.EPOLL_CTL_DEL, cfd, nil)
	_ = syscall.EpollCtl(lp.epfd, syscall.EPOLL_CTL_DEL, sfd, nil)
	lp.remove(cfd, sfd)
	if err == ErrHandover {
		err = nil
	}
	r.exit <- Exit{Side: side, Err: err}
}

// loopReader is the reader under an Input while its session is in the
// loop: one raw, non-blocking read per call (epoll), or what the last
// receive brought (io_uring, fd -1).
type loopReader struct {
	fd  int
	pre []byte // bytes buffered before the switch (io_uring: received), returned first
	err error  // the read error that ended the loop's turn
}

func (r *loopReader) Read(p []byte) (int, error) {
	if len(r.pre) > 0 {
		return takePre(&r.pre, p), nil
	}
	if len(p) == 0 {
		return 0, nil
	}
	if r.fd < 0 {
		return 0, errWouldBlock // io_uring: what was received is in pre
	}
	n, e := readRaw(r.fd, p)
	switch {
	case e == syscall.EAGAIN:
		return 0, errWouldBlock
	case e != 0:
		r.err = os.NewSyscallError("read", e)
		return 0, r.err
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// loopWriter is the writer under a session's bufio.Writers while it is in
// the loop: raw non-blocking writes; what the socket does not take now is
// kept in pending (and the session handed over, so that a goroutine waits
// for the peer), never waited for on the loop thread.
type loopWriter struct {
	fd      int
	pending []byte
	err     error
}

func (w *loopWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if len(w.pending) > 0 {
		w.pending = append(w.pending, p...)
		return len(p), nil
	}
	n := len(p)
	for len(p) > 0 {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(w.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case 0:
			p = p[int(r):]
		case syscall.EINTR:
		case syscall.EAGAIN:
			w.pending = append(w.pending, p...)
			return n, nil
		default:
			w.err = os.NewSyscallError("write", e)
			return n - len(p), w.err
		}
	}
	return n, nil
}

// dupFD returns a close-on-exec duplicate of c's descriptor.
func dupFD(rc syscall.RawConn) (int, error) {
	nfd, serr := -1, error(nil)
	err := rc.Control(func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			serr = os.NewSyscallError("fcntl", e)
			return
		}
		nfd = int(r)
	})
	if err == nil {
		err = serr
	}
	return nfd, err
}

func closeFD(fd int) { _ = syscall.Close(fd) }

func shutdownFD(fd int, readOnly bool) {
	how := syscall.SHUT_RDWR
	if readOnly {
		how = syscall.SHUT_RD
	}
	_ = syscall.Shutdown(fd, how)
}

// threadID is the calling thread's id (gettid), for the loop-thread check.
func threadID() int {
	r, _, _ := syscall.RawSyscall(syscall.SYS_GETTID, 0, 0, 0)
	return int(r)
}
