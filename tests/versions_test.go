package tests

import (
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// TestCoreTestsOnPostgres18: this package's core end-to-end tests
// (pgtest.CoreTests) pass against PostgreSQL 18 too, the newest major
// version, whatever version the machine's own binaries are: CI runs them
// through the README's test command.
func TestCoreTestsOnPostgres18(t *testing.T) {
	t.Parallel()
	pgtest.RerunOn(t, 18, pgtest.CoreRun(t, "./tests"))
}
