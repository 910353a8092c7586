package netloop

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"errors"
	"hash"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// records13 is the record layer of an established TLS 1.3 session with
// an AES-GCM suite, keyed from the handshake's traffic secrets: after the
// handshake a TLSConn reads and writes through it instead of its
// tls.Conn (docs/tls-loop.md, "TLS 1.3 records of the proxy's own").
//
// The reading side belongs to the one goroutine or loop thread that
// reads the connection; the writing side is under wmu, which the reader
// also takes to answer a KeyUpdate or to send an alert.
type records13 struct {
	t *Transport
	// server: the proxy is the server of this connection (a client's
	// NewSessionTicket is a protocol error).
	server bool

	rd trafficKeys
	// in[:end] is what the Transport gave: in[pt:ptEnd] the plaintext of
	// the last record opened, not yet read; in[next:end] the records not
	// yet opened (the last one possibly partial).
	in                   []byte
	pt, ptEnd, next, end int
	hand                 []byte // a post-handshake message not yet whole
	rerr                 error  // sticky: every later read returns it
	// useless counts the records and post-handshake messages in a row
	// that brought no data, across reads (a peer may send them in every
	// batch), as crypto/tls does.
	useless int

	wmu    sync.Mutex
	wr     trafficKeys
	out    []byte // the records of one write, sealed in place
	werr   error  // sticky: every later write returns it
	closed bool   // close_notify sent
}

const (
	recordTypeAlert     = 21
	recordTypeHandshake = 22
	recordTypeAppData   = 23

	maxPlaintext      = 1 << 14
	maxCiphertext13   = maxPlaintext + 256 // RFC 8446, 5.2
	maxHandshakeMsg   = 1 << 16            // as crypto/tls
	maxUselessRecords = 16                 // records in a row without data, as crypto/tls
	maxWriteRecords   = 4                  // records sealed per write to the Transport (Write)

	msgNewSessionTicket = 4
	msgKeyUpdate        = 24

	alertCloseNotify       = 0
	alertUserCanceled      = 90
	alertUnexpectedMessage = 10
	alertBadRecordMAC      = 20
	alertRecordOverflow    = 22
	alertIllegalParameter  = 47
	alertDecodeError       = 50
	alertInternalError     = 80
)

var (
	errShutdown   = errors.New("tls: protocol is shutdown")
	errSeqExhaust = errors.New("tls: sequence number of the records exhausted")
)

// suite13 is what the record layer needs of a TLS 1.3 cipher suite.
type suite13 struct {
	hash   func() hash.Hash
	keyLen int
}

// suites13 are the suites records13 seals and opens; a session with
// another stays on its tls.Conn.
var suites13 = map[uint16]suite13{
	tls.TLS_AES_128_GCM_SHA256: {sha256.New, 16},
	tls.TLS_AES_256_GCM_SHA384: {sha512.New384, 32},
}

// trafficKeys is one direction's keys: the traffic secret (the next
// KeyUpdate derives from it), the AEAD and IV derived from it, and the
// sequence number of the next record.
type trafficKeys struct {
	suite  suite13
	secret []byte
	aead   cipher.AEAD
	iv     [12]byte
	nonce  [12]byte
	seq    uint64
	spent  bool // the last sequence number was used: no record more under this key
}

func (k *trafficKeys) set(suite suite13, secret []byte) error {
	block, err := aes.NewCipher(expandLabel(suite.hash, secret, "key", suite.keyLen))
	if err != nil {
		return err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return err
	}
	k.suite, k.secret, k.aead, k.seq, k.spent = suite, secret, aead, 0, false
	copy(k.iv[:], expandLabel(suite.hash, secret, "iv", len(k.iv)))
	return nil
}

// update moves to the next traffic secret (RFC 8446, 7.2).
func (k *trafficKeys) update() error {
	return k.set(k.suite, expandLabel(k.suite.hash, k.secret, "traffic upd", len(k.secret)))
}

// nextNonce returns the nonce of the next record: the IV XOR the
// sequence number, which it then advances.
func (k *trafficKeys) nextNonce() ([]byte, error) {
	if k.spent {
		return nil, errSeqExhaust
	}
	k.nonce = k.nonceAt(k.seq)
	if k.seq++; k.seq == 0 {
		k.spent = true
	}
	return k.nonce[:], nil
}

// nonceAt is the nonce of the record with sequence number seq.
func (k *trafficKeys) nonceAt(seq uint64) [12]byte {
	nonce := k.iv
	for i := range 8 {
		nonce[4+i] ^= byte(seq >> (56 - 8*i))
	}
	return nonce
}

// expandLabel is HKDF-Expand-Label with an empty context (RFC 8446, 7.1).
func expandLabel(h func() hash.Hash, secret []byte, label string, n int) []byte {
	info := make([]byte, 0, 4+6+len(label))
	info = append(info, byte(n>>8), byte(n), byte(6+len(label)))
	info = append(info, "tls13 "...)
	info = append(info, label...)
	info = append(info, 0)
	out, err := hkdf.Expand(h, secret, string(info), n)
	if err != nil {
		panic("netloop: HKDF-Expand-Label: " + err.Error()) // only for a length no suite has
	}
	return out
}

// newRecords13 returns the record layer of a connection whose handshake
// just ended with suite, reading under readSecret from sequence number 0
// (the Transport stopped at the end of the peer's last handshake
// record) and writing under writeSecret from writeSeq.
func newRecords13(t *Transport, server bool, suite suite13, readSecret, writeSecret []byte, writeSeq uint64) (*records13, error) {
	r := &records13{t: t, server: server, in: make([]byte, BufferSize)}
	if err := r.rd.set(suite, readSecret); err != nil {
		return nil, err
	}
	if err := r.wr.set(suite, writeSecret); err != nil {
		return nil, err
	}
	r.wr.seq = writeSeq
	return r, nil
}

// Read returns the plaintext of every whole record the input holds, as
// much as p takes, and reads the Transport once when there is none.
func (r *records13) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n := 0
	for {
		if r.pt < r.ptEnd {
			k := copy(p[n:], r.in[r.pt:r.ptEnd])
			r.pt += k
			if n += k; n == len(p) {
				return n, nil
			}
		}
		if r.rerr != nil {
			if n > 0 {
				return n, nil
			}
			return 0, r.rerr
		}
		opened, err := r.openNext()
		if err != nil {
			r.rerr = err
			continue
		}
		if opened {
			continue
		}
		if n > 0 {
			return n, nil
		}
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
}

// fill reads the Transport once into the free end of the input, after
// moving the record in progress to its front (no plaintext is left) and
// making room for the whole of it.
func (r *records13) fill() error {
	if r.next > 0 {
		r.end = copy(r.in, r.in[r.next:r.end])
		r.next, r.pt, r.ptEnd = 0, 0, 0
	}
	if r.end >= recordHeaderLen {
		if need := recordHeaderLen + (int(r.in[3])<<8 | int(r.in[4])); need > len(r.in) {
			// openNext refused a length over maxCiphertext13 already.
			r.in = slices.Grow(r.in[:r.end], need-r.end)[:need]
		}
	}
	n, err := r.t.Read(r.in[r.end:])
	r.end += n
	switch {
	case err == nil || n > 0:
		return nil
	case err == io.EOF && r.end > 0:
		err = io.ErrUnexpectedEOF // EOF in a record; at a record's end it is EOF, as crypto/tls has it
	}
	if !temporary(err) {
		r.rerr = err
	}
	return err
}

// temporary reports whether a read error leaves the connection usable,
// as crypto/tls decides it: the error says it is temporary (netloop's
// would-block, a deadline).
func temporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// openNext opens the next record if the input holds it whole: its
// plaintext becomes in[pt:ptEnd]; an alert or a post-handshake message
// is handled at once. It reports whether a record was opened.
func (r *records13) openNext() (bool, error) {
	if r.end-r.next < recordHeaderLen {
		return false, nil
	}
	hdr := r.in[r.next : r.next+recordHeaderLen]
	length := int(hdr[3])<<8 | int(hdr[4])
	if hdr[0] != recordTypeAppData {
		// After the handshake every record is protected; a
		// change_cipher_spec is no longer allowed either.
		return false, r.fail(alertUnexpectedMessage)
	}
	if length > maxCiphertext13 {
		return false, r.fail(alertRecordOverflow)
	}
	if r.end-r.next < recordHeaderLen+length {
		return false, nil
	}
	body := r.in[r.next+recordHeaderLen : r.next+recordHeaderLen+length]
	nonce, err := r.rd.nextNonce()
	if err != nil {
		return false, err
	}
	plain, err := r.rd.aead.Open(body[:0], nonce, body, hdr)
	if err != nil {
		return false, r.fail(alertBadRecordMAC)
	}
	if len(plain) > maxPlaintext+1 {
		// The inner plaintext, padding included (RFC 8446, 5.4).
		return false, r.fail(alertRecordOverflow)
	}
	start := r.next + recordHeaderLen
	r.next += recordHeaderLen + length
	// The inner plaintext: content, its type, zeros.
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 {
		return false, r.fail(alertUnexpectedMessage)
	}
	typ, plain := plain[i], plain[:i]
	if len(r.hand) > 0 && typ != recordTypeHandshake {
		return false, r.fail(alertUnexpectedMessage) // a message cut by a record of another type
	}
	switch typ {
	case recordTypeAppData:
		r.pt, r.ptEnd = start, start+len(plain)
		if len(plain) > 0 {
			r.useless = 0
			return true, nil
		}
		return true, r.noData()
	case recordTypeAlert:
		if len(plain) == 2 && plain[1] == alertUserCanceled {
			// TLS 1.3 keeps no warning alert but this one, which some
			// stacks send before close_notify: dropped, as crypto/tls
			// does.
			return true, r.noData()
		}
		return false, r.alert(plain)
	case recordTypeHandshake:
		if len(plain) == 0 {
			return false, r.fail(alertUnexpectedMessage)
		}
		return true, r.handshake(plain)
	}
	return false, r.fail(alertUnexpectedMessage)
}

// noData counts a record or message that brought no data, and fails
// past maxUselessRecords in a row.
func (r *records13) noData() error {
	if r.useless++; r.useless > maxUselessRecords {
		return r.fail(alertUnexpectedMessage)
	}
	return nil
}

// alert handles an alert from the peer: close_notify is end of input,
// any other ends the session with the peer's error (TLS 1.3 has no
// warnings that go on).
func (r *records13) alert(b []byte) error {
	if len(b) != 2 {
		return r.fail(alertUnexpectedMessage)
	}
	if b[1] == alertCloseNotify {
		return io.EOF
	}
	return &net.OpError{Op: "remote error", Err: tls.AlertError(b[1])}
}

// handshake handles post-handshake messages: a KeyUpdate rekeys (and is
// answered with the proxy's when asked), a server's NewSessionTicket is
// dropped (the proxy resumes no session), anything else is refused.
func (r *records13) handshake(b []byte) error {
	r.hand = append(r.hand, b...)
	for len(r.hand) >= 4 {
		n := int(r.hand[1])<<16 | int(r.hand[2])<<8 | int(r.hand[3])
		if n > maxHandshakeMsg {
			return r.fail(alertInternalError)
		}
		if len(r.hand) < 4+n {
			return nil
		}
		msg := r.hand[:4+n]
		if err := r.noData(); err != nil {
			return err
		}
		switch msg[0] {
		case msgNewSessionTicket:
			if r.server {
				return r.fail(alertUnexpectedMessage)
			}
		case msgKeyUpdate:
			if n != 1 {
				return r.fail(alertDecodeError)
			}
			if len(r.hand) > len(msg) {
				// A key change must end its record (RFC 8446, 5.1).
				return r.fail(alertUnexpectedMessage)
			}
			if msg[4] > 1 {
				return r.fail(alertIllegalParameter)
			}
			if err := r.rd.update(); err != nil {
				return err
			}
			if msg[4] == 1 {
				r.answerKeyUpdate()
			}
		default:
			return r.fail(alertUnexpectedMessage)
		}
		r.hand = append(r.hand[:0], r.hand[len(msg):]...)
	}
	return nil
}

// answerKeyUpdate sends a KeyUpdate that asks for none under the
// current writing key, at once, then moves the writing side to the next
// key. A write error stays the writing side's, as in crypto/tls.
func (r *records13) answerKeyUpdate() {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.werr != nil || r.closed {
		return
	}
	if r.werr = r.sendLocked(recordTypeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 0}); r.werr != nil {
		return
	}
	r.werr = r.wr.update()
}

// fail sends alert a (if the writing side still can) and returns the
// error a read that met it returns from then on.
func (r *records13) fail(a uint8) error {
	err := &net.OpError{Op: "local error", Err: tls.AlertError(a)}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.werr == nil && !r.closed {
		_ = r.sendLocked(recordTypeAlert, []byte{2, a})
		r.werr = err
	}
	return err
}

// Write seals p into records of at most 2^14 bytes of plaintext and
// gives them to the Transport as one write (a batch of a session's
// buffer); a larger p goes in writes of at most maxWriteRecords records,
// so that the sealing buffer stays small whatever a client sends.
func (r *records13) Write(p []byte) (int, error) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.werr != nil {
		return 0, r.werr
	}
	if r.closed {
		return 0, errShutdown
	}
	sent := 0 // plaintext of the records the Transport took
	for sent < len(p) {
		out, n := r.out[:0], sent
		for recs := 0; n < len(p) && recs < maxWriteRecords; recs++ {
			k := min(len(p)-n, maxPlaintext)
			var err error
			if out, err = r.seal(out, recordTypeAppData, p[n:n+k]); err != nil {
				r.werr = err
				return sent, err
			}
			n += k
		}
		r.out = out[:0]
		if _, err := r.t.Write(out); err != nil {
			r.werr = err
			return sent, err
		}
		sent = n
	}
	return sent, nil
}

// sendLocked seals one record of typ and writes it. wmu held.
func (r *records13) sendLocked(typ byte, p []byte) error {
	out, err := r.seal(r.out[:0], typ, p)
	r.out = out[:0]
	if err != nil {
		return err
	}
	_, err = r.t.Write(out)
	return err
}

// seal appends to out the record of content type typ and plaintext p,
// sealed in place. wmu held.
func (r *records13) seal(out []byte, typ byte, p []byte) ([]byte, error) {
	nonce, err := r.wr.nextNonce()
	if err != nil {
		return out, err
	}
	o := len(out)
	size := len(p) + 1 + r.wr.aead.Overhead()
	out = slices.Grow(out, recordHeaderLen+size)
	out = append(out, recordTypeAppData, 3, 3, byte(size>>8), byte(size))
	out = append(out, p...)
	out = append(out, typ)
	hdr := out[o : o+recordHeaderLen]
	return r.wr.aead.Seal(out[:o+recordHeaderLen], nonce, out[o+recordHeaderLen:], hdr), nil
}

// closeNotify sends close_notify once, under a bounded write deadline as
// crypto/tls does; later writes fail.
func (r *records13) closeNotify() error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return r.closeNotifyHeld()
}

// closeNotifyIfIdle is closeNotify for Close: with a write in progress
// (Close is breaking it off) nothing is sent, as crypto/tls does.
func (r *records13) closeNotifyIfIdle() error {
	if !r.wmu.TryLock() {
		return nil
	}
	defer r.wmu.Unlock()
	return r.closeNotifyHeld()
}

// closeNotifyHeld is closeNotify with wmu held.
func (r *records13) closeNotifyHeld() error {
	if r.closed {
		return nil
	}
	if r.werr != nil {
		r.closed = true
		return r.werr
	}
	_ = r.t.SetWriteDeadline(time.Now().Add(5 * time.Second))
	err := r.closeNotifyLocked()
	_ = r.t.SetWriteDeadline(time.Now())
	return err
}

// closeNotifyLocked sends close_notify; later writes fail. wmu held.
func (r *records13) closeNotifyLocked() error {
	r.closed = true
	return r.sendLocked(recordTypeAlert, []byte{1, alertCloseNotify})
}

// opensAt reports whether rec, a whole record, opens under k at
// sequence number seq (k itself is left as it was).
func (k *trafficKeys) opensAt(rec []byte, seq uint64) bool {
	if len(rec) < recordHeaderLen {
		return false
	}
	nonce := k.nonceAt(seq)
	body := slices.Clone(rec[recordHeaderLen:])
	_, err := k.aead.Open(body[:0], nonce[:], body, rec[:recordHeaderLen])
	return err == nil
}
