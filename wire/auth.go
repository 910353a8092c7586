package wire

import (
	"bytes"
	"encoding/binary"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// maxCancelKey is the longest secret key of a BackendKeyData (protocol
// 3.2; 3.0 keys are 4 bytes).
const maxCancelKey = 256

// Authentication request codes (AuthenticationXXX messages).
const (
	authOK           = 0
	authSASL         = 10
	authSASLFinal    = 12
	authGSSContinue  = 8
	authSASLContinue = 11
)

// checkChannelBinding refuses, with channel_binding=require in the
// upstream's settings, a server that asks for anything but SCRAM or
// admits the session without asking, as libpq refuses it: the operator
// asked that no password travel to a server that did not prove itself
// with SCRAM. The binding to the TLS connection cannot cross the proxy
// (the client's TLS ends here); the server's certificate is verified
// instead (the proxy accepts channel_binding=require only with
// sslmode=verify-ca or verify-full).
func (ss *session) checkChannelBinding(body []byte) error {
	if !ss.cfg.Upstream.ChannelBindingRequired || len(body) < 4 {
		return nil
	}
	var msg string
	switch binary.BigEndian.Uint32(body) {
	case authSASL:
		ss.scramAsked = true
		return nil
	case authSASLContinue, authSASLFinal:
		return nil
	case authOK:
		if ss.scramAsked {
			return nil
		}
		msg = "snowflake-proxy: channel binding is required (channel_binding=require in the proxy's upstream settings), but the server admitted the session without authentication"
	default:
		msg = "snowflake-proxy: channel binding is required (channel_binding=require in the proxy's upstream settings), but the server asked for an authentication method other than SCRAM"
	}
	err := &Error{Kind: KindUnsupported, Code: codeInvalidAuthorization, Message: msg}
	ss.log.Warn("session refused: the server's authentication request does not satisfy channel_binding=require", logUser, ss.user)
	ss.sh.fatal(err)
	return err
}

// authenticate relays the authentication exchange byte for byte until the
// server's ReadyForQuery: every request the server makes goes to the
// client and every answer of the client to the server, so the proxy never
// admits a client the server would refuse. ParameterStatus values are
// remembered on the way.
func (ss *session) authenticate() error {
	for {
		typ, _, err := ss.sp.sr.next()
		if err != nil {
			return ss.sh.upstreamLost(err)
		}
		switch typ {
		case 'R', 'S', 'Z', 'E':
			body, err := ss.sp.sr.read()
			if err != nil {
				return ss.sh.upstreamLost(err)
			}
			if typ == 'R' {
				if err := ss.checkChannelBinding(body); err != nil {
					return err
				}
			}
			if typ == 'R' && len(body) >= 4 && binary.BigEndian.Uint32(body) == authSASL {
				body = withoutChannelBinding(body)
				ss.saslStarted = true
			}
			if typ == 'Z' {
				if body, err = ss.admitStartupNode(body); err != nil {
					return err
				}
			}
			var start int
			ss.out, start = pgmsg.Begin(ss.out[:0], typ)
			ss.out = pgmsg.Finish(append(ss.out, body...), start)
			if _, err := ss.sh.cw.Write(ss.out); err != nil {
				return &Error{Kind: KindClientIO, Message: "write", Err: err}
			}
			switch typ {
			case 'S':
				ss.sh.noteParameter(body)
			case 'Z':
				if m, ok := pgmsg.ReadReadyForQuery(body); ok {
					ss.sh.txStatus = m.Status
				}
				if err := ss.sh.cw.Flush(); err != nil {
					return &Error{Kind: KindClientIO, Message: "write", Err: err}
				}
				ss.sp.sr.release()
				return nil
			case 'E':
				// The server refused the client: its error is the answer.
				_ = ss.sh.cw.Flush()
				f, _ := pgmsg.ReadFields(body)
				sf := ss.sh.noteServerFatal(f)
				ss.ending = ending{outcome: OutcomeLoginRefused, code: sf.code, message: sf.message}
				return errSessionDone
			case 'R':
				if len(body) < 4 {
					return &Error{Kind: KindUpstreamProtocol, Code: codeProtocolViolation, Message: "invalid authentication request"}
				}
				code := binary.BigEndian.Uint32(body)
				if code == authOK && !ss.authAsked && ss.lendsCertificate() {
					err := &Error{Kind: KindUnsupported, Code: codeInvalidAuthorization,
						Message: "snowflake-proxy: the server admitted this session without asking for a password, which may rest on the proxy's own client certificate (sslcert); the proxy does not lend its credentials to clients: give client roles password authentication in pg_hba.conf (with clientcert=verify-ca if the server must see the certificate)"}
					ss.log.Warn("session refused: admitted by the server without authentication while the proxy presented its client certificate", logUser, ss.user)
					ss.sh.fatal(err)
					return err
				}
				if code == authOK || code == authSASLFinal {
					continue
				}
				ss.authAsked = true
				if err := ss.sh.cw.Flush(); err != nil {
					return &Error{Kind: KindClientIO, Message: "write", Err: err}
				}
				if err := ss.relayAuthResponse(); err != nil {
					return err
				}
			}
		case 'K':
			// Relayed verbatim (the client cancels with it); kept for the
			// cancel of a statement the client leaves running
			// (lifecycle.go).
			body, err := ss.sp.sr.body()
			if err != nil {
				return ss.sh.upstreamLost(err)
			}
			if len(body) >= 8 && len(body) <= 4+maxCancelKey {
				ss.backendPID = binary.BigEndian.Uint32(body)
				ss.backendKey = append(ss.backendKey[:0], body[4:]...)
			}
			if err := ss.sp.sr.pass(ss.sh.cw); err != nil {
				return &Error{Kind: KindClientIO, Message: "write", Err: err}
			}
		default: // NoticeResponse, NegotiateProtocolVersion
			if err := ss.sp.sr.forward(ss.sh.cw); err != nil {
				return ss.sh.upstreamLost(err)
			}
		}
		if ss.sp.sr.R.Buffered() == 0 {
			if err := ss.sh.cw.Flush(); err != nil {
				return &Error{Kind: KindClientIO, Message: "write", Err: err}
			}
		}
	}
}

// relayAuthResponse forwards the client's answer to an authentication
// request ('p': password, SASL or GSS response).
func (ss *session) relayAuthResponse() error {
	typ, _, err := ss.cp.cr.next()
	if err != nil {
		if _, ok := err.(*tooLarge); ok {
			err = protocolError("invalid message length")
		}
		if e, ok := err.(*Error); ok {
			ss.sh.fatal(e)
			return e
		}
		return &Error{Kind: KindClientIO, Message: "read", Err: err}
	}
	if typ != 'p' {
		if typ == 'X' {
			ss.sh.terminated.Store(true)
			ss.ending = ending{outcome: OutcomeClientClosed}
			return errSessionDone
		}
		e := protocolError("expected password response, got message type %d", typ)
		ss.sh.fatal(e)
		return e
	}
	if ss.saslStarted {
		ss.saslStarted = false
		if err := ss.checkSASLInitial(); err != nil {
			ss.sh.fatal(err)
			return err
		}
		// checkSASLInitial read the body: pass sends what it read.
		if err := ss.cp.cr.pass(ss.cp.sw); err != nil {
			return ss.sh.upstreamLost(err)
		}
	} else if err := ss.cp.cr.forward(ss.cp.sw); err != nil {
		return &Error{Kind: KindClientIO, Message: "read", Err: err}
	}
	if err := ss.cp.sw.Flush(); err != nil {
		return ss.sh.upstreamLost(err)
	}
	return nil
}

// lendsCertificate reports whether the session's server connection
// presented the proxy's client certificate.
func (ss *session) lendsCertificate() bool {
	tc, ok := ss.server.(*serverTLS)
	return ok && tc.sentCert
}

// withoutChannelBinding removes the SCRAM mechanisms with channel binding
// ("-PLUS") from an AuthenticationSASL body. Channel binding ties the
// exchange to the TLS channel the client sees, which ends at the proxy,
// while the server checks it against its own: a client that chose
// SCRAM-SHA-256-PLUS could never log in. Without them a client that
// insists on channel binding (channel_binding=require) stops with its own
// error, as it does in front of PgBouncer.
func withoutChannelBinding(body []byte) []byte {
	out := body[:4]
	rest := body[4:]
	for {
		name, next, ok := pgmsg.CString(rest)
		if !ok || len(name) == 0 {
			break
		}
		if !bytes.HasSuffix(name, []byte("-PLUS")) {
			out = append(out, rest[:len(name)+1]...)
		}
		rest = next
	}
	return append(out, 0)
}

// checkSASLInitial looks at the client's SASLInitialResponse, the current
// message of cr, before it is relayed. A SCRAM client on TLS that was not
// offered channel binding says so with the GS2 flag 'y'; a server reached
// over TLS takes that for a downgrade attack and refuses the login with
// "SCRAM channel binding negotiation error". The proxy is that downgrade,
// by design: it refuses first, saying what to do.
func (ss *session) checkSASLInitial() error {
	body, err := ss.cp.cr.body()
	if err != nil {
		return &Error{Kind: KindClientIO, Message: "read", Err: err}
	}
	if _, ok := ss.server.(*serverTLS); !ok {
		return nil
	}
	_, rest, ok := pgmsg.CString(body)
	if !ok || len(rest) < 5 || rest[4] != 'y' {
		return nil
	}
	return &Error{Kind: KindUnsupported, Code: codeInvalidAuthorization,
		Message: "snowflake-proxy: SCRAM channel binding cannot pass through the proxy, and the server (reached over TLS) refuses a client on TLS without it; connect to the proxy with channel_binding=disable, or without TLS"}
}

// noteParameter records a ParameterStatus body (name NUL value NUL) and
// marks the mirror stale when it reports a state the fast path depends on.
// Called with mu held or before the pumps start.
func (sh *shared) noteParameter(body []byte) {
	m, ok := pgmsg.ReadParameterStatus(body)
	if !ok {
		return
	}
	k, v := m.Name, m.Value
	if old, ok := sh.params[string(k)]; ok && old == string(v) {
		return
	}
	sh.params[string(k)] = string(v)
	switch string(k) {
	case "default_transaction_read_only", "in_hot_standby", "is_superuser", "session_authorization":
		sh.invalid |= touchSettings
	case "search_path":
		// Reported from PostgreSQL 18, however it changed: also inside a
		// function, which the rewriter does not see.
		sh.invalid |= plan.TouchSearchPath
	}
}

// Parameter returns the server's last reported value of a ParameterStatus.
func (sh *shared) parameter(name string) string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.params[name]
}
