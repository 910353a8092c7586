package compat

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// TestBackgroundWorkYieldsToDDL: the proxy's own work on a database (a
// lease, the catalog watch making blocks) caught in a lock cycle with a
// user's DDL gives way, and the DDL succeeds. Regression: a DROP EXTENSION
// sent right after CREATE EXTENSION and a first nextval failed with
// "deadlock detected" (40P01) once in CI, while the catalog watch made the
// new extension's blocks and the first lease ran. Such a statement holds a
// row of snowflake._locks and then creates a sequence in schema snowflake,
// which the DROP holds while it waits for snowflake._locks. PostgreSQL
// aborts the transaction whose deadlock_timeout runs out first, the one
// that began to wait first: the DROP.
//
// The cycle is made every time: a third session holds snowflake._locks, so
// that the background statement waits there holding its first locks; the
// DROP then waits behind both; the third session lets go, the background
// statement takes the rows and waits for schema snowflake, which the DROP
// holds.
func TestBackgroundWorkYieldsToDDL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// prepare connects, on the test's goroutine, for the background
		// statement on a database with the shim and a sequence s (OID oid)
		// that no lease has touched, and returns the statement, which both
		// cases make create a sequence in schema snowflake after taking a
		// row of _locks.
		prepare func(t *testing.T, url, db string, oid uint32) func(context.Context) error
		// match finds its backend in pg_stat_activity.query.
		match string
	}{
		{"lease", func(t *testing.T, url, db string, oid uint32) func(context.Context) error {
			st := leaseStore(t, url)
			return func(ctx context.Context) error {
				_, err := st.Lease(ctx, generator.Key{Database: db, Seq: oid, Node: 1}, 0, 1, 0)
				return err
			}
		}, "%snowflake._lease(%"},
		{"blocks", func(t *testing.T, url, _ string, _ uint32) func(context.Context) error {
			c := connect(t, url)
			return func(ctx context.Context) error {
				var made int64
				// Node 2: no blocks of it exist yet, so it makes some.
				return c.QueryRow(ctx, makeBlocksSQL, 2).Scan(&made)
			}
		}, "%snowflake._blocks_all(%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, c, db, oid := shimDB(t)
			closeLockWindow(t, c)
			// The background statement waits at most half of this for each
			// lock: time enough for the steps below on a busy machine.
			mustExec(t, c, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" SET deadlock_timeout = '4s'")
			holder := connect(t, url)
			mustExec(t, holder, "BEGIN")
			mustExec(t, holder, "LOCK TABLE snowflake._locks IN EXCLUSIVE MODE")

			run, ctx := tc.prepare(t, url, db, oid), ctxT(t)
			background := make(chan error, 1)
			go func() { background <- run(ctx) }()
			waitFor(t, tc.name+" to wait for snowflake._locks", func() bool {
				select {
				case err := <-background:
					t.Fatalf("the proxy's %s ended before it waited: %v", tc.name, err)
				default:
				}
				return queryInt(t, c, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND query LIKE $1 AND wait_event_type = 'Lock'`, tc.match) == 1
			})

			ddl, drop := connect(t, url), extSQL(t, plan.DropExtension, nil)
			dropped := make(chan error, 1)
			go func() {
				_, err := ddl.Exec(context.Background(), drop)
				dropped <- err
			}()
			pid := int64(ddl.PgConn().PID())
			waitFor(t, "DROP EXTENSION to wait for a lock", func() bool {
				return queryInt(t, c, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", pid) == 1
			})
			select {
			case err := <-background:
				t.Fatalf("the proxy's %s ended before the cycle was made: %v", tc.name, err)
			default:
			}
			mustExec(t, holder, "ROLLBACK")

			select {
			case err := <-dropped:
				if err != nil {
					t.Fatalf("DROP EXTENSION while the proxy's %s waited: %v", tc.name, err)
				}
			case <-time.After(time.Minute):
				t.Fatal("DROP EXTENSION still waits after a minute")
			}
			var pe *pgconn.PgError
			if err := <-background; !errors.As(err, &pe) || pe.Code != "55P03" {
				t.Errorf("the proxy's %s caught in the DDL's lock cycle: %v, want lock_not_available (55P03)", tc.name, err)
			}
			if n := queryInt(t, c, "SELECT count(*) FROM pg_namespace WHERE nspname = 'snowflake'"); n != 0 {
				t.Errorf("schema snowflake still exists after DROP EXTENSION")
			}
		})
	}
}
