package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

// Request codes of the startup phase (the first word of a packet that is
// not a protocol version).
const (
	protocol30      = 3 << 16
	sslRequestCode  = 80877103
	gssRequestCode  = 80877104
	cancelCode      = 80877102
	nodeStartupName = "snowflake.node"
)

// startup runs phases 1 to 3 of doc.go: the startup packet and its
// negotiations, the connection to the server, and the authentication relay.
// It returns nil once the server sent ReadyForQuery, errSessionDone when the
// session ended normally before that (cancel request, refused login).
func (ss *session) startup() error {
	ss.deadline(ss.client, time.Now().Add(ss.cfg.HandshakeTimeout), false)
	tlsDone, gssDone := false, false
	for {
		pkt, err := readStartupPacket(ss.client)
		if err != nil {
			if e, ok := err.(*Error); ok && e.Kind == KindClientProtocol {
				ss.fatalRaw(err)
			}
			return err
		}
		code := binary.BigEndian.Uint32(pkt)
		switch {
		case code == sslRequestCode && !tlsDone:
			if err := ss.negotiateTLS(); err != nil {
				return err
			}
			tlsDone = true
		case code == gssRequestCode && !gssDone && !tlsDone:
			gssDone = true
			if _, err := ss.client.Write([]byte{'N'}); err != nil {
				return &Error{Kind: KindClientIO, Message: "write", Err: err}
			}
		case code == cancelCode:
			return ss.forwardCancel(pkt)
		case code>>16 == 3:
			if ss.cfg.RequireTLS && !tlsDone {
				err := &Error{Kind: KindTLS, Code: codeInvalidAuthorization,
					Message: "snowflake-proxy: TLS required: connect with sslmode=require or stronger"}
				ss.fatalRaw(err)
				return err
			}
			return ss.connect(pkt)
		default:
			err := &Error{Kind: KindUnsupported, Code: codeFeatureNotSupported,
				Message: fmt.Sprintf("unsupported frontend protocol %d.%d: server supports 3.0 to 3.0", code>>16, code&0xffff)}
			ss.fatalRaw(err)
			return err
		}
	}
}

// readStartupPacket reads one length-prefixed startup-phase packet without
// buffering past it (a TLS handshake may follow) and returns it without its
// length word.
func readStartupPacket(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, &Error{Kind: KindClientIO, Message: "read startup packet", Err: err}
	}
	n := binary.BigEndian.Uint32(h[:])
	if n < 8 || n > maxStartupPacket {
		return nil, protocolError("invalid length of startup packet")
	}
	b := make([]byte, n-4)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, &Error{Kind: KindClientIO, Message: "read startup packet", Err: err}
	}
	return b, nil
}

// fatalRaw sends an ErrorResponse before the relay's writers exist.
func (ss *session) fatalRaw(err error) {
	ss.sh.fatalSent.Store(true)
	b, _ := errorResponse(err).Encode(nil)
	_, _ = ss.client.Write(b)
}

// startupParams parses the name/value pairs after the protocol version.
func startupParams(pkt []byte) ([][2]string, error) {
	var out [][2]string
	b := pkt[4:]
	for {
		k, rest, ok := pgmsg.CString(b)
		if !ok {
			return nil, protocolError("invalid startup packet layout: expected terminator as last byte")
		}
		if len(k) == 0 {
			if len(rest) != 0 {
				return nil, protocolError("invalid startup packet layout: expected terminator as last byte")
			}
			return out, nil
		}
		v, rest2, ok := pgmsg.CString(rest)
		if !ok {
			return nil, protocolError("invalid startup packet layout: expected terminator as last byte")
		}
		out = append(out, [2]string{string(k), string(v)})
		b = rest2
	}
}

// connect handles a StartupMessage: dial the server, send the packet (with
// the proxy's snowflake.node added, or the client's checked: see
// startupnode.go), relay authentication.
func (ss *session) connect(pkt []byte) error {
	params, err := startupParams(pkt)
	if err != nil {
		ss.fatalRaw(err)
		return err
	}
	for _, p := range params {
		switch p[0] {
		case "user":
			ss.user = p[1]
		case "database":
			ss.db = p[1]
		}
	}
	if ss.db == "" {
		ss.db = ss.user
	}
	if !ss.srv.admit() {
		ss.fatalRaw(errTooManyClients)
		return errTooManyClients
	}
	ss.admitted = true
	out := make([]byte, 4, len(pkt)+40)
	out = append(out, pkt[:len(pkt)-1]...)
	if node := ss.readStartupNode(params); node != "" {
		out = append(out, nodeStartupName...)
		out = append(out, 0)
		out = append(out, node...)
		out = append(out, 0)
	}
	out = append(out, 0)
	binary.BigEndian.PutUint32(out, uint32(len(out)))

	ss.sh.cw = bufio.NewWriterSize(ss.client, ioBufferSize)
	ss.cp.cr = newFrameReader(ss.client, maxAuthMessage)
	if err := ss.openServer(out); err != nil {
		if kindOf(err) != KindUpstreamIO && ss.sh.cutErr.Load() == nil {
			ss.sh.fatal(err)
		}
		return err
	}
	return ss.authenticate()
}

// upstreamLost reports a lost server connection to the client (08006).
// After a cut the connection was ended by the proxy (lifecycle.go): the
// client gets the cut's FATAL instead.
func (sh *shared) upstreamLost(err error) error {
	e := &Error{Kind: KindUpstreamIO, Code: codeConnectionFailure,
		Message: "snowflake-proxy: server closed the connection unexpectedly", Err: err}
	if sh.cutErr.Load() != nil {
		return e
	}
	sh.serverLost.Store(true)
	if !sh.clientGone.Load() && !sh.sawFatal.Load() {
		sh.fatal(e)
	}
	return e
}

// admit takes a MaxClients slot for a session that sent its startup
// packet, or reports that none is free.
func (s *Server) admit() bool {
	n := s.clients.Add(1)
	if limit := s.maxClients.Load(); limit > 0 && n > limit {
		s.clients.Add(-1)
		return false
	}
	return true
}
