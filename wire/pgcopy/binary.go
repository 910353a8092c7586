package pgcopy

import "encoding/binary"

// The binary format: a signature, flags and a header extension; then
// tuples, each an int16 field count and per field an int32 length (-1:
// NULL) and the bytes; then the trailer, a field count of -1. A tuple of
// Cols fields gets Extra more: its count grows and int8 fields follow its
// last one.

// signature is the binary format's fixed start.
var signature = [11]byte{'P', 'G', 'C', 'O', 'P', 'Y', '\n', 0xff, '\r', '\n', 0}

// binStep is where the binary reader is.
type binStep uint8

const (
	binHeader binStep = iota // signature, flags, extension length (19 bytes)
	binExt                   // the header extension (skip bytes)
	binCount                 // a tuple's field count (2 bytes)
	binLen                   // a field's length (4 bytes)
	binData                  // a field's bytes (skip bytes)
	binAppend                // the tuple's IDs are due
)

// binState is the binary reader's state between messages.
type binState struct {
	step binStep
	// part holds the bytes of a fixed-size item read so far (n of them).
	part [19]byte
	n    int
	skip int64 // bytes left of binExt or binData
	// left is the fields of the current tuple still to read; grow: the
	// tuple gets the IDs after them.
	left int
	grow bool
}

// need is the size of the fixed-size item of a step.
func (b *binState) need() int {
	switch b.step {
	case binHeader:
		return 19
	case binCount:
		return 2
	}
	return 4
}

func (r *Rewriter) binary(dst, src []byte, ids *IDs) ([]byte, int, bool) {
	b := &r.bin
	i := 0
	for {
		if r.ended {
			return append(dst, src[i:]...), len(src), false
		}
		switch b.step {
		case binAppend:
			if ids.Len() < r.o.Extra {
				return dst, i, true
			}
			for k := 0; k < r.o.Extra; k++ {
				dst = putID(dst, ids.Buf[ids.Next])
				ids.Next++
			}
			r.rows++
			b.step = binCount
			continue
		case binExt, binData:
			k := int(min(b.skip, int64(len(src)-i)))
			dst = append(dst, src[i:i+k]...)
			i += k
			b.skip -= int64(k)
			if b.skip > 0 {
				return dst, i, false
			}
			if b.step == binExt {
				b.step = binCount
			} else {
				r.fieldDone()
			}
			continue
		}
		// A fixed-size item, perhaps split across messages.
		need := b.need()
		k := min(need-b.n, len(src)-i)
		copy(b.part[b.n:], src[i:i+k])
		b.n += k
		i += k
		if b.n < need {
			return dst, i, false
		}
		b.n = 0
		item := b.part[:need]
		switch b.step {
		case binHeader:
			dst = append(dst, item...)
			ext := int32(binary.BigEndian.Uint32(item[15:]))
			if [11]byte(item[:11]) != signature || ext < 0 {
				r.ended = true // the server's error
				continue
			}
			b.step, b.skip = binExt, int64(ext)
		case binCount:
			count := int16(binary.BigEndian.Uint16(item))
			switch {
			case count == -1:
				dst = append(dst, item...)
				r.ended = true // the trailer
				continue
			case count < 0:
				dst = append(dst, item...)
				r.ended = true // the server's error
				continue
			}
			b.left = int(count)
			b.grow = int(count) == r.o.Cols && int(count)+r.o.Extra <= 0x7fff
			if b.grow {
				dst = binary.BigEndian.AppendUint16(dst, uint16(int(count)+r.o.Extra))
			} else {
				dst = append(dst, item...)
			}
			if b.left == 0 {
				b.left = 1 // so that fieldDone ends the tuple
				r.fieldDone()
			} else {
				b.step = binLen
			}
		case binLen:
			dst = append(dst, item...)
			l := int32(binary.BigEndian.Uint32(item))
			switch {
			case l == -1:
				r.fieldDone()
			case l < 0:
				r.ended = true // the server's error
			default:
				b.step, b.skip = binData, int64(l)
			}
		}
	}
}

// fieldDone moves past a tuple's field.
func (r *Rewriter) fieldDone() {
	b := &r.bin
	b.left--
	switch {
	case b.left > 0:
		b.step = binLen
	case b.grow:
		b.step = binAppend
	default:
		b.step = binCount
	}
}
