package wire

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snowflake-proxy/snowflake-proxy/wire/netloop"
)

// repeatReader repeats a byte stream forever.
type repeatReader struct {
	data []byte
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], r.data[r.off:])
		n += k
		r.off = (r.off + k) % len(r.data)
	}
	return n, nil
}

func encodeAll(msgs ...interface{ Encode([]byte) ([]byte, error) }) []byte {
	var b []byte
	for _, m := range msgs {
		b, _ = m.Encode(b)
	}
	return b
}

func benchSession(track bool, r io.Reader) *session {
	srv := &Server{}
	srv.ctx, srv.cancel = context.WithCancel(context.Background())
	srv.cfg.MaxMessageSize = defaultMaxMessage
	srv.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	if track {
		srv.cfg.Rewriter = &fakeRewriter{plans: snowflakePlans()}
	}
	ss := newSession(srv, nil, 1)
	ss.sp.sr = newFrameReader(r, maxServerMessage)
	ss.cp.cr = frameReader{Input: netloop.Input{R: ss.sp.sr.R, Max: defaultMaxMessage}}
	ss.sh.cw = bufio.NewWriterSize(io.Discard, ioBufferSize)
	ss.cp.sw = ss.sh.cw
	ss.attachRelay()
	return ss
}

// BenchmarkRelayServerToClient relays the response to a pipelined
// Bind/Execute/Sync: BindComplete, DataRow, CommandComplete, ReadyForQuery.
// Reported allocations are per relayed message: 0 in steady state.
func BenchmarkRelayServerToClient(b *testing.B) {
	stream := encodeAll(&pgproto3.BindComplete{}, &pgproto3.DataRow{Values: [][]byte{[]byte("42"), []byte("hello")}},
		&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	runTracked(b, func(b *testing.B, track bool) {
		ss := benchSession(track, &repeatReader{data: stream})
		p := ss.sp
		b.ReportAllocs()
		b.SetBytes(int64(len(stream) / 4))
		for i := 0; i < b.N; i++ {
			if track && i%4 == 0 {
				ss.sh.q.push(owed{kind: owedBind})
				ss.sh.q.push(owed{kind: owedExecute})
				ss.sh.q.push(owed{kind: owedSync})
			}
			typ, _, err := ss.sp.sr.next()
			if err != nil {
				b.Fatal(err)
			}
			if err := p.handle(typ); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRelayClientToServer relays pipelined Bind/Execute/Sync messages
// of a prepared statement from the client.
func BenchmarkRelayClientToServer(b *testing.B) {
	stream := encodeAll(&pgproto3.Bind{PreparedStatement: "s1", Parameters: [][]byte{[]byte("1")}},
		&pgproto3.Execute{}, &pgproto3.Sync{})
	runTracked(b, func(b *testing.B, track bool) {
		ss := benchSession(track, &repeatReader{data: stream})
		p := ss.cp
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			typ, _, err := ss.cp.cr.next()
			if err != nil {
				b.Fatal(err)
			}
			if track {
				err = p.dispatch(typ)
				if typ == 'S' {
					ss.sh.q = owedQueue{items: ss.sh.q.items[:0]}
				}
			} else {
				err = ss.cp.cr.forward(ss.cp.sw)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// runTracked runs f as two sub-benchmarks: "relay" without a Rewriter and
// "tracked" with one.
func runTracked(b *testing.B, f func(b *testing.B, track bool)) {
	for _, track := range []bool{false, true} {
		name := "relay"
		if track {
			name = "tracked"
		}
		b.Run(name, func(b *testing.B) { f(b, track) })
	}
}

// passThroughStreams are client messages whose text cannot concern
// snowflake: a simple Query and an unnamed Parse, Bind, Execute, Sync.
func passThroughStreams() map[string][]byte {
	const sql = "SELECT abalance FROM pgbench_accounts WHERE aid = 12345"
	return map[string][]byte{
		"query": encodeAll(&pgproto3.Query{String: sql}),
		"parse": encodeAll(&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}),
	}
}

// dispatchOne takes and dispatches one client message, emptying the owed
// queue after the message that completes a response.
func dispatchOne(ss *session) error {
	typ, _, err := ss.cp.cr.next()
	if err != nil {
		return err
	}
	if err := ss.cp.dispatch(typ); err != nil {
		return err
	}
	if typ == 'Q' || typ == 'S' {
		ss.sh.q = owedQueue{items: ss.sh.q.items[:0]}
	}
	return nil
}

// BenchmarkRelayClientText relays client messages that carry SQL text
// (Query, Parse) with a Rewriter: 0 allocations per message.
func BenchmarkRelayClientText(b *testing.B) {
	for name, stream := range passThroughStreams() {
		b.Run(name, func(b *testing.B) {
			ss := benchSession(true, &repeatReader{data: stream})
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := dispatchOne(ss); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
