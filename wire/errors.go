package wire

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Kind classifies session errors for Stats and logs.
type Kind uint8

const (
	KindClientProtocol   Kind = iota + 1 // malformed or oversized client input
	KindClientIO                         // client connection lost
	KindTLS                              // TLS handshake with the client failed
	KindUpstreamDial                     // the server could not be reached
	KindUpstreamIO                       // the server connection was lost
	KindUpstreamProtocol                 // the server sent something unexpected
	KindUnsupported                      // a request PostgreSQL would also refuse
	KindUpstreamTLS                      // TLS with the server was required and failed
	KindTooManyClients                   // refused: Config.MaxClients sessions already
	KindIdleTimeout                      // ended by Config.IdleClientTimeout
	KindShutdown                         // ended by the proxy at the end of Close's grace
	numKinds
)

var kindNames = [numKinds]string{"", "client_protocol", "client_io", "tls", "upstream_dial", "upstream_io", "upstream_protocol", "unsupported",
	"upstream_tls", "too_many_clients", "idle_timeout", "shutdown"}

// KindNames returns the names of every Kind, as Stats.Errors keys them,
// so that a metrics exporter can show the kinds that never happened as 0.
func KindNames() []string {
	return append([]string(nil), kindNames[1:]...)
}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Error is a session error with the SQLSTATE the client is told. Errors are
// wrapped with %w inside the package and become an ErrorResponse only at
// the boundary (sendError).
type Error struct {
	Kind    Kind
	Code    string // SQLSTATE
	Message string // for the client
	Err     error  // cause, not shown to the client
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("wire: %s: %s: %v", e.Kind, e.Message, e.Err)
	}
	return fmt.Sprintf("wire: %s: %s", e.Kind, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// SQLSTATE codes used by the proxy itself.
const (
	codeProtocolViolation    = "08P01"
	codeConnectionFailure    = "08006"
	codeUnableToConnect      = "08001"
	codeFeatureNotSupported  = "0A000"
	codeInternal             = "XX000"
	codeInvalidAuthorization = "28000"
	codeTooManyConnections   = "53300"
	codeAdminShutdown        = "57P01"
	codeIdleSessionTimeout   = "57P05"
	codeIdleInTxTimeout      = "25P03"
)

// Errors that end a session on the proxy's initiative, with PostgreSQL's
// own SQLSTATEs and texts (the backend sends the same for max_connections,
// a shutdown, idle_session_timeout and idle_in_transaction_session_timeout).
var (
	errTooManyClients = &Error{Kind: KindTooManyClients, Code: codeTooManyConnections, Message: "sorry, too many clients already"}
	errShutdownCut    = &Error{Kind: KindShutdown, Code: codeAdminShutdown, Message: "terminating connection due to administrator command"}
	errIdleCut        = &Error{Kind: KindIdleTimeout, Code: codeIdleSessionTimeout, Message: "terminating connection due to idle-session timeout"}
	errIdleInTxCut    = &Error{Kind: KindIdleTimeout, Code: codeIdleInTxTimeout, Message: "terminating connection due to idle-in-transaction timeout"}
)

// ErrProtocolViolation is matched by every client protocol error.
var ErrProtocolViolation = errors.New("protocol violation")

func protocolError(format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	return &Error{Kind: KindClientProtocol, Code: codeProtocolViolation, Message: msg, Err: ErrProtocolViolation}
}

func kindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// errorResponse converts err into the FATAL ErrorResponse the client gets
// before the proxy closes the connection.
func errorResponse(err error) *pgproto3.ErrorResponse {
	var e *Error
	if errors.As(err, &e) {
		return &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: e.Code, Message: e.Message}
	}
	return &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: codeInternal, Message: "snowflake-proxy: internal error"}
}
