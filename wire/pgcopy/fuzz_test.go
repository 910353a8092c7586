package pgcopy

import (
	"bytes"
	"testing"
)

// FuzzRewrite feeds arbitrary bytes, as arbitrary options and cut in two
// at an arbitrary place: the rewriter must not panic, must consume all of
// its input, and must give the same output however the input is cut.
// Seeds: the f.Add calls below and testdata/fuzz/FuzzRewrite.
func FuzzRewrite(f *testing.F) {
	f.Add(uint8(0), uint8(2), uint8(1), 3, []byte("a\tb\nc\\\td\\.\n"))
	f.Add(uint8(1), uint8(2), uint8(2), 5, []byte("\"a,\"\"\nb\",c\r\n\\.\r\n"))
	f.Add(uint8(5), uint8(1), uint8(1), 1, []byte("x,y\n\\.x\n\"unterminated"))
	f.Add(uint8(2), uint8(2), uint8(1), 25, cat(header([]byte("e")), tuple([]byte("a"), nil), tuple([]byte("b")), trailer))
	f.Add(uint8(2), uint8(1), uint8(3), 0, cat(header(nil), []byte{0, 1, 0x7f, 0xff, 0xff, 0xff}))
	f.Fuzz(func(t *testing.T, opts, cols, extra uint8, cut int, data []byte) {
		o := Options{
			Format: Format(opts % 3), Delim: '\t', Quote: '"', Escape: '"',
			Cols: int(cols%4) + 1, Extra: int(extra%MaxExtra) + 1,
			CSVEndMarker: opts&4 == 0, Header: opts&8 != 0, HeaderText: []byte(",h"),
		}
		if o.Format == CSV {
			o.Delim = ','
			if opts&16 != 0 {
				o.Escape = '\\'
			}
		}
		whole, rows := feed(t, o, [][]byte{data}, 7)
		if cut < 0 {
			cut = -cut
		}
		if len(data) > 0 {
			cut %= len(data) + 1
			split, splitRows := feed(t, o, [][]byte{data[:cut], data[cut:]}, 1)
			if !bytes.Equal(whole, split) || rows != splitRows {
				t.Fatalf("cut at %d: %q (%d rows), whole: %q (%d rows)", cut, split, splitRows, whole, rows)
			}
		}
		if rows == 0 && o.Format != Binary && !o.Header && !bytes.Equal(whole, data) {
			t.Fatalf("no row got IDs but the data changed: %q -> %q", data, whole)
		}
	})
}
