package pgcopy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// feed rewrites the chunks of a stream as wire does: the IDs come one
// refill of batch at a time (1, 2, 3, ...), and each need is met by a refill.
func feed(t testing.TB, o Options, chunks [][]byte, batch int) (out []byte, rows int64) {
	r := New(o)
	var ids IDs
	next := int64(1)
	refill := func() {
		ids.Compact()
		for k := 0; k < max(batch, o.Extra); k++ {
			ids.Buf = append(ids.Buf, next)
			next++
		}
	}
	for _, c := range chunks {
		for {
			var n int
			var need bool
			out, n, need = r.Rewrite(out, c, &ids)
			c = c[n:]
			if !need {
				break
			}
			if n == 0 && ids.Len() >= o.Extra {
				t.Fatalf("need without progress, %d IDs left", ids.Len())
			}
			refill()
		}
		if len(c) != 0 {
			t.Fatalf("%d bytes left unconsumed without need", len(c))
		}
	}
	for {
		var need bool
		out, need = r.Finish(out, &ids)
		if !need {
			break
		}
		refill()
	}
	return out, r.Rows()
}

// splits returns data whole, byte by byte, and cut at every position.
func splits(data []byte) [][][]byte {
	all := [][][]byte{{data}}
	var bytewise [][]byte
	for i := range data {
		bytewise = append(bytewise, data[i:i+1])
	}
	all = append(all, bytewise)
	for i := 1; i < len(data); i++ {
		all = append(all, [][]byte{data[:i], data[i:]})
	}
	return all
}

func TestLines(t *testing.T) {
	text := Options{Format: Text, Delim: '\t', Cols: 2, Extra: 1}
	text1 := Options{Format: Text, Delim: '\t', Cols: 1, Extra: 1}
	csv := Options{Format: CSV, Delim: ',', Quote: '"', Escape: '"', Cols: 2, Extra: 1, CSVEndMarker: true}
	csvEsc := Options{Format: CSV, Delim: ',', Quote: '"', Escape: '\\', Cols: 2, Extra: 1, CSVEndMarker: true}
	csvOne := csv
	csvOne.Cols = 1
	csv18one := csvOne
	csv18one.CSVEndMarker = false
	hdr := csv
	hdr.Header, hdr.HeaderText = true, []byte(",id")
	two := text
	two.Extra = 2
	semi := Options{Format: Text, Delim: ';', Cols: 2, Extra: 1}
	for _, c := range []struct {
		name     string
		o        Options
		in, want string
		rows     int64
	}{
		{"text", text, "a\tb\nc\td\n", "a\tb\t1\nc\td\t2\n", 2},
		{"text last line without newline", text, "a\tb\nc\td", "a\tb\t1\nc\td\t2", 2},
		{"text crlf", text, "a\tb\r\nc\td\r\n", "a\tb\t1\r\nc\td\t2\r\n", 2},
		{"text cr", text, "a\tb\rc\td\r", "a\tb\t1\rc\td\t2\r", 2},
		{"text escapes", text, "a\\\tx\tb\\\\\nc\\\nd\te\n", "a\\\tx\tb\\\\\t1\nc\\\nd\te\t2\n", 2},
		{"text too few fields", text, "a\nb\tc\n", "a\nb\tc\t1\n", 1},
		{"text too many fields", text, "a\tb\tc\n", "a\tb\tc\t1\n", 1},
		{"text empty line one column", text1, "\n\n", "\t1\n\t2\n", 2},
		{"text end marker", text, "a\tb\n\\.\nignored\n", "a\tb\t1\n\\.\nignored\n", 1},
		{"text end marker after data", text, "a\tb\\.\nx\ty\n", "a\tb\t1\\.\nx\ty\n", 1},
		{"text escaped backslash then dot", text, "a\t\\\\.\n", "a\t\\\\.\t1\n", 1},
		{"text trailing backslash at the end", text, "a\tb\\", "a\tb\t1\\", 1},
		{"text lone backslash at the end", text1, "\\", "\t1\\", 1},
		{"text other delimiter", semi, "a;b\n", "a;b;1\n", 1},
		{"text two ids", two, "a\tb\nc\td\n", "a\tb\t1\t2\nc\td\t3\t4\n", 2},
		{"csv", csv, "a,b\nc,d\n", "a,b,1\nc,d,2\n", 2},
		{"csv quoted delimiter and newline", csv, "\"a,\nx\",b\n\"c\"\"\",\"d\r\ne\"\n", "\"a,\nx\",b,1\n\"c\"\"\",\"d\r\ne\",2\n", 2},
		{"csv empty quoted", csv, "\"\",\"\"\n", "\"\",\"\",1\n", 1},
		{"csv escape", csvEsc, "\"a\\\",b\",c\n\"\\\\\",d\n", "\"a\\\",b\",c,1\n\"\\\\\",d,2\n", 2},
		{"csv end marker", csv, "a,b\n\\.\n", "a,b,1\n\\.\n", 1},
		{"csv end marker crlf", csv, "a,b\r\n\\.\r\nx,y\r\n", "a,b,1\r\n\\.\r\nx,y\r\n", 1},
		{"csv backslash dot is data", csv, "\\.x,b\n\\.", "\\.x,b,1\n\\.", 1},
		{"csv backslash not at start", csv, "a\\.,b\n", "a\\.,b,1\n", 1},
		{"csv end marker only before 18", csv18one, "a\n\\.\n", "a,1\n\\.,2\n", 2},
		{"csv end marker before 18", csvOne, "a\n\\.\n", "a,1\n\\.\n", 1},
		{"csv unterminated quote", csv, "a,\"b\n", "a,\"b\n", 0},
		{"csv header", hdr, "a,b\n1,2\n", "a,b,id\n1,2,1\n", 1},
		{"csv header wrong count", hdr, "a\n1,2\n", "a\n1,2,1\n", 1},
		{"csv header only", hdr, "a,b", "a,b,id", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			for _, batch := range []int{1, 3, 100} {
				for _, ch := range splits([]byte(c.in)) {
					got, rows := feed(t, o, ch, batch)
					if string(got) != c.want || rows != c.rows {
						t.Fatalf("batch %d, chunks %q:\ngot  %q (%d rows)\nwant %q (%d rows)", batch, ch, got, rows, c.want, c.rows)
					}
				}
			}
		})
	}
}

// tuple is a binary tuple of fields (nil: NULL).
func tuple(fields ...[]byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(fields)))
	for _, f := range fields {
		if f == nil {
			b = binary.BigEndian.AppendUint32(b, 0xffffffff)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

func header(ext []byte) []byte {
	b := append([]byte(nil), signature[:]...)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ext)))
	return append(b, ext...)
}

var trailer = []byte{0xff, 0xff}

func id8(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestBinary(t *testing.T) {
	o := Options{Format: Binary, Cols: 2, Extra: 1}
	o2 := o
	o2.Extra = 2
	for _, c := range []struct {
		name     string
		o        Options
		in, want []byte
		rows     int64
	}{
		{"tuples", o,
			cat(header(nil), tuple([]byte("ab"), nil), tuple([]byte{}, []byte("xyz")), trailer),
			cat(header(nil), tuple([]byte("ab"), nil, id8(1)), tuple([]byte{}, []byte("xyz"), id8(2)), trailer), 2},
		{"header extension", o,
			cat(header([]byte("extension")), tuple([]byte("a"), []byte("b")), trailer),
			cat(header([]byte("extension")), tuple([]byte("a"), []byte("b"), id8(1)), trailer), 1},
		{"two ids", o2,
			cat(header(nil), tuple([]byte("a"), []byte("b")), trailer),
			cat(header(nil), tuple([]byte("a"), []byte("b"), id8(1), id8(2)), trailer), 1},
		{"wrong field count is left alone", o,
			cat(header(nil), tuple([]byte("a")), tuple([]byte("a"), []byte("b"), []byte("c")), tuple(), trailer),
			cat(header(nil), tuple([]byte("a")), tuple([]byte("a"), []byte("b"), []byte("c")), tuple(), trailer), 0},
		{"data after the trailer passes", o,
			cat(header(nil), trailer, tuple([]byte("a"), []byte("b"))),
			cat(header(nil), trailer, tuple([]byte("a"), []byte("b"))), 0},
		{"bad signature passes", o,
			cat([]byte("PGCOPY\nXXXXXXXXXXXX"), tuple([]byte("a"), []byte("b"))),
			cat([]byte("PGCOPY\nXXXXXXXXXXXX"), tuple([]byte("a"), []byte("b"))), 0},
		{"no trailer", o,
			cat(header(nil), tuple([]byte("a"), []byte("b"))),
			cat(header(nil), tuple([]byte("a"), []byte("b"), id8(1))), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, batch := range []int{1, 2, 100} {
				for _, ch := range splits(c.in) {
					got, rows := feed(t, c.o, ch, batch)
					if !bytes.Equal(got, c.want) || rows != c.rows {
						t.Fatalf("batch %d, %d chunks:\ngot  %x (%d rows)\nwant %x (%d rows)", batch, len(ch), got, rows, c.want, c.rows)
					}
				}
			}
		})
	}
}

// TestRewriteAllocates nothing once dst and the IDs have room.
func TestRewriteAllocatesNothing(t *testing.T) {
	data := []byte(strings.Repeat("12345\tsome text\n", 200))
	r := New(Options{Format: Text, Delim: '\t', Cols: 2, Extra: 1})
	ids := IDs{Buf: make([]int64, 100000)}
	dst := make([]byte, 0, 64<<10)
	allocs := testing.AllocsPerRun(100, func() {
		ids.Next = 0
		dst, _, _ = r.Rewrite(dst[:0], data, &ids)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Rewrite", allocs)
	}
}

func BenchmarkText(b *testing.B) {
	data := []byte(strings.Repeat(fmt.Sprintf("%d\tsome text of a row\n", 1234567), 4000))
	r := New(Options{Format: Text, Delim: '\t', Cols: 2, Extra: 1})
	ids := IDs{Buf: make([]int64, 4000)}
	dst := make([]byte, 0, 2*len(data))
	b.SetBytes(int64(len(data)))
	for i := 0; i < b.N; i++ {
		ids.Next = 0
		dst, _, _ = r.Rewrite(dst[:0], data, &ids)
	}
}
