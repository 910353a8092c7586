package pgtest

import (
	"bytes"
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
// defaults, the hot standby, and the equivalence suite.
var CoreTests = []struct{ Package, Run string }{
	{"./tests", "^(TestPgx|TestDatabaseSQL|TestProtocol|TestPsqlScripts|TestUniqueness|TestInsertDefaults|TestStandby)"},
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
	failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: .*$`)
)

// RerunOn runs the tests of the current test binary that match run again,
// in a child process whose servers are PostgreSQL major (BinDir: skipped
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
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+run, "-test.count=1", "-test.v",
		"-test.timeout="+timeout.String())
	cmd.Env = append(os.Environ(), EnvBinDir+"="+bin)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start).Round(time.Second)
	passed := passLine.FindAllSubmatch(out, -1)
	if err != nil || len(passed) == 0 {
		fails := failLine.FindAll(out, -1)
		t.Fatalf("the tests matching %s against PostgreSQL %s (%s) failed after %s: %v; %d passed\nfailures:\n%s\nend of the output:\n%s",
			run, version, bin, took, err, len(passed), bytes.Join(fails, []byte("\n")), tail(out, 150))
	}
	names := make([]string, len(passed))
	for i, m := range passed {
		names[i] = string(m[1])
	}
	t.Logf("PostgreSQL %s: %d tests passed in %s: %s", version, len(names), took, strings.Join(names, " "))
}
