//go:build unix

package wire

import (
	"bufio"
	"errors"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

var errBenchDone = errors.New("benchmark done")

// BenchmarkRelaySocket relays messages between real sockets the way the
// pumps do in steady state: frameReader.poll (read without the EAGAIN
// double read, wait in the network poller) and sockWriter (raw writes),
// one flush per batch. A feeder writes one Bind/Execute/Sync pipeline at a
// time and waits for it on the far side, as a client waits for its answer.
// Reported allocations are per relayed message: 0.
func BenchmarkRelaySocket(b *testing.B) {
	stream := encodeAll(&pgproto3.Bind{PreparedStatement: "s1", Parameters: [][]byte{[]byte("1")}},
		&pgproto3.Execute{}, &pgproto3.Sync{})
	const perBatch = 3
	feed, in := netloop.SocketPair(b)
	out, sink := netloop.SocketPair(b)
	fr := newFrameReader(in, defaultMaxMessage)
	fr.UsePoll(in)
	bw := bufio.NewWriterSize(out, ioBufferSize)
	netloop.UseSockWriter(bw, out)
	if !fr.CanPoll() {
		b.Fatal("no sockReader for a TCP connection")
	}
	batches := (b.N + perBatch - 1) / perBatch
	go func() {
		buf := make([]byte, len(stream))
		for i := 0; i < batches; i++ {
			if _, err := feed.Write(stream); err != nil {
				return
			}
			if _, err := io.ReadFull(sink, buf); err != nil {
				return
			}
		}
	}()
	b.ReportAllocs()
	b.SetBytes(int64(len(stream) / perBatch))
	b.ResetTimer()
	n := 0
	step := stepFunc(func(typ byte) error {
		_, _, _ = fr.next()
		if err := fr.forward(bw); err != nil {
			return err
		}
		if fr.R.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
		if n++; n == batches*perBatch {
			return errBenchDone
		}
		return nil
	})
	for {
		err := fr.Poll(step, netloop.Client)
		if err == errBenchDone {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Fatal("poll left the fast path for a small message")
	}
}

// stepFunc is a netloop.Stepper of one function, for one side.
type stepFunc func(typ byte) error

func (f stepFunc) Step(_ netloop.Side, typ byte) error { return f(typ) }
