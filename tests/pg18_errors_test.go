package tests

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// TestErrorsOnPostgres18AreTheExtensions: on PostgreSQL 18 the shim and the
// proxy give the extension's errors, through the proxy and on a direct
// connection, where the shim relied on core functions whose behaviour
// changed in 18. Regressions:
//   - nextval and currval of a table said PostgreSQL 18's "cannot open
//     relation" (pg_sequence_last_value) instead of the extension's
//     "is not a sequence";
//   - currval answered a role with neither SELECT nor USAGE on the
//     sequence (pg_sequence_last_value returns NULL without privileges in
//     18 instead of raising);
//   - after DROP EXTENSION, SELECT snowflake.nextval() through the proxy
//     said relation "snowflake.id_seq" does not exist (42P01) where the
//     server says schema "snowflake" does not exist (3F000): the proxy
//     sent the default argument as '...'::regclass, which 18 resolves
//     before the function.
func TestErrorsOnPostgres18AreTheExtensions(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t, pgserver.Options{BinDir: pgtest.BinDirAtLeast(t, 18)})
	e := newEnvOn(t, srv, pgtest.NewDatabase(t, srv), newerSyntaxNode)
	e.installExtension(t)
	role := "nopriv_" + e.db
	pgtestExecCluster(t, e, "CREATE ROLE "+role)
	t.Cleanup(func() { pgtestExecCluster(t, e, "DROP ROLE IF EXISTS "+role) })
	e.execDirect(t, "CREATE TABLE notseq (a int); CREATE SEQUENCE secret")

	direct := e.connectDirect(t)
	mustRun(t, direct, fmt.Sprintf("SET snowflake.node = %d", newerSyntaxNode))
	conns := map[string]*pgx.Conn{
		"simple protocol": e.connect(t, pgx.QueryExecModeSimpleProtocol),
		"cache statement": e.connect(t, pgx.QueryExecModeCacheStatement),
		"direct (shim)":   direct,
	}
	ctx := context.Background()
	for name, c := range conns {
		t.Run(name, func(t *testing.T) {
			for _, sql := range []string{
				"SELECT snowflake.nextval('notseq')",
				"SELECT snowflake.nextval('notseq') FROM generate_series(1, 2)",
				"SELECT snowflake.currval('notseq')",
			} {
				_, err := queryInt64s(ctx, c, sql)
				wantError(t, sql, err, "42809", `"notseq" is not a sequence`)
			}
			_, err := queryInt64s(ctx, c, "SELECT snowflake.nextval(0)")
			wantError(t, "nextval(0)", err, "XX000", "could not open relation with OID 0")

			mustInt64(t, c, "SELECT snowflake.nextval('secret')")
			mustRun(t, c, "SET ROLE "+role)
			_, err = queryInt64s(ctx, c, "SELECT snowflake.currval('secret')")
			wantError(t, "currval('secret') without SELECT or USAGE", err, "42501", "permission denied for sequence secret")
			mustRun(t, c, "RESET ROLE")
		})
	}

	c := conns["cache statement"]
	mustRun(t, c, "DROP EXTENSION snowflake")
	for name, c := range conns {
		for _, sql := range []string{"SELECT snowflake.nextval()", "SELECT snowflake.currval()"} {
			_, err := queryInt64s(ctx, c, sql)
			wantError(t, name+": "+sql+" without the extension", err, "3F000", `schema "snowflake" does not exist`)
		}
	}
}
