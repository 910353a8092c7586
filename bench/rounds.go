package main

import (
	"io"
	"strconv"
	"strings"
)

// The main table compares medians. A median says nothing of how far the
// rounds behind it disagree, and on a 2-core machine a ratio can move by
// more than a target's margin from one round to the next. The rounds table
// shows each ratio round by round: the targets run one after another
// within a round (harness.go), so the rounds are the closest pairs the run
// has.

// roundRatio is one column of the rounds table: a ratio of the main
// table, the targets it compares, and whether it applies to pass-through
// workloads only.
type roundRatio struct {
	title       string
	uses        []column
	passThrough bool
	value       func(s *[numColumns]summary) (float64, bool)
}

var roundRatios = []roundRatio{
	{"proxy/direct", []column{colProxy, colDirect}, false,
		func(s *[numColumns]summary) (float64, bool) { return ratio(s[colProxy], s[colDirect]) }},
	{"proxy/pgbouncer", []column{colProxy, colPgBouncer}, false,
		func(s *[numColumns]summary) (float64, bool) { return ratio(s[colProxy], s[colPgBouncer]) }},
	{"proxy/shim", []column{colProxy, colShim}, false,
		func(s *[numColumns]summary) (float64, bool) { return ratio(s[colProxy], s[colShim]) }},
	{"added lat proxy/pgb", []column{colProxy, colDirect, colPgBouncer}, true,
		func(s *[numColumns]summary) (float64, bool) {
			return addedLatencyRatio(s[colProxy], s[colDirect], s[colPgBouncer])
		}},
	{"floor/pgbouncer", []column{colFloor, colPgBouncer}, false,
		func(s *[numColumns]summary) (float64, bool) { return ratio(s[colFloor], s[colPgBouncer]) }},
}

// applies reports whether ratio c belongs in row k: the row measured every
// target c compares (whether or not the runs succeeded).
func (r *report) applies(k groupKey, c roundRatio) bool {
	if c.passThrough && !r.workload(k.Workload).PassThrough {
		return false
	}
	for _, col := range c.uses {
		if len(r.res.rows[k][col]) == 0 {
			return false
		}
	}
	return true
}

// byRound returns, for row k, each round's summaries: one measurement per
// column, so a ratio of them is that round's ratio.
func (r *report) byRound(k groupKey) [][numColumns]summary {
	var out [][numColumns]summary
	for _, run := range r.res.runs {
		if run.Key != k {
			continue
		}
		for len(out) <= run.Round {
			out = append(out, [numColumns]summary{})
		}
		out[run.Round][run.Col] = summarize([]measurement{run.Result})
	}
	return out
}

// writeRoundsMarkdown writes every ratio of the main table round by round
// ("-" for a round where it has no value: a failed run, or no added
// latency to compare with). It writes nothing, and returns false, when
// the run had fewer than two rounds.
func (r *report) writeRoundsMarkdown(w io.Writer) bool {
	var cols []roundRatio
	for _, c := range roundRatios {
		for _, k := range r.res.order {
			if r.applies(k, c) {
				cols = append(cols, c)
				break
			}
		}
	}
	header := []string{"workload", "mode", "clients"}
	for _, c := range cols {
		header = append(header, c.title+" by round")
	}
	var body [][]string
	most := 0
	for _, k := range r.res.order {
		wl := r.workload(k.Workload)
		rounds := r.byRound(k)
		most = max(most, len(rounds))
		row := []string{wl.Title, k.Mode, strconv.Itoa(k.Clients)}
		for _, c := range cols {
			cell := ""
			if r.applies(k, c) {
				vals := make([]string, len(rounds))
				for i := range rounds {
					vals[i] = fmtRatio(c.value(&rounds[i]))
				}
				cell = strings.Join(vals, " ")
			}
			row = append(row, cell)
		}
		body = append(body, row)
	}
	if most < 2 {
		return false
	}
	writeTable(w, header, body)
	return true
}
