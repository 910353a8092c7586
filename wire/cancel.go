package wire

import (
	"context"
	"encoding/binary"
	"time"
)

// forwardCancel relays a CancelRequest to the server as is. The client knows
// the server's own BackendKeyData (relayed verbatim at startup), so with a
// single upstream the request needs no translation. PostgreSQL answers
// nothing; the connection is closed.
func (ss *session) forwardCancel(pkt []byte) error {
	ctx, cancel := context.WithTimeout(ss.ctx, ss.cfg.DialTimeout)
	defer cancel()
	c, err := ss.srv.dialCancel(ctx)
	if err != nil {
		ss.log.Warn("cancel request: dial", logError, err)
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(ss.cfg.DialTimeout))
	out := make([]byte, 4+len(pkt))
	binary.BigEndian.PutUint32(out, uint32(len(out)))
	copy(out[4:], pkt)
	if _, err := c.Write(out); err != nil {
		return &Error{Kind: KindUpstreamIO, Message: "cancel", Err: err}
	}
	// Wait for the server to close: the cancel is then delivered.
	var b [1]byte
	_, _ = c.Read(b[:])
	ss.srv.stats.cancels.Add(1)
	return errSessionDone
}
