package main

import (
	"errors"
	"strings"
	"testing"
)

// pgbench 15 summary of a successful custom-script run.
const pgbenchOK = `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: /tmp/x/scripts/select1-direct.sql
scaling factor: 1
query mode: simple
number of clients: 8
number of threads: 2
maximum number of tries: 1
duration: 2 s
number of transactions actually processed: 112480
number of failed transactions: 0 (0.000%)
latency average = 0.142 ms
initial connection time = 6.127 ms
tps = 56239.748926 (without initial connection time)
`

func TestParsePgbench(t *testing.T) {
	m := parsePgbench(pgbenchOK)
	if m.Err != nil || m.TPS != 56239.748926 || m.LatMs != 0.142 {
		t.Fatalf("got %+v", m)
	}
	failed := strings.Replace(pgbenchOK, "failed transactions: 0 (0.000%)", "failed transactions: 3 (0.1%)", 1)
	if m := parsePgbench(failed); m.Err == nil {
		t.Fatalf("failed transactions not reported: %+v", m)
	}
	if m := parsePgbench("pgbench (15.18)\n"); m.Err == nil {
		t.Fatal("missing summary not reported")
	}
}

func TestPgbenchError(t *testing.T) {
	stderr := "pgbench: error: client 0 script 0 aborted in command 0 query 0: ERROR:  schema \"snowflake\" does not exist\nLINE 1: SELECT snowflake.nextval();\n"
	if got, want := pgbenchError(stderr), `ERROR: schema "snowflake" does not exist`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	conn := "pgbench: error: connection to server at \"127.0.0.1\", port 1 failed: Connection refused\n"
	if got := pgbenchError(conn); !strings.HasPrefix(got, "connection to server") {
		t.Fatalf("got %q", got)
	}
}

func TestSummarizeMedianAndRatios(t *testing.T) {
	s := summarize([]measurement{{TPS: 3, LatMs: 3}, {Err: errors.New("boom")}, {TPS: 1, LatMs: 1}, {TPS: 2, LatMs: 2}})
	if s.OK != 3 || s.Runs != 4 || s.TPS != 2 || s.LatMs != 2 || s.Err == nil {
		t.Fatalf("got %+v", s)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Fatalf("median = %v", got)
	}
	proxy, direct, pgb := summary{OK: 1, TPS: 40, LatMs: 0.15}, summary{OK: 1, TPS: 100, LatMs: 0.05}, summary{OK: 1, TPS: 50, LatMs: 0.15}
	if r, ok := ratio(proxy, pgb); !ok || r != 0.8 {
		t.Fatalf("ratio = %v %v", r, ok)
	}
	if r, ok := addedLatencyRatio(proxy, direct, pgb); !ok || r < 0.999 || r > 1.001 {
		t.Fatalf("added latency ratio = %v %v", r, ok)
	}
	if _, ok := ratio(proxy, summary{Present: true}); ok {
		t.Fatal("ratio with a failed cell")
	}
}

func TestHumanSetting(t *testing.T) {
	for _, c := range []struct{ v, u, want string }{
		{"32768", "8kB", "256MB"}, {"4096", "MB", "4GB"}, {"1800", "s", "1800s"}, {"off", "", "off"},
	} {
		if got := humanSetting(c.v, c.u); got != c.want {
			t.Errorf("humanSetting(%q, %q) = %q, want %q", c.v, c.u, got, c.want)
		}
	}
}
