package generator

// allocTable maps Keys to allocators for the hot path. It is immutable once
// published (writers build a new one, see Generator.allocator), so readers
// need no lock.
//
// It exists because a Go map lookup with Key (a struct holding a string)
// is a large share of the cost of an ID: the generic hash runs per field
// (bench/README.md, "Figures behind design choices"). This
// open-addressing table hashes with two multiplies and compares the key
// once.
type allocTable struct {
	shift uint         // 64 - log2(len(slots))
	mask  int          // len(slots) - 1
	slots []*allocator // power of two, at most half full: probes end at a nil
	all   []*allocator // in insertion order, for rebuilding
}

func newAllocTable(all []*allocator) *allocTable {
	size := 8
	for size < 2*len(all) {
		size *= 2
	}
	t := &allocTable{mask: size - 1, slots: make([]*allocator, size), all: all}
	for bits := size; bits > 1; bits >>= 1 {
		t.shift++
	}
	t.shift = 64 - t.shift
	for _, a := range all {
		i := t.index(a.key)
		for t.slots[i] != nil {
			i = (i + 1) & t.mask
		}
		t.slots[i] = a
	}
	return t
}

// index hashes the fields that tell Keys apart in practice: sequence OIDs
// repeat across databases (every database starts at 16384), so the database
// name takes part through its length and two bytes. Collisions only cost
// probes; equality decides.
func (t *allocTable) index(k Key) int {
	h := uint64(k.Seq)<<32 ^ uint64(k.Node)
	if n := len(k.Database); n > 0 {
		h ^= uint64(n)<<24 ^ uint64(k.Database[0])<<44 ^ uint64(k.Database[n-1])<<54
	}
	return int((h * 0x9E3779B97F4A7C15) >> t.shift)
}

// get returns key's allocator or nil.
func (t *allocTable) get(k Key) *allocator {
	for i := t.index(k); ; i = (i + 1) & t.mask {
		a := t.slots[i]
		if a == nil || a.key == k {
			return a
		}
	}
}

// with returns a new table holding a and t's allocators but those that
// retire (made and whose lease ended before the millisecond endedBefore,
// with no renewal in flight).
func (t *allocTable) with(a *allocator, endedBefore int64) *allocTable {
	all := make([]*allocator, 0, len(t.all)+1)
	for _, b := range t.all {
		if !b.retire(endedBefore) {
			all = append(all, b)
		}
	}
	return newAllocTable(append(all, a))
}
