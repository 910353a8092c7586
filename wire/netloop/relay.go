package netloop

import (
	"bufio"
	"net"
	"sync"
	"sync/atomic"
)

// Side is one of a session's two connections. It indexes the arrays of a
// Relay: the input read from that connection, the writer to it.
type Side uint8

const (
	Client Side = iota // the client's connection
	Server             // the server's connection
)

func (s Side) String() string {
	if s == Client {
		return "client"
	}
	return "server"
}

// Stepper is a protocol's message handler as the machinery drives it.
type Stepper interface {
	// Step handles the whole message of type typ at the front of side's
	// input, and must consume exactly that message. On a loop thread
	// (Relay.InLoop) it must not wait: when the message needs what only
	// a pump may do, it returns ErrHandover before changing anything.
	Step(side Side, typ byte) error
}

// Steps are the handlers of both sides, as a loop thread drives them.
type Steps interface {
	Stepper
	// EndTurn ends a loop thread's turn on side's input: it writes what
	// the steps of that turn left buffered. Loop threads only.
	EndTurn(side Side) error
}

// Exit is what the loop hands back with a session.
type Exit struct {
	Side Side  // the side whose event ended the loop's turn
	Err  error // that side's step error; nil for a plain handover
}

// Relay is one session's part of the machinery: its inputs and output
// writers, its registration with a loop, and its pumps' parking.
//
// Ownership: while InLoop, the loop thread owns everything but state and
// fd; once the session's goroutine has the Exit (Wait), the goroutine does,
// and from there the pumps, each its own side. fd is guarded by mu, for
// Shutdown from another goroutine.
type Relay struct {
	steps   Steps
	parking Parking
	in      [2]*Input
	out     [2]*bufio.Writer // out[Client] writes to the client

	inLoop atomic.Bool
	gen    atomic.Uint64 // counts registrations with a loop

	mu sync.Mutex
	fd [2]int // the descriptors a loop polls; -1 otherwise

	rd   [2]*loopReader
	wr   [2]*loopWriter
	ur   *uringRelay // an io_uring loop's state of the session (its thread's)
	exit chan Exit
	// last is the Exit of the last turn in a loop, for the pumps (LastExit).
	last Exit
	// pending: bytes the loop could not write, per destination; the pumps
	// write them first (WritePending). A TLS side's are in its Transport.
	pending [2][]byte
	// tls: the TLS connection of a side that entered a loop, and conns,
	// the connection Enter was given for it, which Leave gives back (the
	// session goroutine's, between Enter and the pumps' start).
	tls   [2]*TLSConn
	conns [2]net.Conn
	// tlsPending: a TLS side's Transport got bytes the loop could not
	// write (Leave), until WritePending.
	tlsPending [2]bool

	state atomic.Uint32 // parked bits and stopping (park.go)
}

// NewRelay returns the Relay of a session whose pumps read in and write
// out. The inputs get their parkers: from now on a Poll that waits may
// end with ErrWantLoop.
func NewRelay(steps Steps, parking Parking, in [2]*Input, out [2]*bufio.Writer) *Relay {
	r := &Relay{steps: steps, parking: parking, in: in, out: out, fd: [2]int{-1, -1}}
	for s := range in {
		in[s].park = &parker{r: r, side: Side(s)}
	}
	return r
}

// InLoop reports whether a loop thread relays the session now. Only that
// thread runs the session's steps then: a step that sees it true runs on
// the loop thread.
func (r *Relay) InLoop() bool { return r.inLoop.Load() }

// LastExit returns how the last turn in a loop ended.
func (r *Relay) LastExit() Exit { return r.last }

// WritePending writes, once, what the loop could not write to side,
// before anything else: into bw, to be flushed by the caller, or for a
// TLS side, its records straight to the socket. It reports whether
// there was any.
func (r *Relay) WritePending(side Side, bw *bufio.Writer) (bool, error) {
	if tc := r.tls[side]; tc != nil {
		if !r.tlsPending[side] {
			return false, nil
		}
		r.tlsPending[side] = false
		return true, tc.t.flush()
	}
	b := r.pending[side]
	if b == nil {
		return false, nil
	}
	r.pending[side] = nil
	_, err := bw.Write(b)
	return true, err
}

// HasPending reports whether the loop left bytes for side.
func (r *Relay) HasPending(side Side) bool {
	if r.tls[side] != nil {
		return r.tlsPending[side]
	}
	return r.pending[side] != nil
}

// ResetParking clears the pumps' parked bits before they start again.
func (r *Relay) ResetParking() { r.state.Store(0) }

// Shutdown shuts the descriptors a loop polls down (both directions, or
// reading only), so that the loop sees end of input and hands the session
// back. Nothing when the session is not in a loop. Callers may hold their
// own connection lock: it comes before mu.
func (r *Relay) Shutdown(readOnly bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, fd := range r.fd {
		if fd >= 0 {
			shutdownFD(fd, readOnly)
		}
	}
}
