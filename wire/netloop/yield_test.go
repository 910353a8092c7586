package netloop

import (
	"testing"
	"time"
)

func TestSchedPassDue(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC)
	var p schedPass
	steps := []struct {
		at   time.Duration
		want bool
	}{
		{0, true}, // the first batch passes: nothing is known of the goroutine's last pass
		{time.Millisecond, false},
		{schedPassEvery - time.Nanosecond, false},
		{schedPassEvery, true},
		{schedPassEvery + time.Millisecond, false},
		{3 * schedPassEvery, true}, // a long wait: due at once, counted from now
		{4*schedPassEvery - time.Nanosecond, false},
		{4 * schedPassEvery, true},
	}
	for _, s := range steps {
		if got := p.due(t0.Add(s.at)); got != s.want {
			t.Fatalf("due at +%v = %v, want %v", s.at, got, s.want)
		}
	}
}
