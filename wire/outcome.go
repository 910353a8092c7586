package wire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// Outcome is how a session ended, named in its log line and counted in
// Stats.Ended.
type Outcome uint8

const (
	OutcomeClientClosed          Outcome = iota + 1 // the client sent Terminate
	OutcomeClientDisconnected                       // the client's connection ended without Terminate
	OutcomeDrained                                  // the client ended it while the proxy drained (Close's grace)
	OutcomeShutdownCut                              // cut at the end of Close's grace: FATAL 57P01
	OutcomeIdleTimeout                              // Config.IdleClientTimeout: FATAL 57P05 or 25P03
	OutcomeLoginRefused                             // the server refused the login (28P01 wrong password, 3D000 ...)
	OutcomeRefused                                  // the proxy refused the client (TLS required, protocol, startup node)
	OutcomeTooManyClients                           // Config.MaxClients: FATAL 53300
	OutcomeTLSFailed                                // the TLS handshake with the client failed
	OutcomeProtocolError                            // malformed client input: FATAL 08P01
	OutcomeUpstreamTerminated                       // the server ended the session with a FATAL (pg_terminate_backend, shutdown)
	OutcomeUpstreamLost                             // the server connection broke without a word: 08006
	OutcomeUpstreamUnreachable                      // the server could not be reached, or not with the TLS asked: 08001
	OutcomeUpstreamProtocolError                    // the server sent something the proxy cannot relay
	OutcomeCancelRequest                            // a CancelRequest, forwarded
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"", "client_closed", "client_disconnected", "drained", "shutdown_cut", "idle_timeout",
	"login_refused", "refused", "too_many_clients", "tls_failed", "protocol_error", "upstream_terminated", "upstream_lost",
	"upstream_unreachable", "upstream_protocol_error", "cancel_request"}

func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// OutcomeNames returns the names of every Outcome, as Stats.Ended keys
// them, so that a metrics exporter can show those that never happened.
func OutcomeNames() []string {
	return append([]string(nil), outcomeNames[1:]...)
}

// outcomeOfKind is the outcome of a session that ended with an error of
// kind k.
var outcomeOfKind = [numKinds]Outcome{
	KindClientProtocol:   OutcomeProtocolError,
	KindClientIO:         OutcomeClientDisconnected,
	KindTLS:              OutcomeTLSFailed,
	KindUpstreamDial:     OutcomeUpstreamUnreachable,
	KindUpstreamIO:       OutcomeUpstreamLost,
	KindUpstreamProtocol: OutcomeUpstreamProtocolError,
	KindUnsupported:      OutcomeRefused,
	KindUpstreamTLS:      OutcomeUpstreamUnreachable,
	KindTooManyClients:   OutcomeTooManyClients,
	KindIdleTimeout:      OutcomeIdleTimeout,
	KindShutdown:         OutcomeShutdownCut,
}

// serverFatal is an ErrorResponse the server ended the session with, or
// refused the login with: its SQLSTATE and message (for the log; a
// server's message holds no password).
type serverFatal struct{ code, message string }

// noteServerFatal records that the server sent the FATAL (or login
// refusal) body: its close is expected, and the session's end names it.
func (sh *shared) noteServerFatal(f pgmsg.Fields) *serverFatal {
	code, _ := f.Get('C')
	message, _ := f.Get('M')
	sf := &serverFatal{code: string(code), message: string(message)}
	sh.sawFatal.Store(true)
	sh.serverFatal.Store(sf)
	return sf
}

// ending is what the session knows of its end besides its error: set by
// the startup phase when it ends without one (errSessionDone).
type ending struct {
	outcome Outcome
	code    string // SQLSTATE the client was told
	message string
}

// end classifies the end of the session from its error (nil for an end
// without one) and cut (the proxy's own reason, if any).
func (ss *session) end(err error, cut *Error) (Outcome, string, string) {
	if cut != nil {
		return outcomeOfKind[cut.Kind], cut.Code, ""
	}
	if e := ss.ending; e.outcome != 0 {
		return e.outcome, e.code, e.message
	}
	f := ss.sh.serverFatal.Load()
	if k := kindOf(err); k != 0 {
		if k == KindUpstreamIO && f != nil {
			return OutcomeUpstreamTerminated, f.code, f.message
		}
		var e *Error
		errors.As(err, &e)
		return outcomeOfKind[k], e.Code, ""
	}
	if f != nil {
		return OutcomeUpstreamTerminated, f.code, f.message
	}
	o := OutcomeClientDisconnected
	if ss.sh.terminated.Load() {
		o = OutcomeClientClosed
	}
	select {
	case <-ss.srv.closed:
		o = OutcomeDrained
	default:
	}
	return o, "", ""
}

// logEnd counts the session's end by outcome and logs it: INFO for the
// ends that are part of a client's life (closed, disconnected, drained,
// idle), WARN for refusals and failures, DEBUG for cancel requests and
// connections that ended before a startup packet without an error. The
// line carries the outcome, the SQLSTATE the client was told or the
// server ended it with, and the error when there is one.
func (ss *session) logEnd(err error, cut *Error, told bool) {
	o, code, message := ss.end(err, cut)
	ss.srv.stats.ended[o].Add(1)
	lvl := slog.LevelWarn
	switch o {
	case OutcomeClientClosed, OutcomeClientDisconnected, OutcomeDrained, OutcomeIdleTimeout:
		lvl = slog.LevelInfo
	case OutcomeCancelRequest:
		lvl = slog.LevelDebug
	}
	if err == nil && ss.user == "" {
		lvl = slog.LevelDebug
	}
	attrs := []any{logUser, ss.user, logDatabase, ss.db, logDuration, time.Since(ss.start).String(), logOutcome, o.String()}
	if code != "" {
		attrs = append(attrs, logSQLState, code)
	}
	if message != "" {
		attrs = append(attrs, logMessage, message)
	}
	if k := kindOf(err); k != 0 {
		attrs = append(attrs, logKind, k.String())
	}
	if err != nil && cut == nil {
		attrs = append(attrs, logError, err)
	}
	if cut != nil {
		attrs = append(attrs, "client_told", told)
	}
	ss.log.Log(context.Background(), lvl, "session end", attrs...)
}
