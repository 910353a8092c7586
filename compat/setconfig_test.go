package compat

import "testing"

// Regression (equivalence suite, node_guard.sql): a non-superuser could
// change the node with set_config('snowflake.node', ...) although SET was
// refused. The proxy routes such calls to snowflake.set_config.
func TestSetConfigGuard(t *testing.T) {
	url := newDB(t)
	c := connect(t, url)
	install(t, c)
	if got := queryText(t, c, "SELECT snowflake.set_config('snowflake.node', ' 0012 ', false)"); got != "12" {
		t.Fatalf("superuser set_config returned %q, want 12", got)
	}
	if got := queryText(t, c, "SHOW snowflake.node"); got != "12" {
		t.Fatalf("SHOW snowflake.node = %q, want 12", got)
	}
	wantErr(t, pgErr(t, c, "SELECT snowflake.set_config('snowflake.node', 'abc', false)"),
		"22023", `invalid value for parameter "snowflake.node": "abc"`)
	wantErr(t, pgErr(t, c, "SELECT snowflake.set_config('snowflake.node', '1024', false)"),
		"22023", `1024 is outside the valid range for parameter "snowflake.node" (0 .. 1023)`)
	if got := queryText(t, c, "SELECT snowflake.set_config('application_name', 'x', false)"); got != "x" {
		t.Fatalf("other settings pass through: got %q", got)
	}

	mustExec(t, c, "CREATE ROLE setcfg_plain LOGIN")
	mustExec(t, c, "SET ROLE setcfg_plain")
	wantErr(t, pgErr(t, c, "SELECT snowflake.set_config('snowflake.node', '5', false)"),
		"42501", `permission denied to set parameter "snowflake.node"`)
	mustExec(t, c, "RESET ROLE")
	// GRANT SET ON PARAMETER came with PostgreSQL 15: before it only a
	// superuser sets the node, which the refusal above shows.
	if queryInt(t, c, "SELECT current_setting('server_version_num')::int") >= 150000 {
		mustExec(t, c, "GRANT SET ON PARAMETER snowflake.node TO setcfg_plain")
		mustExec(t, c, "SET ROLE setcfg_plain")
		if got := queryText(t, c, "SELECT snowflake.set_config('snowflake.node', '5', true)"); got != "5" {
			t.Fatalf("with GRANT SET ON PARAMETER: got %q, want 5", got)
		}
		mustExec(t, c, "RESET ROLE")
		mustExec(t, c, "REVOKE SET ON PARAMETER snowflake.node FROM setcfg_plain")
	}
	mustExec(t, c, "DROP ROLE setcfg_plain")
}

func queryText(t *testing.T, c *testConn, sql string) string {
	t.Helper()
	var s string
	if err := c.QueryRow(ctxT(t), sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}
