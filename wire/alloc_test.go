package wire

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Regression: the text of every Query and Parse was copied into a new
// string for Rewriter.Plan, one allocation per message on the pass-through
// path of the simple protocol (BenchmarkRelayClientText; the benchmarks
// before covered Bind, Execute and Sync only).
func TestPassThroughTextAllocatesNothing(t *testing.T) {
	for name, stream := range passThroughStreams() {
		ss := benchSession(true, &repeatReader{data: stream})
		for i := 0; i < 8; i++ { // warm up the buffers and the owed queue
			if err := dispatchOne(ss); err != nil {
				t.Fatal(err)
			}
		}
		if n := testing.AllocsPerRun(200, func() {
			if err := dispatchOne(ss); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per message, want 0", name, n)
		}
	}
}

// The steps the pumps and the event loops run for each message allocate
// nothing, with the bookkeeping of lifecycle.go: the client's count of
// statements without a Rewriter (busy) and the server pump's check for a
// cut at each batch.
func TestRelayStepsAllocateNothing(t *testing.T) {
	client := encodeAll(&pgproto3.Query{String: "SELECT 1"}, &pgproto3.Parse{Query: "SELECT 1"},
		&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}, &pgproto3.Flush{})
	ss := benchSession(false, &repeatReader{data: client})
	step := func() {
		typ, _, err := ss.cp.cr.next()
		if err != nil {
			t.Fatal(err)
		}
		if err := ss.cp.step(typ); err != nil {
			t.Fatal(err)
		}
	}
	for range 12 {
		step()
	}
	if n := testing.AllocsPerRun(300, step); n != 0 {
		t.Errorf("client step: %v allocations per message, want 0", n)
	}

	server := encodeAll(&pgproto3.BindComplete{}, &pgproto3.DataRow{Values: [][]byte{[]byte("42")}},
		&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	for _, track := range []bool{false, true} {
		ss := benchSession(track, &repeatReader{data: server})
		i := 0
		step := func() {
			if track && i%4 == 0 {
				ss.cp.push(owed{kind: owedBind})
				ss.cp.push(owed{kind: owedExecute})
				ss.cp.push(owed{kind: owedSync})
			}
			i++
			typ, _, err := ss.sp.sr.next()
			if err != nil {
				t.Fatal(err)
			}
			if err := ss.sp.step(typ); err != nil {
				t.Fatal(err)
			}
		}
		for range 16 {
			step()
		}
		if n := testing.AllocsPerRun(400, step); n != 0 {
			t.Errorf("server step (tracked %v): %v allocations per message, want 0", track, n)
		}
	}
}
