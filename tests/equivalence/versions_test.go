package equivalence

import (
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// TestEquivalenceOnPostgres18: the equivalence suite passes against
// PostgreSQL 18 too, the newest major version, whatever version the
// machine's own binaries are: CI runs it through the README's test
// command.
func TestEquivalenceOnPostgres18(t *testing.T) {
	t.Parallel()
	pgtest.RerunOn(t, 18, pgtest.CoreRun(t, "./tests/equivalence"))
}
