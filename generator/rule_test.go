package generator

import "testing"

func TestNextRule(t *testing.T) {
	tests := []struct {
		name      string
		last      int64
		now, inc  int64
		wantMs    int64
		wantCount int
	}{
		{"clock ahead starts a new ms", Position(10, 7), 11, 1, 11, 0},
		{"same ms counts up", Position(10, 7), 10, 1, 10, 8},
		{"last count of the ms", Position(10, 4094), 10, 1, 10, 4095},
		{"count wraps: ms runs ahead", Position(10, 4095), 10, 1, 11, 0},
		{"clock behind: continue", Position(10, 7), 3, 1, 10, 8},
		{"clock behind at the wrap", Position(10, 4095), 3, 1, 11, 0},
		{"increment 100", Position(10, 3900), 10, 100, 10, 4000},
		{"increment 100 wraps", Position(10, 4000), 10, 100, 11, 0},
		{"increment 4096", Position(10, 0), 10, 4096, 11, 0},
		{"increment 9999", Position(10, 0), 10, 9999, 11, 0},
		{"huge increment does not overflow", Position(10, 5), 10, 1<<63 - 1, 11, 0},
		{"zero increment bumps", Position(10, 5), 10, 0, 11, 0},
		{"negative increment wraps the count: next ms", Position(10, 0), 10, -1, 11, 0},
		{"negative increment never goes back", Position(10, 5), 10, -1, 11, 0},
		{"negative increment at a newer ms", Position(10, 5), 12, -100, 12, 0},
		{"first position", 0, 0, 1, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Next(tt.last, tt.now, tt.inc)
			if want := Position(tt.wantMs, tt.wantCount); got != want {
				t.Fatalf("Next(%d:%d, now %d, inc %d) = %d:%d, want %d:%d",
					tt.last>>CountBits, tt.last&MaxCount, tt.now, tt.inc,
					got>>CountBits, got&MaxCount, tt.wantMs, tt.wantCount)
			}
		})
	}
}

// 4096 IDs fit in one ms; the 4097th, with the clock standing still, takes
// the next ms, and so on: the ms field runs ahead of the clock.
func TestNextRuleRunsAhead(t *testing.T) {
	pos := Next(Position(4, 4095), 5, 1) // first call in ms 5
	for i := 1; i < 3*4096; i++ {
		next := Next(pos, 5, 1)
		if next <= pos {
			t.Fatalf("call %d: %d not above %d", i, next, pos)
		}
		pos = next
	}
	if want := Position(7, 4095); pos != want {
		t.Fatalf("after 3*4096 calls in ms 5: %d:%d, want 7:4095", pos>>CountBits, pos&MaxCount)
	}
}

func TestNextRuleIncrementSequences(t *testing.T) {
	// INCREMENT 100: 0, 100, ..., 4000, then the next ms.
	pos := Next(0, 1, 100)
	for c := 0; c <= 4000; c += 100 {
		if pos != Position(1, c) {
			t.Fatalf("count %d: got %d:%d", c, pos>>CountBits, pos&MaxCount)
		}
		pos = Next(pos, 1, 100)
	}
	if pos != Position(2, 0) {
		t.Fatalf("after 4000: %d:%d, want 2:0", pos>>CountBits, pos&MaxCount)
	}
	// INCREMENT 4096 and 9999: count 0, ms+1 on every call.
	for _, inc := range []int64{4096, 9999} {
		pos := Next(0, 1, inc)
		for i := int64(0); i < 5; i++ {
			if pos != Position(1+i, 0) {
				t.Fatalf("inc %d call %d: %d:%d", inc, i, pos>>CountBits, pos&MaxCount)
			}
			pos = Next(pos, 1, inc)
		}
	}
}

// The generator's rule keeps below FastPathCounts and moves on where the
// pgEdge rule would use the counts the shim keeps for itself.
func TestNextFastRule(t *testing.T) {
	tests := []struct {
		name      string
		last      int64
		now, inc  int64
		wantMs    int64
		wantCount int
	}{
		{"clock ahead starts a new ms", Position(10, 7), 11, 1, 11, 0},
		{"same ms counts up", Position(10, 7), 10, 1, 10, 8},
		{"last count of its zone", Position(10, 3070), 10, 1, 10, 3071},
		{"past its zone: next ms", Position(10, 3071), 10, 1, 11, 0},
		{"after a shim count: next ms", Position(10, 3500), 10, 1, 11, 0},
		{"after a shim count, clock ahead", Position(10, 3500), 12, 1, 12, 0},
		{"increment 100: 0, 100, 200", Position(10, 100), 10, 100, 10, 200},
		{"increment 100 at the zone's end", Position(10, 3000), 10, 100, 11, 0},
		{"increment 3071", Position(10, 0), 10, 3071, 10, 3071},
		{"increment 3072", Position(10, 0), 10, 3072, 11, 0},
		{"increment 4096", Position(10, 0), 10, 4096, 11, 0},
		{"huge increment does not overflow", Position(10, 5), 10, 1<<63 - 1, 11, 0},
		{"negative increment: next ms", Position(10, 5), 10, -1, 11, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NextFast(tt.last, tt.now, tt.inc)
			if want := Position(tt.wantMs, tt.wantCount); got != want {
				t.Fatalf("NextFast(%d:%d, now %d, inc %d) = %d:%d, want %d:%d",
					tt.last>>CountBits, tt.last&MaxCount, tt.now, tt.inc,
					got>>CountBits, got&MaxCount, tt.wantMs, tt.wantCount)
			}
		})
	}
}

func BenchmarkRule(b *testing.B) {
	pos := int64(0)
	for i := 0; b.Loop(); i++ {
		pos = Next(pos, int64(i>>12), 1)
	}
	sinkPos = pos
}

var sinkPos int64
