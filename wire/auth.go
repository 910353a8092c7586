package wire

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"time"
)

// Authentication request codes (AuthenticationXXX messages).
const (
	authOK           = 0
	authSASLFinal    = 12
	authGSSContinue  = 8
	authSASLContinue = 11
)

// dial connects to the upstream within DialTimeout.
func (ss *session) dial() error {
	ctx, cancel := context.WithTimeout(ss.ctx, ss.cfg.DialTimeout)
	defer cancel()
	c, err := ss.cfg.Dial(ctx, ss.cfg.Upstream.Network, ss.cfg.Upstream.Address)
	if err != nil {
		return &Error{Kind: KindUpstreamDial, Code: codeUnableToConnect,
			Message: fmt.Sprintf("snowflake-proxy: could not connect to server: %v", err), Err: err}
	}
	ss.setConns(ss.client, c)
	ss.deadline(c, time.Now().Add(ss.cfg.HandshakeTimeout), false)
	ss.sw = bufio.NewWriterSize(c, ioBufferSize)
	ss.sr = frameReader{r: bufio.NewReaderSize(c, ioBufferSize), max: maxServerMessage}
	return nil
}

// authenticate relays the authentication exchange byte for byte until the
// server's ReadyForQuery: every request the server makes goes to the
// client and every answer of the client to the server, so the proxy never
// admits a client the server would refuse. ParameterStatus values are
// remembered on the way.
func (ss *session) authenticate() error {
	for {
		typ, _, err := ss.sr.next()
		if err != nil {
			return ss.upstreamLost(err)
		}
		switch typ {
		case 'R', 'S', 'Z', 'E':
			body, err := ss.sr.read()
			if err != nil {
				return ss.upstreamLost(err)
			}
			ss.out = append(ss.out[:0], typ, 0, 0, 0, 0)
			ss.out = append(ss.out, body...)
			binary.BigEndian.PutUint32(ss.out[1:], uint32(len(body)+4))
			if _, err := ss.cw.Write(ss.out); err != nil {
				return &Error{Kind: KindClientIO, Message: "write", Err: err}
			}
			switch typ {
			case 'S':
				ss.noteParameter(body)
			case 'Z':
				if len(body) == 1 {
					ss.txStatus = body[0]
				}
				if err := ss.cw.Flush(); err != nil {
					return &Error{Kind: KindClientIO, Message: "write", Err: err}
				}
				ss.sr.release()
				return nil
			case 'E':
				// The server refused the client: its error is the answer.
				_ = ss.cw.Flush()
				return errSessionDone
			case 'R':
				if len(body) < 4 {
					return &Error{Kind: KindUpstreamProtocol, Code: codeProtocolViolation, Message: "invalid authentication request"}
				}
				code := binary.BigEndian.Uint32(body)
				if code == authOK || code == authSASLFinal {
					continue
				}
				if err := ss.cw.Flush(); err != nil {
					return &Error{Kind: KindClientIO, Message: "write", Err: err}
				}
				if err := ss.relayAuthResponse(); err != nil {
					return err
				}
			}
		default: // BackendKeyData, NoticeResponse, NegotiateProtocolVersion
			if err := ss.sr.forward(ss.cw); err != nil {
				return ss.upstreamLost(err)
			}
		}
		if ss.sr.r.Buffered() == 0 {
			if err := ss.cw.Flush(); err != nil {
				return &Error{Kind: KindClientIO, Message: "write", Err: err}
			}
		}
	}
}

// relayAuthResponse forwards the client's answer to an authentication
// request ('p': password, SASL or GSS response).
func (ss *session) relayAuthResponse() error {
	typ, _, err := ss.cr.next()
	if err != nil {
		if _, ok := err.(*tooLarge); ok {
			err = protocolError("invalid message length")
		}
		if e, ok := err.(*Error); ok {
			ss.fatal(e)
			return e
		}
		return &Error{Kind: KindClientIO, Message: "read", Err: err}
	}
	if typ != 'p' {
		if typ == 'X' {
			return errSessionDone
		}
		e := protocolError("expected password response, got message type %d", typ)
		ss.fatal(e)
		return e
	}
	if err := ss.cr.forward(ss.sw); err != nil {
		return &Error{Kind: KindClientIO, Message: "read", Err: err}
	}
	if err := ss.sw.Flush(); err != nil {
		return ss.upstreamLost(err)
	}
	return nil
}

// noteParameter records a ParameterStatus body (name NUL value NUL) and
// marks the mirror stale when it reports a state the fast path depends on.
// Called with mu held or before the pumps start.
func (ss *session) noteParameter(body []byte) {
	k, rest, ok := cstring(body)
	if !ok {
		return
	}
	v, _, ok := cstring(rest)
	if !ok {
		return
	}
	if old, ok := ss.params[string(k)]; ok && old == string(v) {
		return
	}
	ss.params[string(k)] = string(v)
	switch string(k) {
	case "default_transaction_read_only", "in_hot_standby", "is_superuser", "session_authorization":
		ss.invalid |= touchSettings
	}
}

// Parameter returns the server's last reported value of a ParameterStatus.
func (ss *session) parameter(name string) string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.params[name]
}
