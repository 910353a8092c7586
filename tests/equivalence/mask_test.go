package equivalence

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The pgEdge layout (docs/compatibility.md).
const (
	epochUnixMs = 1672531200000 // 2023-01-01 00:00:00 UTC
	countBits   = 12
	nodeBits    = 10
)

var (
	locationLine = regexp.MustCompile(`(?m)^LOCATION:  .*\n`)
	idPattern    = regexp.MustCompile(`\b\d{15,19}\b`)
	epochPattern = regexp.MustCompile(`\b\d{10}\.\d{1,6}\b`)
	fraction     = regexp.MustCompile(`(:\d\d)\.\d{1,6}`)
	dashLine     = regexp.MustCompile(`^-+(\+-+)*$`)
	rowsLine     = regexp.MustCompile(`^\(\d+ rows?\)$`)
	spaces       = regexp.MustCompile(` {2,}`)
)

// timestampStyles are the shapes of a timestamptz's text under each
// DateStyle (ISO, SQL, German, Postgres; MDY or DMY), without the zone,
// which is left in place: the masked text still shows the style and the
// zone, and only the generated date and time are hidden.
var timestampStyles = []struct {
	token   string
	re      *regexp.Regexp
	layouts []string // Go layouts for the text with its fraction removed
}{
	{"<ts:iso>", regexp.MustCompile(`\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d{1,6})?`),
		[]string{"2006-01-02 15:04:05", "2006-01-02T15:04:05"}},
	{"<ts:sql>", regexp.MustCompile(`\b\d\d/\d\d/\d{4} \d\d:\d\d:\d\d(\.\d{1,6})?`),
		[]string{"01/02/2006 15:04:05", "02/01/2006 15:04:05"}},
	{"<ts:german>", regexp.MustCompile(`\b\d\d\.\d\d\.\d{4} \d\d:\d\d:\d\d(\.\d{1,6})?`),
		[]string{"02.01.2006 15:04:05"}},
	{"<ts:postgres>", regexp.MustCompile(`\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) ((Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d\d|\d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)) \d\d:\d\d:\d\d(\.\d{1,6})? \d{4}`),
		[]string{"Mon Jan 02 15:04:05 2006", "Mon 02 Jan 15:04:05 2006"}},
}

// mask hides what differs from run to run and nothing else:
//   - snowflake IDs whose time falls in [from, to] become <id>; fixed IDs
//     written in a script (from another year) stay, so they are compared;
//   - Unix epochs with decimals (get_epoch) in [from, to] become <epoch>;
//   - timestamps in [from, to] (any zone) become <ts:STYLE>, zone kept;
//   - LOCATION lines of verbose errors (server source file and line) go;
//   - psql's table padding is collapsed, because the width of a column
//     depends on the masked values (a fraction .430 prints as .43).
func mask(out string, from, to time.Time) string {
	during := func(ts time.Time) bool { return !ts.Before(from) && !ts.After(to) }
	out = locationLine.ReplaceAllString(out, "")
	out = idPattern.ReplaceAllStringFunc(out, func(s string) string {
		id, err := strconv.ParseInt(s, 10, 64)
		if err == nil && id > 0 && during(time.UnixMilli(id>>(countBits+nodeBits)+epochUnixMs)) {
			return "<id>"
		}
		return s
	})
	out = epochPattern.ReplaceAllStringFunc(out, func(s string) string {
		f, err := strconv.ParseFloat(s, 64)
		if err == nil && during(time.UnixMilli(int64(f*1000))) {
			return "<epoch>"
		}
		return s
	})
	// A local time can be up to 14 hours away from UTC either way.
	localFrom, localTo := from.Add(-15*time.Hour), to.Add(15*time.Hour)
	for _, st := range timestampStyles {
		out = st.re.ReplaceAllStringFunc(out, func(s string) string {
			plain := fraction.ReplaceAllString(s, "$1")
			for _, layout := range st.layouts {
				ts, err := time.ParseInLocation(layout, plain, time.UTC)
				if err == nil && !ts.Before(localFrom) && !ts.After(localTo) {
					return st.token
				}
			}
			return s
		})
	}
	return normaliseTables(out)
}

// normaliseTables collapses the padding of psql's aligned tables: the
// header (the line above a dashed line), the dashed line and the rows down
// to "(N rows)" or an empty line (the end of a \d table; an empty value
// still prints its padding).
func normaliseTables(out string) string {
	lines := strings.Split(out, "\n")
	inTable := false
	for i := range lines {
		switch {
		case i+1 < len(lines) && dashLine.MatchString(lines[i+1]) && !inTable:
			inTable = true
			lines[i] = normaliseRow(lines[i])
		case inTable && dashLine.MatchString(lines[i]):
			lines[i] = "---"
		case inTable && (rowsLine.MatchString(lines[i]) || lines[i] == ""):
			inTable = false
		case inTable:
			lines[i] = normaliseRow(lines[i])
		}
	}
	return strings.Join(lines, "\n")
}

func normaliseRow(s string) string {
	return strings.TrimRight(spaces.ReplaceAllString(s, " "), " ")
}

// lineDiff shows the lines that differ between a and b with 3 lines of
// context, in unified style ("-" only in a, "+" only in b).
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	// lcs[i][j]: length of the longest common subsequence of x[i:], y[j:].
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		kind byte
		text string
	}
	var ops []op
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			ops = append(ops, op{' ', x[i]})
			i, j = i+1, j+1
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, op{'-', x[i]})
			i++
		default:
			ops = append(ops, op{'+', y[j]})
			j++
		}
	}
	const context = 3
	show := make([]bool, len(ops))
	for k, o := range ops {
		if o.kind != ' ' {
			for c := max(0, k-context); c <= min(len(ops)-1, k+context); c++ {
				show[c] = true
			}
		}
	}
	var sb strings.Builder
	for k, o := range ops {
		if !show[k] {
			continue
		}
		if k > 0 && !show[k-1] && sb.Len() > 0 {
			sb.WriteString("...\n")
		}
		fmt.Fprintf(&sb, "%c %s\n", o.kind, o.text)
	}
	if !slices.Contains(show, true) {
		return "(no line differs)"
	}
	return sb.String()
}
func composeID(ms int64, node, count int) int64 {
	return ms<<(countBits+nodeBits) | int64(node)<<countBits | int64(count)
}

func TestMaskHidesOnlyGeneratedValues(t *testing.T) {
	now := time.Date(2026, 11, 21, 6, 0, 1, 438_000_000, time.UTC)
	fresh := composeID(now.UnixMilli()-epochUnixMs, 1, 3)
	fixed := strconv.FormatInt(composeID(time.Date(2024, 1, 11, 18, 8, 59, 0, time.UTC).UnixMilli()-epochUnixMs, 1, 0), 10)
	freshEpoch := fmt.Sprintf("%d.438", now.Unix())
	in := strings.Join([]string{
		"SELECT 1;",
		"  id  | note",
		"------+------",
		fmt.Sprintf(" %d | a", fresh),
		" 1704996539845 | b",
		"(2 rows)",
		"",
		"epochs " + freshEpoch + " 1704996539.845",
		`{"id": 1, "ts": "2026-11-21 11:30:01.43+05:30", "count": 0} 2024-01-11 18:08:59.845+00`,
		"11/21/2026 06:00:01.438 UTC | 21.11.2026 06:00:01 UTC | Sat Nov 21 06:00:01.438 2026 UTC | Sat 21 Nov 06:00:01 2026 IST",
		"LOCATION:  exec_stmt_raise, pl_exec.c:3891",
		"ERROR:  42501: permission denied",
	}, "\n")
	want := strings.Join([]string{
		"SELECT 1;",
		" id | note",
		"---",
		" <id> | a",
		" 1704996539845 | b",
		"(2 rows)",
		"",
		"epochs <epoch> 1704996539.845",
		`{"id": 1, "ts": "<ts:iso>+05:30", "count": 0} 2024-01-11 18:08:59.845+00`,
		"<ts:sql> UTC | <ts:german> UTC | <ts:postgres> UTC | <ts:postgres> IST",
		"ERROR:  42501: permission denied",
	}, "\n")
	got := mask(in, now.Add(-time.Minute), now.Add(time.Hour))
	if got != want {
		t.Errorf("mask:\n%s", lineDiff(want, got))
	}
	if m := mask(fixed, now.Add(-time.Minute), now.Add(time.Hour)); m != fixed {
		t.Errorf("mask(%s) = %s: an ID from outside the run must stay", fixed, m)
	}
}

func TestLineDiff(t *testing.T) {
	got := lineDiff("a\nb\nc\nd", "a\nB\nc\nd")
	want := "  a\n- b\n+ B\n  c\n  d\n"
	if got != want {
		t.Errorf("lineDiff = %q, want %q", got, want)
	}
	if got := lineDiff("x", "x"); got != "(no line differs)" {
		t.Errorf("lineDiff of equal texts = %q", got)
	}
}
