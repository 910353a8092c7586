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
// "deadlock detected" (40P01) once in CI. The watch was making the new
// sequence's blocks: it held the lock's rows of snowflake._locks and
// waited to create a sequence in schema snowflake, which the DROP held
// while it waited for snowflake._locks. PostgreSQL aborts whichever
// transaction's deadlock_timeout runs out first, here the DROP's, which
// had waited longer.
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
		// run is the background statement on a database with the shim and
		// a sequence s (OID oid) that no lease has touched: both create a
		// sequence in schema snowflake after taking s's row of _locks.
		run func(ctx context.Context, url, db string, oid uint32) error
		// match finds its backend in pg_stat_activity.query.
		match string
	}{
		{"lease", func(ctx context.Context, url, db string, oid uint32) error {
			_, err := leaseStore(t, url).Lease(ctx, generator.Key{Database: db, Seq: oid, Node: 1}, 0, 1, 0)
			return err
		}, "%snowflake._lease(%"},
		{"blocks", func(ctx context.Context, url, _ string, _ uint32) error {
			c := connect(t, url)
			var made int64
			// Node 2: no blocks of it exist yet, so it makes some.
			return c.QueryRow(ctx, makeBlocksSQL, 2).Scan(&made)
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

			background := make(chan error, 1)
			go func() { background <- tc.run(ctxT(t), url, db, oid) }()
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
