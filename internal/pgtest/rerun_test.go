package pgtest

import (
	"strings"
	"testing"
)

// TestFailuresQuotesTheFailedTests: a child's failure report holds the
// output of the tests that failed, not of those that passed; without a
// failed test (a panic) it is the end of the output.
func TestFailuresQuotesTheFailedTests(t *testing.T) {
	out := strings.Join([]string{
		"=== RUN   TestA",
		"    a_test.go:1: fine",
		"--- PASS: TestA (0.01s)",
		"=== RUN   TestB",
		"=== RUN   TestB/sub",
		"    b_test.go:2: broken",
		"--- FAIL: TestB (0.02s)",
		"    --- FAIL: TestB/sub (0.01s)",
		"FAIL",
	}, "\n")
	got := failures([]byte(out))
	if !strings.Contains(got, "b_test.go:2: broken") || !strings.Contains(got, "--- FAIL: TestB (") || strings.Contains(got, "fine") {
		t.Errorf("failures() =\n%s\nwant TestB's lines only", got)
	}
	panicked := "=== RUN   TestC\npanic: boom\nFAIL\n"
	if got := failures([]byte(panicked)); !strings.Contains(got, "panic: boom") {
		t.Errorf("failures() of a panic =\n%s\nwant the end of the output", got)
	}
}
