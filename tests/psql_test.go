package tests

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// psql scripts in testdata/psql/NAME.sql run through a proxy (--node 7, fresh
// database) with `psql -X -a -v ON_ERROR_STOP=0`; the output, with values
// generated during the run masked, must equal testdata/psql/NAME.out.
// Regenerate after an intended change with
//
//	go test ./tests -run TestPsqlScripts -update
//
// and review the diff: the .out files are the contract (what psql shows with
// the real pgEdge extension), not a recording of whatever the proxy does.
var update = flag.Bool("update", false, "rewrite the golden .out files of the psql tests")

func TestPsqlScripts(t *testing.T) {
	psql := pgtest.Tool(t, "psql")
	scripts, err := filepath.Glob(filepath.Join("testdata", "psql", "*.sql"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts in testdata/psql (%v)", err)
	}
	for _, script := range scripts {
		name := strings.TrimSuffix(filepath.Base(script), ".sql")
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			e := newEnv(t, pgxNode)
			out := runPsqlScript(t, psql, e, script)
			masked := maskGenerated(out, start.Add(-time.Minute), time.Now().Add(time.Hour))
			golden := strings.TrimSuffix(script, ".sql") + ".out"
			if *update {
				if err := os.WriteFile(golden, []byte(masked), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if masked != string(want) {
				t.Errorf("psql output differs from %s (masked output below; -update rewrites the file)\n%s\n--- full masked output ---\n%s",
					golden, firstDifference(string(want), masked), masked)
			}
		})
	}
}

// runPsqlScript feeds script to psql on stdin (so that error lines read
// "psql:<stdin>:N:" whatever the path) and returns stdout and stderr
// interleaved as psql wrote them.
func runPsqlScript(t *testing.T, psql string, e *testEnv, script string) string {
	t.Helper()
	in, err := os.Open(script)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	host, port := splitHostPort(t, e.proxyAddr())
	cmd := exec.Command(psql, "-X", "-a", "-v", "ON_ERROR_STOP=0",
		"-h", host, "-p", port, "-U", "postgres", "-d", e.db)
	cmd.Stdin = in
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out // the same writer: one pipe, psql's own order
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C", "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=30"}
	if err := cmd.Run(); err != nil {
		t.Fatalf("psql: %v\n%s", err, out.String())
	}
	return out.String()
}

func splitHostPort(t *testing.T, addr string) (string, string) {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		t.Fatalf("bad address %q", addr)
	}
	return addr[:i], addr[i+1:]
}

var (
	idPattern        = regexp.MustCompile(`\b\d{15,19}\b`)
	epochPattern     = regexp.MustCompile(`\b\d{10}\.\d{3}\b`)
	timestampPattern = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,6})?([+-]\d\d(:\d\d)?)?`)
	locationLine     = regexp.MustCompile(`(?m)^LOCATION:  .*\n`)
)

// maskGenerated replaces the values generated during the run, and only
// those: snowflake IDs, epochs and timestamps that fall between from and to.
// Fixed values in the scripts (a known ID from 2024) stay as they are, so the
// golden files check them exactly. LOCATION lines of verbose errors name
// server source files and are dropped.
func maskGenerated(out string, from, to time.Time) string {
	during := func(ts time.Time) bool { return !ts.Before(from) && !ts.After(to) }
	out = locationLine.ReplaceAllString(out, "")
	out = idPattern.ReplaceAllStringFunc(out, func(s string) string {
		id, err := strconv.ParseInt(s, 10, 64)
		if err == nil && during(decodeID(id).Time()) {
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
	return timestampPattern.ReplaceAllStringFunc(out, func(s string) string {
		for _, layout := range []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00", "2006-01-02 15:04:05.999999"} {
			if ts, err := time.Parse(layout, s); err == nil && during(ts) {
				return "<timestamp>"
			}
		}
		return s
	})
}

// firstDifference describes the first line where got departs from want.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "first difference at line " + strconv.Itoa(i+1) + ":\n  want: " + strconv.Quote(wl) + "\n  got:  " + strconv.Quote(gl)
		}
	}
	return "no line differs"
}

func TestMaskGeneratedKeepsFixedValues(t *testing.T) {
	now := time.Now()
	fresh := composeID(now.UnixMilli()-snowflakeEpochUnixMs, 7, 3)
	in := strconv.FormatInt(fresh, 10) + " " + strconv.FormatInt(knownIDs[0], 10) + " " +
		expectedEpochText(fresh) + " 1704996539.845 " + pgTimestamptzText(now.UTC()) + " 2024-01-11 18:08:59.845+00\n" +
		"LOCATION:  nextval_internal, sequence.c:640\n"
	want := "<id> " + strconv.FormatInt(knownIDs[0], 10) + " <epoch> 1704996539.845 <timestamp> 2024-01-11 18:08:59.845+00\n"
	if got := maskGenerated(in, now.Add(-time.Minute), now.Add(time.Hour)); got != want {
		t.Errorf("maskGenerated:\n got  %q\n want %q", got, want)
	}
}
