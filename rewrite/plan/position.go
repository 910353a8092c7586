package plan

import (
	"strings"
	"unicode/utf8"
)

// srcRun says where bytes [off, off+n) of a part came from: copied from the
// analysed text at src, or inserted by an edit at src.
type srcRun struct {
	off, n, src int
	inserted    bool
}

// srcSlot says where a slot's original call starts in the analysed text,
// and where its argument text starts (-1: none).
type srcSlot struct{ start, arg int }

// SourcePos maps a position in a rendered text back to the text the client
// sent, so that an error's cursor (ErrorResponse field P: 1-based, counted
// in characters) points where the server would have pointed had it run the
// client's own text. vals, base and r are those the text was rendered
// with. A position inside a replaced call maps to the start of the call,
// or into its argument when it falls there (a missing sequence is reported
// at the argument). It returns 0 when pos lies outside the template (the
// caller then drops the field).
func (t *Template) SourcePos(pos int, vals []Value, base int, r Rendering) int {
	if t.spans == nil || pos < 1 {
		return 0
	}
	at := pos - 1 // characters before the position
	srcChars := func(b int) int { return utf8.RuneCountInString(t.src[:b]) }
	n := base
	for i, part := range t.Parts {
		for _, run := range t.spans[i] {
			c := utf8.RuneCountInString(part[run.off : run.off+run.n])
			if at < c {
				if run.inserted {
					return srcChars(run.src) + 1
				}
				return srcChars(run.src) + at + 1
			}
			at -= c
		}
		if i == len(t.Slots) {
			break
		}
		text := t.slotText(i, vals, r, &n)
		c := utf8.RuneCountInString(text)
		if at < c {
			ss := t.slotSrc[i]
			if arg := t.Slots[i].Arg; ss.arg >= 0 && arg != "" {
				if k := strings.Index(text, arg); k >= 0 {
					kc := utf8.RuneCountInString(text[:k])
					if at >= kc && at < kc+utf8.RuneCountInString(arg) {
						return srcChars(ss.arg) + at - kc + 1
					}
				}
			}
			return srcChars(ss.start) + 1
		}
		at -= c
	}
	return 0
}

// slotText renders slot i alone, as the whole template renders it; n counts
// the parameters numbered so far.
func (t *Template) slotText(i int, vals []Value, r Rendering, n *int) string {
	one := Template{Parts: []string{"", ""}, Slots: t.Slots[i : i+1]}
	var v []Value
	if vals != nil {
		v = vals[i : i+1]
	}
	out := one.Render(nil, r, *n, v)
	if r != Literals && t.Slots[i].Op.IsID() {
		*n++
	}
	return string(out)
}
