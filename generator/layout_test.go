package generator

import (
	"testing"
	"time"
)

func TestComposeDecompose(t *testing.T) {
	tests := []struct {
		name  string
		ms    int64
		node  int
		count int
		id    int64
	}{
		{"zero", 0, 0, 0, 0},
		{"count only", 0, 0, 4095, 4095},
		{"node only", 0, 1, 0, 1 << 12},
		{"ms only", 1, 0, 0, 1 << 22},
		// get_epoch(id) = 1704996539.845 (2024-01-11 18:08:59.845 UTC).
		{"example node 1", 32465339845, 1, 0, 136169504773246976},
		{"example all ones", 32465339845, 1023, 4095, 136169504777437183},
		{"max", MaxMs, MaxNode, MaxCount, 1<<63 - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Compose(tt.ms, tt.node, tt.count); got != tt.id {
				t.Fatalf("Compose(%d, %d, %d) = %d, want %d", tt.ms, tt.node, tt.count, got, tt.id)
			}
			ms, node, count := Decompose(tt.id)
			if ms != tt.ms || node != tt.node || count != tt.count {
				t.Fatalf("Decompose(%d) = %d, %d, %d", tt.id, ms, node, count)
			}
			pos := Position(tt.ms, tt.count)
			if PositionOf(tt.id) != pos {
				t.Fatalf("PositionOf(%d) = %d, want %d", tt.id, PositionOf(tt.id), pos)
			}
			if IDAt(pos, tt.node) != tt.id {
				t.Fatalf("IDAt(%d, %d) = %d, want %d", pos, tt.node, IDAt(pos, tt.node), tt.id)
			}
		})
	}
}

func TestDecodeExample(t *testing.T) {
	d := Decode(136169504773246976)
	want := Decoded{
		ID:     136169504773246976,
		Ms:     32465339845,
		UnixMs: 1704996539845,
		Epoch:  "1704996539.845",
		Time:   time.Date(2024, 1, 11, 18, 8, 59, 845e6, time.UTC),
		Node:   1,
		Count:  0,
	}
	if d != want {
		t.Fatalf("Decode = %+v, want %+v", d, want)
	}
	if got := Time(d.ID); !got.Equal(want.Time) || got.Location() != time.UTC {
		t.Fatalf("Time = %v, want %v", got, want.Time)
	}
	// The epoch itself decodes to 2023-01-01 with three decimals kept.
	if e := Decode(0).Epoch; e != "1672531200.000" {
		t.Fatalf("Decode(0).Epoch = %q", e)
	}
}

// A negative int8 (sign bit set) still decodes field by field, as the
// extension's get_node/get_count do.
func TestDecomposeNegative(t *testing.T) {
	ms, node, count := Decompose(-1)
	if ms != MaxMs || node != MaxNode || count != MaxCount {
		t.Fatalf("Decompose(-1) = %d, %d, %d", ms, node, count)
	}
}

func FuzzComposeDecompose(f *testing.F) {
	f.Add(int64(0), 0, 0)
	f.Add(int64(32465339845), 1, 0)
	f.Add(int64(MaxMs), MaxNode, MaxCount)
	f.Fuzz(func(t *testing.T, ms int64, node, count int) {
		ms &= MaxMs
		node &= MaxNode
		count &= MaxCount
		id := Compose(ms, node, count)
		if id < 0 {
			t.Fatalf("Compose(%d, %d, %d) = %d is negative", ms, node, count, id)
		}
		gms, gnode, gcount := Decompose(id)
		if gms != ms || gnode != node || gcount != count {
			t.Fatalf("round trip (%d, %d, %d) -> %d -> (%d, %d, %d)", ms, node, count, id, gms, gnode, gcount)
		}
		if IDAt(PositionOf(id), node) != id {
			t.Fatalf("IDAt(PositionOf(%d)) differs", id)
		}
		if Time(id).UnixMilli() != ms+EpochUnixMs {
			t.Fatalf("Time(%d) = %v", id, Time(id))
		}
	})
}
