package wire

import (
	"fmt"
	"net"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

// Event loops (netloop).
//
// After startup, a session whose two connections are TCP or Unix sockets,
// in plaintext or netloop.TLSConns, is handed to one of Server's event loops (Config.EventLoops)
// instead of starting its pumps. The loop runs the pumps' own steps
// (netloop.Steps, below), so what it relays is relayed exactly as the
// pumps would, one read and one write per batch and no goroutine wake-up
// (Config.EventLoopIO: with io_uring, one system call per batch of
// completions of every session of the loop).
// A step never waits on the loop's thread: where a pump would wait (a
// hidden query for the session state, a lease or fence the generator must
// renew, a prepared INSERT to prepare again) the step returns
// netloop.ErrHandover before changing anything, and so do Terminate, a
// message larger than the read buffer, end of input, a read or write
// error, and a peer slow to read. The session then goes back to its
// goroutine: the pumps start with the buffers as the loop left them and
// take the message from its start.
//
// The pumps give the session back to the loop when both wait for input
// (netloop's parking), after a number of client messages that doubles each
// time the loop handed the session over soon after taking it (a session
// whose statements keep needing the pumps stays with them).

var (
	errWantLoop = netloop.ErrWantLoop
	errHandover = netloop.ErrHandover
)

// relaySteps are the two pumps' steps as a loop thread drives them
// (netloop.Steps).
type relaySteps struct {
	c *clientPump
	s *serverPump
}

func (r *relaySteps) Step(side netloop.Side, typ byte) error {
	if side == netloop.Client {
		return r.c.Step(side, typ)
	}
	return r.s.Step(side, typ)
}

// EndTurn ends a loop turn: after one on the client's input, flush to the
// server; after one on the server's, end the batch.
func (r *relaySteps) EndTurn(side netloop.Side) error {
	if side == netloop.Client {
		if err := r.c.sw.Flush(); err != nil {
			return &Error{Kind: KindUpstreamIO, Message: "write", Err: err}
		}
		return nil
	}
	if err := r.s.unlock(); err != nil {
		return &Error{Kind: KindClientIO, Message: "write", Err: err}
	}
	return nil
}

// Wake is netloop.Parking.Wake: a read deadline in the past.
func (ss *session) Wake(side netloop.Side) {
	c := ss.client
	if side == netloop.Server {
		c = ss.server
	}
	ss.deadline(c, time.Unix(1, 0), true)
}

// MayReenter is netloop.Parking.MayReenter: the session should go back to
// its loop now: it was in one before, is not ending, owes the client
// nothing, and has not been handed over soon after its last return
// (loopMin backs off a session that keeps needing its goroutines).
func (ss *session) MayReenter() bool {
	if !ss.loopOK || ss.ctx.Err() != nil || ss.sh.hiddenActive.Load() || ss.sh.msgs.Load()-ss.msgsAtSwitch < ss.loopMin {
		return false
	}
	// With a response still owed the loop would take the session back in
	// the middle of it; its end is the better moment.
	ss.sh.mu.Lock()
	defer ss.sh.mu.Unlock()
	return ss.sh.q.empty() && !ss.sh.dirty
}

// serveInLoop relays the session on lp while its traffic allows, and
// returns once the loop has handed it back with both connections restored
// as net.Conns; the pumps take over from there. It returns at once, with
// the session unchanged and entered false, when the loop cannot take it
// (netloop.Relay.Enter).
func (ss *session) serveInLoop(lp *netloop.Loop) (entered bool, err error) {
	ss.msgsAtSwitch = ss.sh.msgs.Load()
	taken, err := ss.rel.Enter(lp, [2]net.Conn{ss.client, ss.server}, func() bool { return ss.ctx.Err() != nil })
	if !taken {
		return false, nil
	}
	if err != nil {
		ss.log.Warn("event loop refused the session", logError, err)
	} else {
		entered = true
		ss.loopOK = true
		ss.srv.stats.loopIn.Add(1)
		x := ss.rel.Wait()
		ss.srv.stats.handovers.Add(1)
		ss.noteHandover()
		ss.log.Debug("event loop handed the session over", "client_side", x.Side == netloop.Client, logError, x.Err, "back_off", ss.loopMin)
	}
	return entered, ss.leaveLoop()
}

// leaveLoop installs the connections the loop gave back; an abort or cut
// that came meanwhile applies to them at once.
func (ss *session) leaveLoop() error {
	conns, err := ss.rel.Leave()
	if err != nil {
		// cw still writes to the descriptor, now closed: nothing more may
		// be written to the client (tellCut).
		ss.sp.outBroken = true
		return &Error{Kind: KindClientIO, Message: "leave event loop", Err: err}
	}
	ss.setConns(conns[netloop.Client], conns[netloop.Server])
	return nil
}

// noteHandover adjusts the back-off after the loop handed the session
// over: a session handed over after few messages in the loop waits for
// twice as many messages on its goroutines before it returns, except for
// its first few handovers (a new session learns its state by hidden
// queries, one handover each).
func (ss *session) noteHandover() {
	n := ss.sh.msgs.Load()
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

// DefaultEventLoops is Config.EventLoops's default for procs GOMAXPROCS
// (the CPUs the process may use): one loop per two, at least one,
// sessions assigned in turn. A loop relays for sessions whose servers and
// clients need the CPUs too, and fewer loops wait for more completions at
// a time: on the 2-CPU benchmark machine one loop used less CPU per
// transaction than two in every 8-client workload, statements the proxy
// answers alone included, for as many transactions a second or more
// (bench/README.md, "io_uring loops and the number of loops").
//
// A loop thread waits in the kernel holding a P (cmd/snowflake-proxy
// gives the loops Ps of their own for that reason).
func DefaultEventLoops(procs int) int { return max(1, procs/2) }

// EventLoopsAvailable reports whether this platform has event loops
// (Linux, io_uring or epoll); elsewhere Config.EventLoops is ignored and
// every session runs on its own goroutines.
const EventLoopsAvailable = netloop.Available

// CheckEventLoopIO reports whether s is a valid Config.EventLoopIO, and,
// when it asks for io_uring by name, whether the kernel allows it (auto
// falls back to epoll; an explicit choice does not fall back).
func CheckEventLoopIO(s string) error {
	io, err := netloop.ParseIO(s)
	if err != nil {
		return err
	}
	if io == netloop.IOURing && netloop.Available {
		if err := netloop.URingAvailable(); err != nil {
			return fmt.Errorf("io_uring refused here (%w): use epoll or auto", err)
		}
	}
	return nil
}

// pickLoop returns the event loop for a new session's relay, starting the
// loops on first use, or nil when sessions must use goroutines only.
func (s *Server) pickLoop() *netloop.Loop {
	if !netloop.Available || s.cfg.EventLoops < 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.loopsFailed {
		return nil
	}
	if s.loops == nil {
		for range s.cfg.EventLoops {
			lp, err := netloop.NewLoopIO(s.loopIO, s.log)
			if err != nil {
				s.log.Warn("no event loops: sessions use goroutines", logError, err)
				for _, lp := range s.loops {
					lp.Stop()
				}
				s.loops, s.loopsFailed = nil, true
				return nil
			}
			s.loops = append(s.loops, lp)
		}
		s.log.Info("event loops started", "loops", len(s.loops), "io", s.loops[0].IO().String())
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
		lp.Stop()
	}
}
