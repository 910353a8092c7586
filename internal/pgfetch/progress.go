package pgfetch

import (
	"fmt"
	"io"
)

// progress writes a line rewritten in place as bytes pass through it, once
// per whole percent (or per megabyte when the size is unknown), so that a
// terminal gets at most a hundred updates.
type progress struct {
	w     io.Writer // nil: silent
	what  string
	total int64 // -1: unknown
	n     int64
	shown int64 // the last percent or megabyte shown; -1 before the first
	wrote bool
}

func (p *progress) Write(b []byte) (int, error) {
	if p.w == nil {
		return len(b), nil
	}
	if p.n == 0 {
		p.shown = -1
	}
	p.n += int64(len(b))
	step := p.n >> 20
	if p.total > 0 {
		step = p.n * 100 / p.total
	}
	if step != p.shown {
		p.shown = step
		p.wrote = true
		if p.total > 0 {
			fmt.Fprintf(p.w, "\rdownloading %s: %3d%% of %.1f MB", p.what, step, float64(p.total)/(1<<20))
		} else {
			fmt.Fprintf(p.w, "\rdownloading %s: %.1f MB", p.what, float64(p.n)/(1<<20))
		}
	}
	return len(b), nil
}

// done ends the line.
func (p *progress) done() {
	if p.w != nil && p.wrote {
		fmt.Fprintln(p.w)
	}
}
