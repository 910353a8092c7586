package wire

import "testing"

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
