package tests

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// Regression: with no node set anywhere, SHOW snowflake.node and
// current_setting('snowflake.node') failed ("unrecognized configuration
// parameter") where the extension, which declares the setting, reports 0.
func TestShowNodeWhenUnset(t *testing.T) {
	e := newEnv(t, 0)
	e.installExtension(t)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		for _, c := range []struct{ set, want string }{{"", "0"}, {"SET snowflake.node = 4", "4"}, {"RESET snowflake.node", "0"}} {
			if c.set != "" {
				mustRun(t, conn, c.set)
			}
			if got := mustString(t, conn, "SHOW snowflake.node"); got != c.want {
				t.Fatalf("after %q: SHOW snowflake.node = %q, want %q", c.set, got, c.want)
			}
			if got := mustString(t, conn, "SELECT current_setting('snowflake.node')"); got != c.want {
				t.Fatalf("after %q: current_setting = %q, want %q", c.set, got, c.want)
			}
		}
	})
}
