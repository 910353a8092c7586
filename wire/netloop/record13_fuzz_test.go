package netloop

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"io"
	"testing"
)

// fuzzKeys are the fixed secrets of FuzzRecords13Read: the peer writes
// with the first, and reads with the second.
var fuzzKeys = [2][]byte{bytes.Repeat([]byte{1}, sha256.Size), bytes.Repeat([]byte{2}, sha256.Size)}

// fuzzPlain is what the valid stream carries: no stream, however cut or
// changed, may make the reader return anything but a prefix of it.
var fuzzPlain = bytes.Repeat([]byte("snowflake records "), 1500)

// fuzzLayer returns a records13 over the Transport t, reading with
// fuzzKeys[0] (server: the proxy's role) and writing with fuzzKeys[1].
func fuzzLayer(tb testing.TB, t *Transport, reader bool) *records13 {
	suite := suites13[tls.TLS_AES_128_GCM_SHA256]
	rs, ws := fuzzKeys[0], fuzzKeys[1]
	if !reader {
		rs, ws = ws, rs
	}
	r, err := newRecords13(t, reader, suite, rs, ws, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// validStream is what a peer sends: fuzzPlain in records of several
// sizes, a KeyUpdate that asks for an answer and one that does not, an
// empty record, and close_notify.
func validStream(tb testing.TB) []byte {
	var out bytes.Buffer
	t := &Transport{}
	t.setDst(&out)
	w := fuzzLayer(tb, t, false)
	rest := fuzzPlain
	for i, size := range []int{1, 100, 5000, 20000} {
		k := min(size, len(rest))
		if _, err := w.Write(rest[:k]); err != nil {
			tb.Fatal(err)
		}
		rest = rest[k:]
		w.wmu.Lock()
		var err error
		switch i {
		case 1:
			err = w.sendLocked(recordTypeHandshake, []byte{msgKeyUpdate, 0, 0, 1, byte(i % 2)})
			if err == nil {
				err = w.wr.update()
			}
		case 2:
			err = w.sendLocked(recordTypeAppData, nil)
		}
		w.wmu.Unlock()
		if err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := w.Write(rest); err != nil {
		tb.Fatal(err)
	}
	if err := w.closeNotifyLocked(); err != nil {
		tb.Fatal(err)
	}
	return out.Bytes()
}

// chunks gives stream in reads of at most size bytes, then io.EOF.
type chunks struct {
	stream []byte
	size   int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.stream) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.size)], c.stream)
	c.stream = c.stream[n:]
	return n, nil
}

// The proxy's reading of records, fed any stream: it never panics nor
// loops, and what it returns is always a prefix of the plaintext the
// valid stream carries (a changed, cut, repeated or reordered record
// fails to authenticate and ends the reading for good).
func FuzzRecords13Read(f *testing.F) {
	valid := validStream(f)
	f.Add(valid, uint16(65535))
	f.Add(valid, uint16(1))
	f.Add(valid, uint16(7))
	f.Add(valid[:len(valid)-30], uint16(300))
	f.Add(append(append([]byte(nil), valid[:100]...), valid[:100]...), uint16(100))
	f.Add([]byte{23, 3, 3, 0, 0}, uint16(5))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint16) {
		tr := &Transport{}
		tr.setSrc(&chunks{stream: stream, size: int(chunk%20000) + 1}, false)
		tr.setDst(io.Discard)
		r := fuzzLayer(t, tr, true)
		var got []byte
		buf := make([]byte, 3000)
		for reads := 0; ; reads++ {
			if reads > 2*len(stream)+10 {
				t.Fatalf("%d reads and no end", reads)
			}
			n, err := r.Read(buf)
			got = append(got, buf[:n]...)
			if !bytes.HasPrefix(fuzzPlain, got) {
				t.Fatalf("read %d bytes that are no prefix of the stream's plaintext", len(got))
			}
			if err != nil {
				if bytes.Equal(stream, valid) && (err != io.EOF || len(got) != len(fuzzPlain)) {
					t.Fatalf("the valid stream: %d bytes, %v; want all %d, EOF", len(got), err, len(fuzzPlain))
				}
				return
			}
		}
	})
}

// writeCounter counts the writes it takes and keeps what they carry.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// A write far larger than a session's buffer (a client's COPY of large
// rows, written past the bufio.Writer) is sealed and written a few
// records at a time: the sealing buffer stays about that size, and the
// records read back whole.
func TestRecords13LargeWriteInBatches(t *testing.T) {
	var dst writeCounter
	wt := &Transport{}
	wt.setDst(&dst)
	w := fuzzLayer(t, wt, false)
	plain := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: 64 records
	if n, err := w.Write(plain); n != len(plain) || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	if dst.writes != 64/maxWriteRecords {
		t.Fatalf("%d writes to the Transport, want %d", dst.writes, 64/maxWriteRecords)
	}
	if limit := 2 * maxWriteRecords * (recordHeaderLen + maxPlaintext + 1 + 16); cap(w.out) > limit {
		t.Fatalf("sealing buffer of %d bytes, want at most %d", cap(w.out), limit)
	}
	rt := &Transport{}
	rt.setSrc(&chunks{stream: dst.Bytes(), size: 5000}, false)
	rt.setDst(io.Discard)
	r := fuzzLayer(t, rt, true)
	got := make([]byte, len(plain))
	if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("read back: %v", err)
	}
}
