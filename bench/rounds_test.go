package main

import (
	"errors"
	"strings"
	"testing"
)

func TestRoundsTable(t *testing.T) {
	res := newResults()
	sel := groupKey{"select1", "prepared", 8}
	nv := groupKey{"nextval", "prepared", 8}
	for round, tps := range [][3]float64{{100, 200, 80}, {90, 200, 100}, {110, 200, 100}} {
		res.add(sel, colProxy, round, measurement{TPS: tps[0], LatMs: 0.3})
		res.add(sel, colDirect, round, measurement{TPS: tps[1], LatMs: 0.1})
		if round == 1 {
			res.add(sel, colPgBouncer, round, measurement{Err: errors.New("pgbench failed")})
		} else {
			res.add(sel, colPgBouncer, round, measurement{TPS: tps[2], LatMs: 0.2})
		}
		res.add(nv, colProxy, round, measurement{TPS: 150, LatMs: 0.1})
		res.add(nv, colDirect, round, measurement{TPS: 100, LatMs: 0.1})
	}
	var b strings.Builder
	if !newReport(res, workloads, true, false, false).writeRoundsMarkdown(&b) {
		t.Fatal("no table written")
	}
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("want header, separator and two rows:\n%s", out)
	}
	header := lines[0]
	for _, want := range []string{"proxy/direct by round", "proxy/pgbouncer by round", "added lat proxy/pgb by round"} {
		if !strings.Contains(header, want) {
			t.Errorf("header lacks %q: %s", want, header)
		}
	}
	// Neither row has the shim or the floor relay: no column for them.
	for _, absent := range []string{"proxy/shim", "floor/pgbouncer"} {
		if strings.Contains(header, absent) {
			t.Errorf("header has %q: %s", absent, header)
		}
	}
	cells := func(line string) []string {
		var out []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			out = append(out, strings.TrimSpace(c))
		}
		return out
	}
	// Round 2's PgBouncer run failed: its ratios are "-", not a ratio of
	// a zero.
	if got, want := cells(lines[2]), []string{"SELECT 1", "prepared", "8", "0.50x 0.45x 0.55x", "1.25x - 1.10x", "2.00x - 2.00x"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("SELECT 1 row:\n got %q\nwant %q", got, want)
	}
	// nextval has no PgBouncer column and is not pass-through.
	if got, want := cells(lines[3]), []string{"snowflake.nextval()", "prepared", "8", "1.50x 1.50x 1.50x", "", ""}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("nextval row:\n got %q\nwant %q", got, want)
	}

	one := newResults()
	one.add(sel, colProxy, 0, measurement{TPS: 1, LatMs: 1})
	one.add(sel, colDirect, 0, measurement{TPS: 1, LatMs: 1})
	if newReport(one, workloads, true, false, false).writeRoundsMarkdown(&strings.Builder{}) {
		t.Fatal("a rounds table was written for a single round")
	}
}
