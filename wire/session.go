package wire

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

// session is one client connection and its server connection: the
// session goroutine's state (docs/session.md). The pumps own their
// directions (clientPump, serverPump); what more than one goroutine
// touches is in shared; the event loop's part is rel. Before the relay
// starts, the session goroutine alone runs, and uses the pumps' readers
// and writers for the startup phase.
type session struct {
	srv   *Server
	cfg   *Config
	id    uint64
	log   *slog.Logger
	start time.Time

	ctx    context.Context // cancelled when the session must stop
	cancel context.CancelFunc

	connMu  sync.Mutex // guards the assignment of client and server against abort, and aborted
	client  net.Conn   // TLS-wrapped after SSLRequest
	server  net.Conn
	aborted bool // Close closed the connections
	user    string
	db      string

	cp  *clientPump
	sp  *serverPump
	sh  *shared
	rel *netloop.Relay // set when the relay starts, under connMu

	// Startup phase (startup.go, auth.go, startupnode.go).
	saslStarted bool         // the next client answer is a SASLInitialResponse
	authAsked   bool         // the server asked the client for credentials
	scramAsked  bool         // the server asked for SASL (SCRAM)
	startupNode *startupNode // snowflake.node the client set
	ending      ending       // how the startup phase ended without an error (outcome.go)
	out         []byte       // scratch for the startup phase's messages

	// admitted: the session holds a MaxClients slot. cancelSent: the
	// session sent the server a CancelRequest at its end (lifecycle.go).
	admitted   bool
	cancelSent bool
	// The server's BackendKeyData (auth.go), for cancelStatement; no key
	// until the server sent one. The key is 4 bytes in protocol 3.0, up
	// to 256 in 3.2: kept as sent.
	backendPID uint32
	backendKey []byte
	// reapMsgs and reapSince belong to the idle reaper (lifecycle.go).
	reapMsgs  uint64
	reapSince uint64

	// Event loop back-off (loop.go): loopOK, the session entered a loop
	// once, so it may return; msgsAtSwitch is shared.msgs at the last
	// entry to or exit from the loop, loopMin the back-off, handoverN the
	// handovers so far. Written by the session goroutine while the pumps
	// do not run, read by the parker while they do.
	loopOK       bool
	msgsAtSwitch uint64
	loopMin      uint64
	handoverN    int
}

func newSession(srv *Server, c net.Conn, id uint64) *session {
	ss := &session{srv: srv, cfg: &srv.cfg, id: id, client: c, start: time.Now(), loopMin: 1}
	ss.ctx, ss.cancel = context.WithCancel(srv.ctx)
	ss.log = srv.log.With(logSession, id)
	ss.sh = newShared(srv.cfg.Rewriter != nil)
	ss.cp = &clientPump{sh: ss.sh, srv: srv, cfg: &srv.cfg, log: ss.log, ctx: ss.ctx}
	ss.sp = &serverPump{sh: ss.sh}
	return ss
}

// run is the session goroutine: startup (startup.go), then the relay.
func (ss *session) run() {
	defer ss.srv.endSession(ss)
	defer ss.cancel()
	ss.log.Info("session start", logRemote, ss.client.RemoteAddr().String())
	err := ss.startup()
	if err == nil {
		err = ss.relay()
	}
	cut := ss.sh.cutErr.Load()
	told := false
	if cut != nil {
		told = ss.tellCut(cut)
		err = cut
	}
	ss.cancelStatement()
	ss.closeConns()
	if errors.Is(err, errSessionDone) {
		err = nil
	}
	if err != nil {
		ss.srv.countError(err)
	}
	ss.logEnd(err, cut, told)
}

// errSessionDone ends a session that completed without a relay (cancel
// requests, refused authentication); session.ending says how.
var errSessionDone = errors.New("session done")

// abort closes the connections so both pumps end now (Server.Close).
func (ss *session) abort() {
	ss.cancel()
	ss.connMu.Lock()
	defer ss.connMu.Unlock()
	ss.aborted = true
	_ = ss.client.SetDeadline(time.Now())
	if ss.server != nil {
		_ = ss.server.SetDeadline(time.Now())
	}
	// In the loop: both ends see end of input, and the loop hands the
	// session back to its goroutine, whose connections then carry the
	// deadline above (leaveLoop).
	if ss.rel != nil {
		ss.rel.Shutdown(false)
	}
}

// deadline sets c's deadline (read deadline only when readOnly) unless the
// session was aborted, in which case the past deadline of abort stays.
func (ss *session) deadline(c net.Conn, t time.Time, readOnly bool) {
	ss.connMu.Lock()
	defer ss.connMu.Unlock()
	if ss.ctx.Err() != nil {
		t = time.Now()
		readOnly = false
	}
	if readOnly {
		_ = c.SetReadDeadline(t)
	} else {
		_ = c.SetDeadline(t)
	}
}

// setConns installs the client (after TLS) and server connections; an
// abort that came first applies to them at once.
func (ss *session) setConns(client, server net.Conn) {
	ss.connMu.Lock()
	defer ss.connMu.Unlock()
	ss.client, ss.server = client, server
	if ss.ctx.Err() != nil {
		_ = client.SetDeadline(time.Now())
		if server != nil {
			_ = server.SetDeadline(time.Now())
		}
	}
}

func (ss *session) closeConns() {
	ss.connMu.Lock()
	defer ss.connMu.Unlock()
	_ = ss.client.Close()
	if ss.server != nil {
		_ = ss.server.Close()
	}
}

// relay runs the two pumps until both end. The first to end half-closes
// its destination so that the other side sees EOF in turn.
func (ss *session) relay() error {
	ss.sh.relaying.Store(true)
	ss.deadline(ss.client, time.Time{}, false)
	ss.deadline(ss.server, time.Time{}, false)
	ss.cp.cr.Max = ss.cfg.MaxMessageSize
	ss.cp.db, ss.cp.backendPID = ss.db, ss.backendPID
	ss.attachRelay()
	for first := true; ; first = false {
		entered := false
		if lp := ss.srv.pickLoop(); lp != nil {
			if first {
				ss.logTLSPath("event loop")
			}
			var err error
			if entered, err = ss.serveInLoop(lp); err != nil {
				return err
			}
		} else if first {
			ss.logTLSPath("goroutines")
		}
		if !entered {
			ss.loopOK = false // the pumps keep the session to its end
		}
		err, again := ss.runPumps()
		if !again {
			return err
		}
		// Both pumps parked and stopped for the loop (loop.go): lift the
		// deadline that woke the second one.
		ss.rel.ResetParking()
		ss.deadline(ss.client, time.Time{}, false)
		ss.deadline(ss.server, time.Time{}, false)
	}
}

// attachRelay gives the session and its pumps their netloop.Relay, once
// their readers and writers are set.
func (ss *session) attachRelay() {
	rel := netloop.NewRelay(&relaySteps{c: ss.cp, s: ss.sp}, ss,
		[2]*netloop.Input{&ss.cp.cr.Input, &ss.sp.sr.Input}, [2]*bufio.Writer{ss.sh.cw, ss.cp.sw})
	ss.cp.rel, ss.sp.rel = rel, rel
	ss.connMu.Lock() // abort and cut read rel
	ss.rel = rel
	ss.connMu.Unlock()
}

// runPumps runs the two pumps until both end, and returns the first error.
// The first to end half-closes its destination so that the other side sees
// EOF in turn. again is true when both stopped to go back to the loop.
func (ss *session) runPumps() (first error, again bool) {
	ss.cp.cr.UsePoll(ss.client)
	ss.sp.sr.UsePoll(ss.server)
	if ss.cp.sw.Flush() == nil {
		netloop.UseSockWriter(ss.cp.sw, ss.server)
	}
	if ss.sh.cw.Flush() == nil {
		netloop.UseSockWriter(ss.sh.cw, ss.client)
	}
	if ss.rel.HasPending(netloop.Client) {
		// Taken for the server pump, which writes what the loop left for
		// the client before anything the client pump may send.
		ss.sh.wmu.Lock()
	}
	done := make(chan pumpResult, 2)
	ss.srv.wg.Add(2)
	go func() {
		defer ss.srv.wg.Done()
		done <- pumpResult{fromClient: true, err: ss.cp.run()}
	}()
	go func() {
		defer ss.srv.wg.Done()
		done <- pumpResult{err: ss.sp.run()}
	}()
	wantLoop := 0
	for i := 0; i < 2; i++ {
		r := <-done
		if r.err == errWantLoop {
			// The other pump stops for the loop too (parker): wait for it.
			wantLoop++
			continue
		}
		// A lost server connection is the session's end even though its
		// cause is an EOF (regression: it was taken for a pump woken to
		// stop, and the session's end was logged at INFO without error).
		if r.err != nil && (kindOf(r.err) == KindUpstreamIO || !isClosedErr(r.err)) && first == nil {
			first = r.err
		}
		if i > 0 || wantLoop > 0 {
			break
		}
		if r.fromClient {
			if ss.sh.cutErr.Load() == nil {
				// The client is gone (or sent Terminate) while a statement
				// runs: stop it now rather than let it run to its end
				// holding its locks; nobody will read its result.
				ss.cancelStatement()
			}
			if ss.cancelSent {
				ss.deadline(ss.server, time.Now(), false)
			} else {
				// The client is gone or sent Terminate: the server ends
				// its backend on EOF, and the server pump then sees EOF.
				closeWrite(ss.server)
				ss.deadline(ss.server, time.Now().Add(ss.cfg.ShutdownGrace), true)
			}
		} else {
			// The server is gone: nothing more can be served.
			ss.cancel()
			ss.deadline(ss.client, time.Now(), true)
		}
	}
	return first, wantLoop == 2
}

type pumpResult struct {
	fromClient bool
	err        error
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

func isClosedErr(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, context.Canceled) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
