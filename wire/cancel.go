package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// forwardCancel relays a CancelRequest to the server. The client knows the
// server's own BackendKeyData (relayed verbatim at startup), so with a
// single upstream the request needs no translation. PostgreSQL answers
// nothing; the connection is closed.
func (ss *session) forwardCancel(pkt []byte) error {
	ss.ending = ending{outcome: OutcomeCancelRequest}
	if len(pkt) < 8 || len(pkt) > 8+maxCancelKey {
		// PostgreSQL ignores such a request too.
		return errSessionDone
	}
	ctx, cancel := context.WithTimeout(ss.ctx, ss.cfg.DialTimeout)
	defer cancel()
	if err := ss.srv.sendCancel(ctx, binary.BigEndian.Uint32(pkt[4:]), pkt[8:]); err != nil {
		ss.log.Warn("cancel request", logError, err)
		var e *Error
		if errors.As(err, &e) {
			return err
		}
		return &Error{Kind: KindUpstreamIO, Message: "cancel", Err: err}
	}
	ss.srv.stats.cancels.Add(1)
	return errSessionDone
}

// sendCancel sends the upstream a CancelRequest for backend pid with its
// secret key, as sent in its BackendKeyData, and waits until the server
// closes the connection: the cancel is then delivered. Every step is
// bounded by ctx's deadline, or DialTimeout without one (the write and the
// wait only by the deadline, not by an earlier cancellation of ctx). This
// is the one place where the proxy opens a connection for a cancel.
func (s *Server) sendCancel(ctx context.Context, pid uint32, key []byte) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.DialTimeout)
		defer cancel()
	}
	c, err := s.dialCancel(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	out := make([]byte, 12, 12+len(key))
	binary.BigEndian.PutUint32(out, uint32(12+len(key)))
	binary.BigEndian.PutUint32(out[4:], cancelCode)
	binary.BigEndian.PutUint32(out[8:], pid)
	out = append(out, key...)
	if _, err := c.Write(out); err != nil {
		return fmt.Errorf("wire: cancel: write: %w", err)
	}
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("wire: cancel: wait for the server to close: %w", err)
	}
	return nil
}
