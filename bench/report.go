package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxCellErr is how much of an error message a table cell shows; the full
// text is in the footnotes below the table.
const maxCellErr = 40

// report turns results into the one table, its footnotes and its CSV.
type report struct {
	res          *results
	workloads    []workload
	hasPgBouncer bool
	footnotes    []string
	noteIndex    map[string]int
}

func newReport(res *results, wls []workload, hasPgBouncer bool) *report {
	return &report{res: res, workloads: wls, hasPgBouncer: hasPgBouncer, noteIndex: map[string]int{}}
}

func (r *report) workload(name string) workload {
	for _, w := range r.workloads {
		if w.Name == name {
			return w
		}
	}
	return workload{Name: name, Title: name}
}

// columns in table order (without PgBouncer when it is unavailable).
func (r *report) columns() []column {
	cols := []column{colProxy, colDirect}
	if r.hasPgBouncer {
		cols = append(cols, colPgBouncer)
	}
	return append(cols, colShim)
}

func (r *report) header() []string {
	h := []string{"workload", "mode", "clients"}
	for _, c := range r.columns() {
		h = append(h, columnNames[c]+" tps / ms")
	}
	h = append(h, "proxy/direct")
	if r.hasPgBouncer {
		h = append(h, "proxy/pgbouncer")
	}
	h = append(h, "proxy/shim")
	if r.hasPgBouncer {
		h = append(h, "added lat proxy/pgb")
	}
	return h
}

// footnote numbers an error message, reusing the number of an identical one.
func (r *report) footnote(where string, err error) int {
	msg := oneLine(err.Error())
	if n, ok := r.noteIndex[msg]; ok {
		return n
	}
	r.footnotes = append(r.footnotes, msg+" (first: "+where+")")
	n := len(r.footnotes)
	r.noteIndex[msg] = n
	return n
}

func (r *report) cell(k groupKey, c column, s summary) string {
	switch {
	case !s.Present:
		return ""
	case s.OK == 0:
		n := r.footnote(fmt.Sprintf("%s %s c=%d %s", k.Workload, k.Mode, k.Clients, columnNames[c]), s.Err)
		return fmt.Sprintf("ERR[%d] %s", n, strings.ReplaceAll(truncate(oneLine(s.Err.Error()), maxCellErr), "|", "/"))
	}
	out := fmt.Sprintf("%.0f / %.3f", s.TPS, s.LatMs)
	if s.OK < s.Runs {
		n := r.footnote(fmt.Sprintf("%s %s c=%d %s", k.Workload, k.Mode, k.Clients, columnNames[c]), s.Err)
		out += fmt.Sprintf(" (%d/%d ok, [%d])", s.OK, s.Runs, n)
	}
	return out
}

// rows builds the table body.
func (r *report) rows() [][]string {
	var out [][]string
	for _, k := range r.res.order {
		w := r.workload(k.Workload)
		var s [numColumns]summary
		for c := column(0); c < numColumns; c++ {
			s[c] = summarize(r.res.rows[k][c])
		}
		row := []string{w.Title, k.Mode, strconv.Itoa(k.Clients)}
		for _, c := range r.columns() {
			row = append(row, r.cell(k, c, s[c]))
		}
		row = append(row, fmtRatio(ratio(s[colProxy], s[colDirect])))
		if r.hasPgBouncer {
			row = append(row, fmtRatio(ratio(s[colProxy], s[colPgBouncer])))
		}
		row = append(row, fmtRatio(ratio(s[colProxy], s[colShim])))
		if r.hasPgBouncer {
			if w.PassThrough {
				row = append(row, fmtRatio(addedLatencyRatio(s[colProxy], s[colDirect], s[colPgBouncer])))
			} else {
				row = append(row, "-")
			}
		}
		out = append(out, row)
	}
	return out
}

// writeMarkdown writes the table (padded so it also reads as plain text)
// and its footnotes.
func (r *report) writeMarkdown(w io.Writer) {
	r.footnotes, r.noteIndex = nil, map[string]int{}
	header, body := r.header(), r.rows()
	width := make([]int, len(header))
	for _, row := range append([][]string{header}, body...) {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range cells {
			pad := width[i] - utf8.RuneCountInString(c)
			if i >= 2 && c != "" && !strings.HasPrefix(c, "ERR") {
				fmt.Fprintf(&b, " %s%s |", strings.Repeat(" ", pad), c) // numbers right-aligned
			} else {
				fmt.Fprintf(&b, " %s%s |", c, strings.Repeat(" ", pad))
			}
		}
		fmt.Fprintln(w, b.String())
	}
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
		if i >= 2 {
			sep[i] = strings.Repeat("-", width[i]-1) + ":"
		}
	}
	line(sep)
	for _, row := range body {
		line(row)
	}
	if len(r.footnotes) > 0 {
		fmt.Fprintln(w)
		for i, f := range r.footnotes {
			fmt.Fprintf(w, "- [%d] %s\n", i+1, f)
		}
	}
}

// writeCSV writes the table with numbers split into their own columns.
func (r *report) writeCSV(out io.Writer) error {
	w := csv.NewWriter(out)
	h := []string{"workload", "mode", "clients"}
	for c := column(0); c < numColumns; c++ {
		n := strings.ReplaceAll(columnNames[c], "-", "_")
		h = append(h, n+"_tps", n+"_lat_ms", n+"_ok_runs", n+"_runs", n+"_error")
	}
	h = append(h, "proxy_over_direct", "proxy_over_pgbouncer", "proxy_over_shim", "added_lat_proxy_over_pgbouncer")
	if err := w.Write(h); err != nil {
		return err
	}
	num := func(x float64, ok bool) string {
		if !ok {
			return ""
		}
		return strconv.FormatFloat(x, 'f', 4, 64)
	}
	for _, k := range r.res.order {
		wl := r.workload(k.Workload)
		row := []string{wl.Name, k.Mode, strconv.Itoa(k.Clients)}
		var s [numColumns]summary
		for c := column(0); c < numColumns; c++ {
			s[c] = summarize(r.res.rows[k][c])
			errText := ""
			if s[c].Err != nil {
				errText = oneLine(s[c].Err.Error())
			}
			row = append(row, num(s[c].TPS, s[c].OK > 0), num(s[c].LatMs, s[c].OK > 0),
				strconv.Itoa(s[c].OK), strconv.Itoa(s[c].Runs), errText)
		}
		added, ok := addedLatencyRatio(s[colProxy], s[colDirect], s[colPgBouncer])
		row = append(row, num(ratio(s[colProxy], s[colDirect])), num(ratio(s[colProxy], s[colPgBouncer])),
			num(ratio(s[colProxy], s[colShim])), num(added, ok && wl.PassThrough))
		if err := w.Write(row); err != nil {
			return err
		}
	}
	w.Flush()
	return w.Error()
}

// writeRunsCSV writes every pgbench run.
func (r *report) writeRunsCSV(out io.Writer) error {
	w := csv.NewWriter(out)
	if err := w.Write([]string{"workload", "mode", "clients", "target", "round", "tps", "lat_ms", "error"}); err != nil {
		return err
	}
	for _, run := range r.res.runs {
		rec := []string{run.Key.Workload, run.Key.Mode, strconv.Itoa(run.Key.Clients), columnNames[run.Col], strconv.Itoa(run.Round + 1), "", "", ""}
		if run.Result.Err != nil {
			rec[7] = oneLine(run.Result.Err.Error())
		} else {
			rec[5] = strconv.FormatFloat(run.Result.TPS, 'f', 2, 64)
			rec[6] = strconv.FormatFloat(run.Result.LatMs, 'f', 3, 64)
		}
		if err := w.Write(rec); err != nil {
			return err
		}
	}
	w.Flush()
	return w.Error()
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
