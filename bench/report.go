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
	hasFloor     bool
	hasUring     bool // the io_uring floor relay
	footnotes    []string
	noteIndex    map[string]int
}

func newReport(res *results, wls []workload, hasPgBouncer, hasFloor, hasUring bool) *report {
	return &report{res: res, workloads: wls, hasPgBouncer: hasPgBouncer, hasFloor: hasFloor, hasUring: hasUring, noteIndex: map[string]int{}}
}

func (r *report) workload(name string) workload {
	for _, w := range r.workloads {
		if w.Name == name {
			return w
		}
	}
	return workload{Name: name, Title: name}
}

// columns in table order (without PgBouncer or the floor relay when they
// are unavailable).
func (r *report) columns() []column {
	cols := []column{colProxy, colDirect}
	if r.hasPgBouncer {
		cols = append(cols, colPgBouncer)
	}
	cols = append(cols, colShim)
	if r.hasFloor {
		cols = append(cols, colFloor)
	}
	if r.hasUring {
		cols = append(cols, colFloorUring)
	}
	return cols
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
	if r.hasFloor {
		h = append(h, "proxy/floor")
		if r.hasPgBouncer {
			h = append(h, "floor/pgbouncer")
		}
	}
	if r.hasUring {
		h = append(h, "proxy/floor-uring")
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
		if r.hasFloor {
			row = append(row, fmtRatio(ratio(s[colProxy], s[colFloor])))
			if r.hasPgBouncer {
				row = append(row, fmtRatio(ratio(s[colFloor], s[colPgBouncer])))
			}
		}
		if r.hasUring {
			row = append(row, fmtRatio(ratio(s[colProxy], s[colFloorUring])))
		}
		out = append(out, row)
	}
	return out
}

// writeMarkdown writes the table (padded so it also reads as plain text)
// and its footnotes.
func (r *report) writeMarkdown(w io.Writer) {
	r.footnotes, r.noteIndex = nil, map[string]int{}
	writeTable(w, r.header(), r.rows())
	if len(r.footnotes) > 0 {
		fmt.Fprintln(w)
		for i, f := range r.footnotes {
			fmt.Fprintf(w, "- [%d] %s\n", i+1, f)
		}
	}
}

// writeCPUMarkdown writes the CPU table (cpu.go): per row and target, the
// median µs of CPU per transaction of the server, the relay and pgbench,
// and their sum. It writes nothing when no run's CPU was read.
func (r *report) writeCPUMarkdown(w io.Writer) bool {
	return r.writePartsMarkdown(w, "%.1f", func(s summary) ([numCPUParts]float64, bool) {
		return [numCPUParts]float64{partServer: s.CPU.Server, partRelay: s.CPU.Relay, partClient: s.CPU.Client}, s.CPU.OK
	})
}

// writeSyscallsMarkdown and writeSwitchesMarkdown write the crossings
// tables (crossings.go) in the same shape: system calls and context
// switches per transaction.
func (r *report) writeSyscallsMarkdown(w io.Writer) bool {
	return r.writePartsMarkdown(w, "%.1f", func(s summary) ([numCPUParts]float64, bool) {
		return s.Cross.Syscalls, s.Cross.SyscallsOK
	})
}

func (r *report) writeSwitchesMarkdown(w io.Writer) bool {
	return r.writePartsMarkdown(w, "%.2f", func(s summary) ([numCPUParts]float64, bool) {
		return s.Cross.Switches, s.Cross.OK
	})
}

// writePartsMarkdown writes a table whose cells are per-part figures of
// each target: server + relay + client = sum, in format. It writes nothing
// when no cell has a figure.
func (r *report) writePartsMarkdown(w io.Writer, format string, get func(summary) ([numCPUParts]float64, bool)) bool {
	header := []string{"workload", "mode", "clients"}
	for _, c := range r.columns() {
		header = append(header, columnNames[c]+" server + relay + client")
	}
	cellFormat := format + " + " + format + " + " + format + " = " + format
	var body [][]string
	found := false
	for _, k := range r.res.order {
		row := []string{r.workload(k.Workload).Title, k.Mode, strconv.Itoa(k.Clients)}
		for _, c := range r.columns() {
			s := summarize(r.res.rows[k][c])
			cell := ""
			if v, ok := get(s); ok {
				cell = fmt.Sprintf(cellFormat, v[partServer], v[partRelay], v[partClient], v[partServer]+v[partRelay]+v[partClient])
				found = true
			} else if s.Present {
				cell = "-"
			}
			row = append(row, cell)
		}
		body = append(body, row)
	}
	if found {
		writeTable(w, header, body)
	}
	return found
}

// writeTable writes a Markdown table padded so that it also reads as plain
// text: text columns left-aligned, the rest right-aligned.
func writeTable(w io.Writer, header []string, body [][]string) {
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
}

// writeCSV writes the table with numbers split into their own columns.
func (r *report) writeCSV(out io.Writer) error {
	w := csv.NewWriter(out)
	h := []string{"workload", "mode", "clients"}
	for c := column(0); c < numColumns; c++ {
		n := strings.ReplaceAll(columnNames[c], "-", "_")
		h = append(h, n+"_tps", n+"_lat_ms", n+"_ok_runs", n+"_runs", n+"_error")
	}
	h = append(h, "proxy_over_direct", "proxy_over_pgbouncer", "proxy_over_shim", "added_lat_proxy_over_pgbouncer",
		"proxy_over_floor", "floor_over_pgbouncer", "proxy_over_floor_uring")
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
			num(ratio(s[colProxy], s[colShim])), num(added, ok && wl.PassThrough),
			num(ratio(s[colProxy], s[colFloor])), num(ratio(s[colFloor], s[colPgBouncer])),
			num(ratio(s[colProxy], s[colFloorUring])))
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
	if err := w.Write([]string{"workload", "mode", "clients", "target", "round", "tps", "lat_ms", "error",
		"server_cpu_us_per_tx", "relay_cpu_us_per_tx", "client_cpu_us_per_tx",
		"server_switches_per_tx", "relay_switches_per_tx", "client_switches_per_tx",
		"server_syscalls_per_tx", "relay_syscalls_per_tx", "client_syscalls_per_tx"}); err != nil {
		return err
	}
	for _, run := range r.res.runs {
		rec := []string{run.Key.Workload, run.Key.Mode, strconv.Itoa(run.Key.Clients), columnNames[run.Col], strconv.Itoa(run.Round + 1), "", "", "", "", "", "", "", "", "", "", "", ""}
		if run.Result.Err != nil {
			rec[7] = oneLine(run.Result.Err.Error())
		} else {
			rec[5] = strconv.FormatFloat(run.Result.TPS, 'f', 2, 64)
			rec[6] = strconv.FormatFloat(run.Result.LatMs, 'f', 3, 64)
		}
		if u := run.Result.CPU; u.OK {
			rec[8] = strconv.FormatFloat(u.Server, 'f', 2, 64)
			rec[9] = strconv.FormatFloat(u.Relay, 'f', 2, 64)
			rec[10] = strconv.FormatFloat(u.Client, 'f', 2, 64)
		}
		if x := run.Result.Cross; x.OK {
			for part, v := range x.Switches {
				rec[11+part] = strconv.FormatFloat(v, 'f', 3, 64)
			}
		}
		if x := run.Result.Cross; x.SyscallsOK {
			for part, v := range x.Syscalls {
				rec[14+part] = strconv.FormatFloat(v, 'f', 2, 64)
			}
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
