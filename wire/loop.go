package wire

import (
	"errors"
	"time"
)

// Event loops (loop_linux.go, loopsession_linux.go).
//
// After startup, a session whose two connections are plain TCP or Unix
// sockets is handed to one of Server's event loops (Config.EventLoops)
// instead of starting its pumps. The loop runs the pumps' own step
// functions, so what it relays is relayed exactly as the pumps would, one
// read and one write per batch and no goroutine wake-up. A step never
// waits on the loop's thread: where a pump would wait (a hidden query for
// the session state, a lease or fence the generator must renew, a
// prepared INSERT to prepare again) the step returns errHandover before
// changing anything, and so do Terminate, a message larger than the read
// buffer, end of input, a read or write error, and a peer slow to read (a
// write the socket does not take whole). The session then goes back to
// its goroutine: the pumps start with the buffers as the loop left them
// and take the message from its start.
//
// The pumps give the session back to the loop when both wait for input
// (parker below), after a number of client messages that doubles each
// time the loop handed the session over soon after taking it (a session
// whose statements keep needing the pumps stays with them).

// errWantLoop ends both pumps when the session goes back to its loop.
var errWantLoop = errors.New("back to the event loop")

// Pump states (session.pumpState): a pump sets its parked bit while it
// waits for input in frameReader.poll with no whole message buffered; the
// pump that parks second, when the session may go back to the loop, also
// sets stopping, and wakes the other with a read deadline. A pump that
// sees stopping returns errWantLoop at once, without taking another
// message. Both pumps being parked means no message is half relayed, no
// hidden query runs and nothing waits for a write, so the loop can go on
// from the buffers as they are.
const (
	parkedClient uint32 = 1 << iota
	parkedServer
	stopping
)

// parker is a pump's side of that protocol (nil in tests of frameReader).
type parker struct {
	ss  *session
	bit uint32
}

// park marks the pump parked; true means stop now (errWantLoop).
func (k *parker) park() bool {
	ss := k.ss
	for {
		old := ss.pumpState.Load()
		if old&stopping != 0 {
			return true
		}
		nw := old | k.bit
		if nw&(parkedClient|parkedServer) == parkedClient|parkedServer && ss.mayReenter() {
			nw |= stopping
		}
		if !ss.pumpState.CompareAndSwap(old, nw) {
			continue
		}
		if nw&stopping == 0 {
			return false
		}
		other := ss.client
		if k.bit == parkedClient {
			other = ss.server
		}
		ss.deadline(other, time.Unix(1, 0), true)
		return true
	}
}

// unpark clears the pump's parked bit when it has input again; true means
// stop now (errWantLoop).
func (k *parker) unpark() bool {
	ss := k.ss
	for {
		old := ss.pumpState.Load()
		if old&stopping != 0 {
			return true
		}
		if old&k.bit == 0 || ss.pumpState.CompareAndSwap(old, old&^k.bit) {
			return false
		}
	}
}

// mayReenter reports whether the session should go back to its loop now:
// it was in one before, is not ending, owes the client nothing, and has
// not been handed over soon after its last return (loopMin backs off a
// session that keeps needing its goroutines).
func (ss *session) mayReenter() bool {
	if !ss.loopOK || ss.ctx.Err() != nil || ss.hiddenActive.Load() || ss.msgs.Load()-ss.msgsAtSwitch < ss.loopMin {
		return false
	}
	// With a response still owed the loop would take the session back in
	// the middle of it; its end is the better moment.
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.q.empty() && !ss.dirty
}

// noteHandover adjusts the back-off after the loop handed the session
// over: a session handed over after few messages in the loop waits for
// twice as many messages on its goroutines before it returns, except for
// its first few handovers (a new session learns its state by hidden
// queries, one handover each).
func (ss *session) noteHandover() {
	n := ss.msgs.Load()
	ss.handoverN++
	switch {
	case n-ss.msgsAtSwitch >= loopSettled:
		ss.loopMin = 1
	case ss.handoverN > freeHandovers:
		ss.loopMin = min(2*ss.loopMin, maxLoopMin)
	}
	ss.msgsAtSwitch = n
}

const (
	loopSettled   = 64   // client messages in the loop after which a handover resets the back-off
	freeHandovers = 4    // handovers of a session before the back-off applies
	maxLoopMin    = 4096 // the longest back-off, in client messages
)

// DefaultEventLoops is Config.EventLoops's default for procs GOMAXPROCS:
// one loop per core, sessions assigned in turn. Measured on the 2-core
// benchmark machine (8 clients): one loop relays a round trip with less
// CPU (16.8-18.0 us per prepared INSERT against 19.9-21.9 with two: more
// events per wake-up), but that did not raise the INSERT's throughput, it
// lowered simple-protocol SELECT 1's (38.5-38.8k against 40.5-45.7k a
// second, interleaved rounds by hand), and sessions the proxy answers
// alone (SELECT snowflake.nextval()) are bound by the loop thread, 91-96k
// round trips a second on one loop against 115-121k on two. A load-based
// policy (fill the first loop, move sessions to the second when its
// thread is busy) did not tell the two apart here: in both the loop
// thread's CPU share was about 65%.
//
// A loop thread waits in epoll_wait holding a P (cmd/snowflake-proxy
// gives the loops Ps of their own for that reason).
func DefaultEventLoops(procs int) int { return max(1, procs) }

// EventLoopsAvailable reports whether this platform has event loops
// (Linux, epoll); elsewhere Config.EventLoops is ignored and every session
// runs on its own goroutines.
const EventLoopsAvailable = loopAvailable

// pickLoop returns the event loop for a new session's relay, starting the
// loops on first use, or nil when sessions must use goroutines only.
func (s *Server) pickLoop() *eventLoop {
	if !loopAvailable || s.cfg.EventLoops < 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.loopsFailed {
		return nil
	}
	if s.loops == nil {
		for range s.cfg.EventLoops {
			lp, err := newEventLoop(s.log)
			if err != nil {
				s.log.Warn("no event loops: sessions use goroutines", logError, err)
				for _, lp := range s.loops {
					lp.stop()
				}
				s.loops, s.loopsFailed = nil, true
				return nil
			}
			s.loops = append(s.loops, lp)
		}
	}
	s.loopNext++
	return s.loops[s.loopNext%uint32(len(s.loops))]
}

// stopLoops ends the event loops once no session is left.
func (s *Server) stopLoops() {
	s.mu.Lock()
	loops := s.loops
	s.loops, s.loopsFailed = nil, true
	s.mu.Unlock()
	for _, lp := range loops {
		lp.stop()
	}
}
