package wire

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

// session is one client connection and its server connection.
//
// Ownership: the client pump (client.go) owns cr, sw, the statement and
// portal records, the mirror and out; the server pump (relay.go) owns sr
// and sout. cw is shared under wmu; the owed queue and the fields below mu
// are shared under mu. Lock order: wmu before mu.
type session struct {
	srv   *Server
	cfg   *Config
	id    uint64
	log   *slog.Logger
	start time.Time

	ctx    context.Context // cancelled when the session must stop
	cancel context.CancelFunc

	connMu sync.Mutex // guards the assignment of client and server against abort
	client net.Conn   // TLS-wrapped after SSLRequest
	server net.Conn
	user   string
	db     string

	cr  frameReader   // from the client
	sw  *bufio.Writer // to the server
	sr  frameReader   // from the server
	cw  *bufio.Writer // to the client, under wmu
	wmu sync.Mutex

	track bool // a Rewriter is configured: responses are matched to requests

	saslStarted bool // startup: the next client answer is a SASLInitialResponse
	authAsked   bool // startup: the server asked the client for credentials

	startupNode *startupNode // startup: snowflake.node the client set (startupnode.go)

	mu       sync.Mutex
	q        owedQueue
	txStatus byte       // from the last ReadyForQuery
	dirty    bool       // something was forwarded since the last safe ReadyForQuery
	invalid  plan.Touch // mirror state the server pump learned is stale
	pending  plan.Touch // touches of the current transaction, reapplied at each ReadyForQuery
	// shimBusy holds the touchFence bits of statements forwarded and not
	// yet answered: while they run, the server's shim may issue IDs, so the
	// fast path stays off (IDs of a session follow execution order). When
	// the response is complete they move to fenceDue, and the next fast-path
	// ID first fences (ids.go).
	shimBusy plan.Touch
	fenceDue plan.Touch
	params   map[string]string

	hiddenActive atomic.Bool   // a hidden query's response is being consumed
	hq           hiddenQuery   // written by the server pump while hiddenActive
	hqDone       chan struct{} // signalled when hq is complete

	clientGone atomic.Bool // the client pump has ended
	terminated atomic.Bool // the client sent Terminate
	sawFatal   atomic.Bool // the server sent a FATAL error: its close is expected
	// serverFatal is the server's FATAL (or login refusal), for the
	// session's end (outcome.go).
	serverFatal atomic.Pointer[serverFatal]
	// ending is how the startup phase ended without an error (outcome.go;
	// session goroutine only).
	ending     ending
	serverLost atomic.Bool // the server connection ended without the proxy asking
	fatalSent  atomic.Bool // the proxy sent the client a FATAL error

	// Lifecycle (lifecycle.go). relaying: startup is over. cutErr: why
	// the proxy ends the session (nil: it does not). outBroken: a server
	// message may have reached the client in part (set by whoever runs the
	// server steps, read by the session goroutine once they stopped).
	// aborted: Close closed the connections (under connMu). admitted: the
	// session holds a MaxClients slot. syncs and readies count the client's
	// Query, Sync and FunctionCall messages and the server's ReadyForQuery
	// messages without a Rewriter (with one, the owed queue tells); readies
	// is guarded by mu. reapMsgs and reapSince belong to the idle reaper.
	relaying   atomic.Bool
	cutErr     atomic.Pointer[Error]
	outBroken  bool
	aborted    bool
	admitted   bool
	syncs      atomic.Uint64
	readies    uint64
	reapMsgs   uint64
	reapSince  uint64
	cancelSent bool
	// The server's BackendKeyData (auth.go), for cancelStatement; no key
	// until the server sent one. The key is 4 bytes in protocol 3.0, up
	// to 256 in 3.2: kept as sent.
	backendPID uint32
	backendKey []byte

	// Client pump state.
	stmts         map[string]*stmtRec
	unnamed       *stmtRec
	portals       map[string]*stmtRec
	unnamedPortal *stmtRec
	stmtLive      bool // an unnamed statement may exist on the server
	// serverSeen: a mirror refresh has named the server process; pooled:
	// one named another than the BackendKeyData's (simpleprep.go).
	serverSeen bool
	pooled     bool
	portalLive bool // an unnamed portal may exist on the server
	mirror     mirror
	wouldWait  bool   // set on the event loop's thread instead of waiting (ids.go)
	out        []byte // scratch for messages the client pump builds
	vals       []plan.Value
	// fastIDs is how many of vals the fast path issued (ids.go), so that
	// a local answer can count them in Stats.LocalIDs.
	fastIDs int
	// slotFallback is why values (ids.go) left the first Nextval slot of
	// the last execution unfilled, for Stats.Fallbacks.
	slotFallback Fallback
	// Simple-protocol INSERTs prepared by the session (simpleprep.go):
	// by text with parameters, the texts seen once (hashes), and scratch
	// for the text.
	prepared map[string]*preparedQuery
	seen     map[uint64]struct{}
	text     []byte
	sout     []byte // scratch for the server pump
	locked   bool   // the server pump holds wmu for the batch it relays

	// Event loop (loop.go, netloop). rel is the loop machinery's part of
	// the session. loopOK: the session entered a loop once, so it may
	// return. msgs counts client messages (written only by whoever runs
	// the client steps, read by the other pump and the reaper);
	// msgsAtSwitch is msgs at the last entry to or exit from the loop,
	// loopMin the back-off, handoverN the handovers so far (session
	// goroutine, read by the parker).
	rel          *netloop.Relay
	loopOK       bool
	msgs         atomic.Uint64
	msgsAtSwitch uint64
	loopMin      uint64
	handoverN    int
}

func newSession(srv *Server, c net.Conn, id uint64) *session {
	ss := &session{srv: srv, cfg: &srv.cfg, id: id, client: c, start: time.Now(),
		track: srv.cfg.Rewriter != nil, txStatus: 'I', params: map[string]string{}, hqDone: make(chan struct{}, 1),
		loopMin: 1}
	ss.ctx, ss.cancel = context.WithCancel(srv.ctx)
	ss.log = srv.log.With(logSession, id)
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
	cut := ss.cutErr.Load()
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
	ss.relaying.Store(true)
	ss.deadline(ss.client, time.Time{}, false)
	ss.deadline(ss.server, time.Time{}, false)
	ss.cr.Max = ss.cfg.MaxMessageSize
	ss.connMu.Lock() // abort and cut read rel
	ss.rel = netloop.NewRelay(ss, ss, [2]*netloop.Input{&ss.cr.Input, &ss.sr.Input}, [2]*bufio.Writer{ss.cw, ss.sw})
	ss.connMu.Unlock()
	for {
		entered := false
		if lp := ss.srv.pickLoop(); lp != nil {
			var err error
			if entered, err = ss.serveInLoop(lp); err != nil {
				return err
			}
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

// runPumps runs the two pumps until both end, and returns the first error.
// The first to end half-closes its destination so that the other side sees
// EOF in turn. again is true when both stopped to go back to the loop.
func (ss *session) runPumps() (first error, again bool) {
	ss.cr.UsePoll(ss.client)
	ss.sr.UsePoll(ss.server)
	if ss.sw.Flush() == nil {
		netloop.UseSockWriter(ss.sw, ss.server)
	}
	if ss.cw.Flush() == nil {
		netloop.UseSockWriter(ss.cw, ss.client)
	}
	if ss.rel.HasPending(netloop.Client) {
		// Taken for the server pump, which writes what the loop left for
		// the client before anything the client pump may send.
		ss.wmu.Lock()
	}
	done := make(chan pumpResult, 2)
	ss.srv.wg.Add(2)
	go (*clientPump)(ss).run(done)
	go (*serverPump)(ss).run(done)
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
			if ss.cutErr.Load() == nil {
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

// sendToClient writes a message built by the client pump to the client,
// after everything the server pump wrote before, and flushes.
func (ss *session) sendToClient(b []byte) error {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if _, err := ss.cw.Write(b); err != nil {
		return err
	}
	return ss.cw.Flush()
}

// fatal sends err to the client as a FATAL ErrorResponse.
func (ss *session) fatal(err error) error {
	ss.fatalSent.Store(true)
	b, _ := errorResponse(err).Encode(nil)
	return ss.sendToClient(b)
}
