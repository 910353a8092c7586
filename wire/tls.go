package wire

import (
	"context"
	"crypto/tls"
	"time"
)

// negotiateTLS answers an SSLRequest: 'N' without a TLS configuration,
// otherwise 'S' and the server side of a TLS handshake. The startup packet
// was read unbuffered, so no plaintext byte sent after the SSLRequest can
// be mistaken for TLS data (CVE-2021-23222).
func (ss *session) negotiateTLS() error {
	if ss.cfg.TLSConfig == nil {
		if _, err := ss.client.Write([]byte{'N'}); err != nil {
			return &Error{Kind: KindClientIO, Message: "write", Err: err}
		}
		return nil
	}
	if _, err := ss.client.Write([]byte{'S'}); err != nil {
		return &Error{Kind: KindClientIO, Message: "write", Err: err}
	}
	tc := tls.Server(ss.client, ss.cfg.TLSConfig)
	ctx, cancel := context.WithTimeout(ss.ctx, ss.cfg.HandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return &Error{Kind: KindTLS, Message: "TLS handshake", Err: err}
	}
	ss.setConns(tc, nil)
	ss.deadline(tc, time.Now().Add(ss.cfg.HandshakeTimeout), false)
	return nil
}
