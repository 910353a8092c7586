package testenv

import (
	"fmt"
	"os"
	"testing"
)

// EnvAllowSkip set to 1 lets a test that cannot run on this machine skip,
// saying why; otherwise it fails, saying why and what to do: a run that
// passes has run every test.
const EnvAllowSkip = "SNOWFLAKE_PROXY_TEST_ALLOW_SKIP"

// CannotRun ends a test that cannot run here: skipped when EnvAllowSkip
// is 1, failed otherwise.
func CannotRun(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(EnvAllowSkip) == "1" {
		tb.Skipf("cannot run here, skipped (%s=1): %s", EnvAllowSkip, msg)
	}
	tb.Fatalf("cannot run here: %s (set %s=1 to skip such tests instead)", msg, EnvAllowSkip)
}
