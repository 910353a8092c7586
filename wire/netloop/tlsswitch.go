package netloop

import (
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"io"
	"sync"
)

// secretLog is the KeyLogWriter of one connection's handshake: it keeps
// the application traffic secrets in memory for the switch to records13
// and gives every line to the configuration's own KeyLogWriter, if it had
// one. Nothing is written anywhere else.
type secretLog struct {
	mu             sync.Mutex
	next           io.Writer
	client, server []byte // CLIENT_TRAFFIC_SECRET_0, SERVER_TRAFFIC_SECRET_0
}

func (l *secretLog) Write(line []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := bytes.Fields(line); len(f) == 3 {
		var dst *[]byte
		switch string(f[0]) {
		case "CLIENT_TRAFFIC_SECRET_0":
			dst = &l.client
		case "SERVER_TRAFFIC_SECRET_0":
			dst = &l.server
		}
		if dst != nil {
			if s, err := hex.DecodeString(string(f[2])); err == nil {
				*dst = s
			}
		}
	}
	if l.next != nil {
		return l.next.Write(line)
	}
	return len(line), nil
}

// secrets returns the traffic secrets the handshake logged, and forgets
// them.
func (l *secretLog) secrets() (client, server []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	client, server = l.client, l.server
	l.client, l.server = nil, nil
	return client, server
}

// withSecretLog returns a copy of cfg whose handshakes log to l, and so
// does each configuration its GetConfigForClient returns.
func withSecretLog(cfg *tls.Config, l *secretLog) *tls.Config {
	c := loggingCopy(cfg, l)
	if get := cfg.GetConfigForClient; get != nil {
		c.GetConfigForClient = func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := get(chi)
			if cc == nil || err != nil {
				return cc, err
			}
			return loggingCopy(cc, l), nil
		}
	}
	return c
}

// loggingCopy returns a copy of cfg whose KeyLogWriter is l (which passes
// every line on to cfg's). A server's session tickets stay cfg's: a copy
// would make ticket keys of its own, and no ticket would resume a
// session on another connection.
func loggingCopy(cfg *tls.Config, l *secretLog) *tls.Config {
	c := cfg.Clone()
	l.mu.Lock()
	l.next, c.KeyLogWriter = cfg.KeyLogWriter, l
	l.mu.Unlock()
	if c.WrapSession == nil {
		c.WrapSession = cfg.EncryptTicket
	}
	if c.UnwrapSession == nil {
		c.UnwrapSession = cfg.DecryptTicket
	}
	return c
}

// handshakeWrites is what a Transport notes of the records its tls.Conn
// writes during the handshake: how many are encrypted, and the last of
// them, from which the switch learns the writing sequence number.
type handshakeWrites struct {
	encrypted int
	last      []byte
	broken    bool // a write that was not whole records
}

func (w *handshakeWrites) note(p []byte) {
	for len(p) > 0 && !w.broken {
		if len(p) < recordHeaderLen {
			w.broken = true
			return
		}
		n := recordHeaderLen + (int(p[3])<<8 | int(p[4]))
		if n > len(p) {
			w.broken = true
			return
		}
		if p[0] == recordTypeAppData {
			w.encrypted++
			w.last = append(w.last[:0], p[:n]...)
		}
		p = p[n:]
	}
}

// switchRecords moves c, whose handshake just ended, to records13 when
// it can, and says which record layer the connection uses from now on.
// It runs once, under hsMu, before ready is set: no read or write of the
// connection goes on before it is done (TLSConn.records).
func (c *TLSConn) switchRecords() {
	t := c.t
	t.wmu.Lock()
	hw := t.hs
	t.hs = nil
	t.wmu.Unlock()
	t.exact = false
	clientSecret, serverSecret := c.keys.secrets()
	c.layer = "crypto/tls"
	cs := c.Conn.ConnectionState()
	suite, ok := suites13[cs.CipherSuite]
	if c.noOwnRecords || !ok || cs.Version != tls.VersionTLS13 || clientSecret == nil || serverSecret == nil ||
		hw == nil || hw.broken || t.rc.broken || t.rc.hn != 0 {
		return
	}
	readSecret, writeSecret := serverSecret, clientSecret
	if c.server {
		readSecret, writeSecret = clientSecret, serverSecret
	}
	var probe trafficKeys
	if probe.set(suite, writeSecret) != nil {
		return
	}
	// The last encrypted record the handshake wrote is under the
	// application key when crypto/tls sent something after its Finished
	// (a server's session ticket); its sequence number is below the
	// number of encrypted records written.
	writeSeq := uint64(0)
	for seq := range hw.encrypted {
		if probe.opensAt(hw.last, uint64(seq)) {
			writeSeq = uint64(seq) + 1
			break
		}
	}
	r, err := newRecords13(t, c.server, suite, readSecret, writeSecret, writeSeq)
	if err != nil {
		return
	}
	c.own, c.layer = r, "own TLS 1.3"
	t.rc.stop() // only TLSConn.Read's tls.Conn path uses the count
}
