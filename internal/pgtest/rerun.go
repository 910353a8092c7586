package pgtest

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// CoreTests are the end-to-end tests that prove the proxy on a server
// version, by package (as `go test` names it, from the repository root) and
// -run pattern: the spine (pgx in every exec mode, database/sql, psql
// scripts, the wire protocol), uniqueness across a restart, INSERT
// defaults, the hot standby, every shape of sequence, and the equivalence
// suite.
var CoreTests = []struct{ Package, Run string }{
	{"./tests", "^(TestPgx|TestDatabaseSQL|TestProtocol|TestPsqlScripts|TestUniqueness|TestInsertDefaults|TestStandby|TestSequenceShapes)"},
	{"./tests/equivalence", "^TestEquivalence$"},
}

// CoreRun is CoreTests' pattern for pkg ("./tests"); it fails the test when
// there is none.
func CoreRun(tb testing.TB, pkg string) string {
	tb.Helper()
	for _, c := range CoreTests {
		if c.Package == pkg {
			return c.Run
		}
	}
	tb.Fatalf("pgtest: no core tests for package %s", pkg)
	return ""
}

var (
	passLine = regexp.MustCompile(`(?m)^--- PASS: (Test\S+)`)
	failLine = regexp.MustCompile(`(?m)^--- FAIL: (Test\S+)`)
)

// failures returns, for each top-level test that failed in out (go test
// -v output), its lines from "=== RUN" to "--- FAIL" (the last 200 of
// them), or the end of out when no test says it failed (a panic, a
// timeout).
func failures(out []byte) string {
	lines := strings.Split(string(out), "\n")
	var b strings.Builder
	for _, m := range failLine.FindAllSubmatch(out, -1) {
		name := string(m[1])
		from, to := -1, -1
		for i, l := range lines {
			if from < 0 && l == "=== RUN   "+name {
				from = i
			}
			if strings.HasPrefix(l, "--- FAIL: "+name+" ") {
				to = i
			}
		}
		if from < 0 || to < from {
			continue
		}
		if to-from > 200 {
			from = to - 200
		}
		b.WriteString(strings.Join(lines[from:to+1], "\n") + "\n")
	}
	if b.Len() == 0 {
		if len(lines) > 100 {
			lines = lines[len(lines)-100:]
		}
		return strings.Join(lines, "\n")
	}
	return b.String()
}

// RerunOn runs the tests of the current test binary that match run again,
// in short mode, in a child process whose servers are PostgreSQL major (BinDir: skipped
// only when it cannot be installed), and fails with the child's failures
// and the end of its output when it fails or runs no test. The child gets
// what is left of the test's own deadline, less a minute to report.
func RerunOn(t *testing.T, major int, run string) {
	t.Helper()
	bin := BinDir(t, major)
	version, got, err := Version(bin)
	if err != nil {
		t.Fatal(err)
	}
	if got != major {
		t.Fatalf("PostgreSQL %d wanted, %s has %s", major, bin, version)
	}
	timeout := 15 * time.Minute
	if d, ok := t.Deadline(); ok {
		timeout = time.Until(d) - time.Minute
	}
	if timeout < time.Minute {
		t.Fatalf("%s left before the test binary's deadline: too little to run the tests again", timeout+time.Minute)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	// -test.short: a re-run proves the behaviour on another version, not
	// volume, which the tests prove once on the machine's own version
	// (the uniqueness test draws a tenth of its IDs).
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+run, "-test.count=1", "-test.v", "-test.short",
		"-test.timeout="+timeout.String())
	cmd.Env = append(os.Environ(), EnvBinDir+"="+bin)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start).Round(time.Second)
	passed := passLine.FindAllSubmatch(out, -1)
	if err != nil || len(passed) == 0 {
		t.Fatalf("the tests matching %s against PostgreSQL %s (%s) failed after %s: %v; %d passed:\n%s",
			run, version, bin, took, err, len(passed), failures(out))
	}
	names := make([]string, len(passed))
	for i, m := range passed {
		names[i] = string(m[1])
	}
	t.Logf("PostgreSQL %s: %d tests passed in %s: %s", version, len(names), took, strings.Join(names, " "))
}
