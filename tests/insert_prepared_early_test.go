package tests

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Regression: a prepared INSERT parsed while the proxy's catalog watch of
// the database was not armed yet (the first sessions after the proxy
// starts) is sent with the server's default, and the session fences the
// generator after each execution (the shim may have issued). Once the
// watch armed, the next Bind prepared the statement again with the
// proxy's value as a parameter, but the record kept its "defaults may run
// in the shim" flag: every execution still fenced, so every INSERT waited
// for a lease round trip, for the life of the session. Measured: 7.3-9.4k
// INSERTs/s at 8 pgbench clients against 27-31k once the sessions
// reconnected; the server saw 7,590 lease calls for 36k INSERTs.
//
// The lease calls show on the server: each lease moves the high-water
// sequence snowflake._hw_<oid>_<node>, which a fenced INSERT does every
// time and an unfenced run of 20 INSERTs at most at a background renewal
// (one a second).
func TestPreparedInsertFromBeforeTheCatalogWatchStopsFencing(t *testing.T) {
	e := newInsertEnv(t, `CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), payload text)`)
	warm := e.connect(t, pgx.QueryExecModeSimpleProtocol)
	waitFastDefaults(t, warm, "orders") // the first lease has settled
	_ = warm.Close(context.Background())

	// With the shim's event triggers disabled the watch of a new proxy
	// stays unarmed: the statement below is prepared in that state.
	e.execDirect(t, `ALTER EVENT TRIGGER snowflake_ddl_notify DISABLE;
		ALTER EVENT TRIGGER snowflake_ddl_drop DISABLE`)
	if err := e.restartProxy(); err != nil {
		t.Fatal(err)
	}
	conn := e.connect(t, pgx.QueryExecModeCacheStatement)
	insert := func() int64 {
		t.Helper()
		var id int64
		if err := conn.QueryRow(context.Background(), "INSERT INTO orders (payload) VALUES ('early') RETURNING id").Scan(&id); err != nil {
			t.Fatalf("insert: %v", err)
		}
		return id
	}
	if n := shimCalls(t, conn, func() { insert() }); n == 0 {
		t.Fatalf("with the watch unarmed the server's default did not run")
	}

	e.execDirect(t, `ALTER EVENT TRIGGER snowflake_ddl_notify ENABLE;
		ALTER EVENT TRIGGER snowflake_ddl_drop ENABLE`)
	deadline := time.Now().Add(15 * time.Second)
	for shimCalls(t, conn, func() { insert() }) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the prepared INSERT still runs the shim's nextval 15s after the event triggers came back")
		}
		time.Sleep(50 * time.Millisecond)
	}

	direct := e.connectDirect(t)
	const hw = `SELECT pg_catalog.pg_sequence_last_value(c.oid) FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'snowflake' AND c.relname ~ '^_hw_[0-9]+_[0-9]+$'`
	last := mustInt64(t, direct, hw)
	moves := 0
	var ids []int64
	for i := 0; i < 20; i++ {
		ids = append(ids, insert())
		if h := mustInt64(t, direct, hw); h != last {
			moves++
			last = h
		}
	}
	checkIDs(t, "prepared INSERT ... RETURNING id", ids, insertNode)
	if moves > 5 {
		t.Errorf("20 INSERTs moved the lease high-water %d times: the statement still fences after each execution", moves)
	}
}
