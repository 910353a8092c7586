package tests

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Regression: errors and notices of the shim carried PL/pgSQL CONTEXT
// lines (the shim's functions, the proxy's DO blocks) that the C
// extension does not send. Through the proxy a client reads the fields of
// the extension's ErrorResponse: no CONTEXT for a top-level call, its own
// frames for a call in its function.
func TestShimErrorsWithoutContext(t *testing.T) {
	e := newEnv(t, 0) // no node anywhere: nextval fails in the shim
	e.installExtension(t)
	e.execDirect(t, "CREATE FUNCTION f() RETURNS bigint LANGUAGE plpgsql AS $$\nBEGIN\n    RETURN snowflake.nextval();\nEND$$")
	const fFrame = "PL/pgSQL function f() line 3 at RETURN"

	cases := []struct {
		sql, code, msg, where string
	}{
		{"SELECT snowflake.nextval()", "F0000", "value for snowflake.node is not set", ""},
		{"SELECT f()", "F0000", "value for snowflake.node is not set", fFrame},
		{"SELECT snowflake.currval()", "55000", `currval of sequence "id_seq" is not yet defined in this session`, ""},
		{"SET snowflake.node = 1024", "22023", `1024 is outside the valid range for parameter "snowflake.node" (0 .. 1023)`, ""},
		{"SELECT set_config('snowflake.node', 'abc', false)", "22023", `invalid value for parameter "snowflake.node": "abc"`, ""},
		{"CREATE EXTENSION snowflake", "42710", `extension "snowflake" already exists`, ""},
		{"ALTER EXTENSION snowflake UPDATE TO '2.4'", "22023", `extension "snowflake" has no update path from version "2.6.0" to version "2.4"`, ""},
	}
	// The same statements on a direct connection (the shim without the
	// proxy) do carry the lines: what the proxy removes.
	direct := e.connectDirect(t)
	for _, c := range cases[:3] {
		_, err := run(context.Background(), direct, c.sql)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Where == c.where || !strings.Contains(pe.Where, "PL/pgSQL function snowflake.") {
			t.Fatalf("direct %s: want the shim's CONTEXT, got %v (CONTEXT %q)", c.sql, err, pe.Where)
		}
	}

	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		var notices []*pgconn.Notice
		conn := e.connectWith(t, mode, func(c *pgx.ConnConfig) {
			c.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n) }
		})
		for _, c := range cases {
			_, err := run(context.Background(), conn, c.sql)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) {
				t.Fatalf("%s: want an error, got %v", c.sql, err)
			}
			if pe.Severity != "ERROR" || pe.Code != c.code || pe.Message != c.msg || pe.Where != c.where {
				t.Fatalf("%s: got %s %s %q CONTEXT %q, want ERROR %s %q CONTEXT %q",
					c.sql, pe.Severity, pe.Code, pe.Message, pe.Where, c.code, c.msg, c.where)
			}
		}
		for _, sql := range []string{"CREATE EXTENSION IF NOT EXISTS snowflake", "ALTER EXTENSION snowflake UPDATE"} {
			notices = nil
			mustRun(t, conn, sql)
			if len(notices) != 1 || notices[0].Where != "" {
				t.Fatalf("%s: notices %+v, want one without CONTEXT", sql, notices)
			}
		}
	})
}
