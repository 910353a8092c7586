package testenv

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test ended; like the real
// one, Skipf and Fatalf end the goroutine.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, a ...any) {
	r.skipped = fmt.Sprintf(format, a...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, a ...any) {
	r.failed = fmt.Sprintf(format, a...)
	runtime.Goexit()
}

func TestCannotRun(t *testing.T) {
	for _, c := range []struct {
		env      string
		skip     bool
		contains string
	}{
		{"", false, "psql is missing (set " + EnvAllowSkip + "=1"},
		{"0", false, "psql is missing (set " + EnvAllowSkip + "=1"},
		{"1", true, "skipped (" + EnvAllowSkip + "=1): psql is missing"},
	} {
		t.Setenv(EnvAllowSkip, c.env)
		r := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			CannotRun(r, "%s is missing", "psql")
		}()
		<-done
		got := r.failed
		if c.skip {
			got = r.skipped
		}
		if (r.skipped != "") != c.skip || (r.failed != "") == c.skip || !strings.Contains(got, c.contains) {
			t.Errorf("%s=%q: skipped %q, failed %q; want skip %v with %q", EnvAllowSkip, c.env, r.skipped, r.failed, c.skip, c.contains)
		}
	}
}
