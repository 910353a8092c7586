package wire

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
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
	// A netloop.TLSConn: after the handshake, the event loops can relay
	// its records (docs/tls-loop.md).
	tc := netloop.TLSServer(ss.client, ss.cfg.TLSConfig)
	ctx, cancel := context.WithTimeout(ss.ctx, ss.cfg.HandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return &Error{Kind: KindTLS, Message: "TLS handshake", Err: err}
	}
	ss.setConns(tc, nil)
	ss.deadline(tc, time.Now().Add(ss.cfg.HandshakeTimeout), false)
	return nil
}

// logTLSPath says, for a session with TLS on either side, what relays its
// records: "event loop" (it may still need its goroutines at times, as a
// plaintext session does) or "goroutines" (loops off), and for each TLS
// side its version, suite and record layer. Nothing secret.
func (ss *session) logTLSPath(path string) {
	if !ss.log.Enabled(ss.ctx, slog.LevelDebug) {
		return
	}
	attrs := make([]any, 0, 6)
	for _, side := range []struct {
		key string
		c   net.Conn
	}{{"client_tls", ss.client}, {"server_tls", ss.server}} {
		if tc, ok := side.c.(interface{ ConnectionState() tls.ConnectionState }); ok {
			cs := tc.ConnectionState()
			v := tls.VersionName(cs.Version) + " " + tls.CipherSuiteName(cs.CipherSuite)
			if rl, ok := side.c.(interface{ RecordLayer() string }); ok {
				// netloop.TLSConn: whose record layer seals and opens
				// (docs/tls-loop.md, "TLS 1.3 records of the proxy's own").
				v += ", records: " + rl.RecordLayer()
			}
			attrs = append(attrs, side.key, v)
		}
	}
	if len(attrs) == 0 {
		return
	}
	if path == "event loop" && !netloop.LoopsTLS(ss.client, ss.server) {
		path = "goroutines"
	}
	ss.log.Debug("TLS records relayed by "+path, attrs...)
}
