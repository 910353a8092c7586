package wire

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

// TLSMode is how connections to the server negotiate TLS: libpq's sslmode
// without the certificate checks, which Upstream.TLS carries (verify-ca
// and verify-full are TLSRequire with a verifying configuration).
type TLSMode uint8

const (
	// TLSDisable: plaintext only.
	TLSDisable TLSMode = iota
	// TLSAllow: plaintext first; TLS when the server refuses the
	// plaintext session before authentication.
	TLSAllow
	// TLSPrefer: TLS when the server offers it; plaintext when it
	// declines SSLRequest, the handshake fails, or it refuses the TLS
	// session before authentication.
	TLSPrefer
	// TLSRequire: TLS or no connection.
	TLSRequire
)

var tlsModeNames = [...]string{"disable", "allow", "prefer", "require"}

func (m TLSMode) String() string {
	if int(m) < len(tlsModeNames) {
		return tlsModeNames[m]
	}
	return fmt.Sprintf("TLSMode(%d)", m)
}

// Upstream is the PostgreSQL server the proxy fronts.
type Upstream struct {
	// Network is "tcp" or "unix". Empty: "tcp".
	Network string
	// Address is host:port for tcp, the socket file path for unix.
	Address string
	// TLSMode says when sessions and cancel requests use TLS. TLS over a
	// Unix socket is never attempted, as with libpq.
	TLSMode TLSMode
	// TLS is the client side of the handshake with the server: roots,
	// server name, verification, client certificate. Required unless
	// TLSMode is TLSDisable; never modified.
	TLS *tls.Config
	// DirectTLS starts the handshake at once instead of after an
	// SSLRequest (libpq's sslnegotiation=direct, PostgreSQL 17 and later).
	DirectTLS bool
	// SSLMode names the setting the operator gave, for messages
	// ("verify-full"). Empty: TLSMode's name.
	SSLMode string
	// ChannelBindingRequired is libpq's channel_binding=require: sessions
	// take only SCRAM from the server and refuse one that asks for a
	// password in the clear or md5, or admits without authentication, as
	// libpq refuses them (auth.go). The binding itself cannot be relayed.
	ChannelBindingRequired bool
}

func (u *Upstream) sslMode() string {
	if u.SSLMode != "" {
		return u.SSLMode
	}
	return u.TLSMode.String()
}

// tlsAttempt is one way to open a server connection: plaintext, or TLS
// that is required or only preferred (an 'N' answer then keeps the
// connection in plaintext).
type tlsAttempt uint8

const (
	attemptPlain tlsAttempt = iota
	attemptTLS
	attemptTLSIfOffered
)

// attempts lists, in order, how a connection to the server is tried.
func (u *Upstream) attempts() []tlsAttempt {
	if u.Network == "unix" {
		return []tlsAttempt{attemptPlain}
	}
	switch u.TLSMode {
	case TLSAllow:
		return []tlsAttempt{attemptPlain, attemptTLS}
	case TLSPrefer:
		return []tlsAttempt{attemptTLSIfOffered, attemptPlain}
	case TLSRequire:
		return []tlsAttempt{attemptTLS}
	}
	return []tlsAttempt{attemptPlain}
}

// sslRequest is the SSLRequest packet: length 8, code 80877103.
var sslRequest = [8]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}

// errTLSDeclined marks a TLS attempt that the server answered 'N' or
// whose handshake failed: with sslmode=prefer the next attempt is
// plaintext.
var errTLSDeclined = errors.New("TLS with the server not established")

// dialServer opens a connection to the server as attempt a says, within
// ctx. plain reports a preferred TLS attempt that the server declined
// and that continues in plaintext on the same connection.
func (s *Server) dialServer(ctx context.Context, a tlsAttempt) (c net.Conn, plain bool, err error) {
	if obs := s.cfg.ObserveDial; obs != nil {
		start := time.Now()
		defer func() { obs(time.Since(start), err) }()
	}
	u := &s.cfg.Upstream
	raw, err := s.cfg.Dial(ctx, u.Network, u.Address)
	if err != nil {
		return nil, false, &Error{Kind: KindUpstreamDial, Code: codeUnableToConnect,
			Message: fmt.Sprintf("snowflake-proxy: could not connect to server: %v", err), Err: err}
	}
	if a == attemptPlain {
		return raw, false, nil
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	if !u.DirectTLS {
		declined, err := requestTLS(raw)
		if err != nil {
			_ = raw.Close()
			return nil, false, &Error{Kind: KindUpstreamDial, Code: codeUnableToConnect,
				Message: fmt.Sprintf("snowflake-proxy: could not negotiate TLS with server: %v", err), Err: err}
		}
		if declined {
			if a == attemptTLSIfOffered {
				_ = raw.SetDeadline(time.Time{})
				return raw, true, nil
			}
			_ = raw.Close()
			return nil, false, &Error{Kind: KindUpstreamTLS, Code: codeUnableToConnect,
				Message: fmt.Sprintf("snowflake-proxy: server does not support SSL, but SSL was required (sslmode=%s)", u.sslMode()),
				Err:     errTLSDeclined}
		}
	}
	cfg := u.TLS.Clone()
	if u.DirectTLS {
		cfg.NextProtos = []string{"postgresql"}
	}
	sentCert := false
	if certs := cfg.Certificates; len(certs) > 0 && cfg.GetClientCertificate == nil {
		// Recorded for authenticate: a session the server admits on the
		// proxy's certificate alone is refused (lendsCertificate).
		cfg.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
			sentCert = true
			for i := range certs {
				if cri.SupportsCertificate(&certs[i]) == nil {
					return &certs[i], nil
				}
			}
			return &certs[0], nil
		}
	}
	tc := netloop.TLSClient(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, false, &Error{Kind: KindUpstreamTLS, Code: codeUnableToConnect,
			Message: fmt.Sprintf("snowflake-proxy: TLS with the server failed (sslmode=%s): %v", u.sslMode(), err),
			Err:     fmt.Errorf("%w: %w", errTLSDeclined, err)}
	}
	if u.DirectTLS && tc.ConnectionState().NegotiatedProtocol != "postgresql" {
		// As libpq: a server that speaks direct TLS selects the postgresql
		// protocol; without it the other end may be another TLS service
		// answering on that port (a cross-protocol attack).
		_ = raw.Close()
		return nil, false, &Error{Kind: KindUpstreamTLS, Code: codeUnableToConnect,
			Message: fmt.Sprintf("snowflake-proxy: direct TLS with the server was established without the postgresql protocol negotiated (ALPN) (sslmode=%s, sslnegotiation=direct)", u.sslMode()),
			Err:     errors.New("direct TLS without ALPN postgresql")}
	}
	_ = raw.SetDeadline(time.Time{})
	return &serverTLS{TLSConn: tc, sentCert: sentCert}, false, nil
}

// serverTLS is a TLS connection to the server that remembers whether the
// proxy presented its client certificate.
type serverTLS struct {
	*netloop.TLSConn
	sentCert bool
}

// requestTLS sends SSLRequest and reads the one-byte answer without
// buffering past it: bytes a server (or a man in the middle) sends after
// 'S' must go to the TLS handshake, never be taken as plaintext protocol
// (CVE-2021-23222 in libpq).
func requestTLS(c net.Conn) (declined bool, err error) {
	if _, err := c.Write(sslRequest[:]); err != nil {
		return false, err
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return false, err
	}
	switch b[0] {
	case 'S':
		return false, nil
	case 'N':
		return true, nil
	}
	return false, fmt.Errorf("unexpected answer %q to SSLRequest", b[0])
}

// openServer connects the session to the server and sends it the startup
// packet, trying the attempts of Upstream.TLSMode in order. An attempt
// that another may follow is abandoned when the server answers the
// startup packet with an error (libpq's allow and prefer: a pg_hba.conf
// that wants the other kind of connection); nothing has reached the
// client then.
func (ss *session) openServer(startup []byte) error {
	ctx, cancel := context.WithTimeout(ss.ctx, ss.cfg.DialTimeout)
	defer cancel()
	atts := ss.cfg.Upstream.attempts()
	for i, a := range atts {
		last := i == len(atts)-1
		c, plain, err := ss.srv.dialServer(ctx, a)
		if err != nil {
			if !last && errors.Is(err, errTLSDeclined) {
				ss.log.Debug("TLS with the server not established; trying plaintext", logError, err)
				continue
			}
			return err
		}
		if plain && !last && atts[i+1] == attemptPlain {
			last = true // declined TLS already made this the plaintext attempt
		}
		ss.installServer(c)
		if _, err := ss.cp.sw.Write(startup); err != nil {
			return ss.sh.upstreamLost(err)
		}
		if err := ss.cp.sw.Flush(); err != nil {
			return ss.sh.upstreamLost(err)
		}
		if last {
			return nil
		}
		if b, err := ss.sp.sr.R.Peek(1); err != nil || b[0] != 'E' {
			return nil // authenticate reports a read error
		}
		ss.log.Debug("server refused the session; trying the next sslmode attempt", "tls", a != attemptPlain && !plain)
		ss.connMu.Lock()
		ss.server = nil
		ss.connMu.Unlock()
		_ = c.Close()
	}
	return nil
}

// installServer makes c the session's server connection, with the
// handshake deadline.
func (ss *session) installServer(c net.Conn) {
	ss.setConns(ss.client, c)
	ss.deadline(c, time.Now().Add(ss.cfg.HandshakeTimeout), false)
	ss.cp.sw = bufio.NewWriterSize(c, ioBufferSize)
	ss.sp.sr = newFrameReader(c, maxServerMessage)
}

// dialCancel opens a connection for a CancelRequest as sessions connect:
// TLS when the mode requires or prefers it, so the key never travels in
// plaintext where the operator asked for TLS.
func (s *Server) dialCancel(ctx context.Context) (net.Conn, error) {
	var last error
	for _, a := range s.cfg.Upstream.attempts() {
		c, _, err := s.dialServer(ctx, a)
		if err == nil {
			return c, nil
		}
		last = err
		if !errors.Is(err, errTLSDeclined) {
			break
		}
	}
	return nil, last
}
