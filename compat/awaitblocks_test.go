package compat

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// Without event triggers (a non-superuser's install) AwaitBlocks returns
// once the watch has made the blocks of a default that DDL made just
// before: the session's next statement is planned with them. Its bound is
// raised here, so that a slow machine cannot end the wait first.
func TestAwaitBlocksMakesThemWithoutEventTriggers(t *testing.T) {
	t.Parallel()
	url := newDB(t)
	cfg, _ := pgx.ParseConfig(url)
	db := cfg.Database
	s := newService(t, url, 4, nil)
	c := connect(t, url)
	mustExec(t, c, strings.Replace(extSQL(t, plan.CreateExtension, nil), "IF v_super THEN", "IF false THEN", 1))
	for i, fresh := range []bool{true, false} {
		if !fresh {
			// A watch that runs already, waiting for its next check.
			waitChecks(t, s, db, watchChecks(s, db), 1)
		}
		seq := fmt.Sprintf("s_await%d", i)
		mustExec(t, c, "CREATE SEQUENCE "+seq)
		mustExec(t, c, fmt.Sprintf("CREATE TABLE t_await%d (id bigint DEFAULT snowflake.nextval('%s'), v int)", i, seq))
		s.awaitBlocks(db, time.Minute)
		if r := blockStart(t, c, seqOID(t, c, seq), 4); r == -1<<62 {
			t.Fatalf("no blocks of %s after AwaitBlocks (watch fresh: %v)", seq, fresh)
		}
	}
}
