package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// Errors and transactions through the proxy, per pgx query exec mode. The
// expected SQLSTATEs and messages are the extension's (docs/compatibility.md).

func TestPgxNodeUnsetWithoutProxyNode(t *testing.T) {
	e := newEnv(t, 0) // no --node, and the server has no snowflake.node either
	e.installExtension(t)
	e.execDirect(t, "CREATE SEQUENCE s; CREATE TABLE t (id bigint DEFAULT snowflake.nextval('s'), v int)")
	const msg = "value for snowflake.node is not set"
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		ctx := context.Background()
		for _, sql := range []string{
			"SELECT snowflake.nextval()",
			"SELECT snowflake.nextval('s')",
			"SELECT snowflake.nextval() FROM generate_series(1,3)",
			"INSERT INTO t (v) VALUES (1) RETURNING id",
		} {
			_, err := queryInt64s(ctx, conn, sql)
			wantError(t, sql, err, "F0000", msg)
		}
		_, err := queryInt64s(ctx, conn, "SELECT snowflake.nextval() + $1::int8 * 0", int64(1))
		wantError(t, "nextval() + $1::int8 * 0", err, "F0000", msg)

		// A superuser may set the node for the session.
		mustRun(t, conn, "SET snowflake.node = 3")
		checkIDs(t, "after SET snowflake.node = 3", mustInt64s(t, conn, "SELECT snowflake.nextval() FROM generate_series(1,2)"), 3)
		checkIDs(t, "after SET snowflake.node = 3", mustInt64s(t, conn, "SELECT snowflake.nextval('s')"), 3)
		mustRun(t, conn, "RESET snowflake.node")
		_, err = queryInt64s(ctx, conn, "SELECT snowflake.nextval()")
		wantError(t, "nextval() after RESET snowflake.node", err, "F0000", msg)
	})
}

func TestPgxNodeFromTheServerWhenTheProxyHasNone(t *testing.T) {
	e := newEnv(t, 0)
	e.installExtension(t)
	e.execDirect(t, fmt.Sprintf("ALTER DATABASE %s SET snowflake.node = 9", e.db))
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		ids := mustInt64s(t, conn, "SELECT snowflake.nextval()")
		ids = append(ids, mustInt64s(t, conn, "SELECT snowflake.nextval() FROM generate_series(1,2)")...)
		checkIDs(t, "nextval with ALTER DATABASE SET snowflake.node = 9", ids, 9)
	})
}

func TestPgxObjectErrors(t *testing.T) {
	e := newPgxEnv(t)
	e.execDirect(t, "CREATE TABLE notseq (a int); CREATE VIEW notseqview AS SELECT 1 AS a")
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		ctx := context.Background()
		_, err := queryInt64s(ctx, conn, "SELECT snowflake.nextval('notseq')")
		wantError(t, "nextval('notseq') on a table", err, "42809", `"notseq" is not a sequence`)
		_, err = queryInt64s(ctx, conn, "SELECT snowflake.nextval('notseqview'::regclass)")
		wantError(t, "nextval on a view", err, "42809", `"notseqview" is not a sequence`)
		_, err = queryInt64s(ctx, conn, "SELECT snowflake.nextval('notseq') FROM generate_series(1,2)")
		wantError(t, "per-row nextval('notseq')", err, "42809", `"notseq" is not a sequence`)
		_, err = queryInt64s(ctx, conn, "SELECT snowflake.nextval('no_such_seq')")
		wantError(t, "nextval of a missing relation", err, "42P01", `relation "no_such_seq" does not exist`)
		_, err = queryInt64s(ctx, conn, "SELECT snowflake.currval('notseq')")
		wantError(t, "currval('notseq') on a table", err, "42809", `"notseq" is not a sequence`)
		// The session is still usable after each error.
		checkIDs(t, "nextval after errors", mustInt64s(t, conn, "SELECT snowflake.nextval()"), pgxNode)
	})
}

func TestPgxPermissionDenied(t *testing.T) {
	e := newPgxEnv(t)
	role := "nouse_" + e.db
	pgtestExecCluster(t, e, fmt.Sprintf("CREATE ROLE %s LOGIN", role))
	t.Cleanup(func() {
		e.execDirect(t, "DROP OWNED BY "+role) // its grants in the test database
		pgtestExecCluster(t, e, "DROP ROLE IF EXISTS "+role)
	})
	e.execDirect(t, fmt.Sprintf(`CREATE SEQUENCE privseq;
		CREATE SEQUENCE granted_seq; GRANT USAGE ON SEQUENCE granted_seq TO %[1]s;
		CREATE TABLE privtab (id bigint DEFAULT snowflake.nextval('privseq'), v int);
		GRANT INSERT, SELECT ON privtab TO %[1]s;
		CREATE TABLE noinsert (id bigint DEFAULT snowflake.nextval('granted_seq'), v int)`, role))
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connectWith(t, mode, func(c *pgx.ConnConfig) { c.User = role })
		ctx := context.Background()
		const denied = "permission denied for sequence privseq"
		for _, sql := range []string{
			"SELECT snowflake.nextval('privseq')",
			"SELECT snowflake.nextval('privseq') FROM generate_series(1,2)",
			"INSERT INTO privtab (v) VALUES (1) RETURNING id",
			"INSERT INTO privtab (v) SELECT 1 RETURNING id",
		} {
			_, err := queryInt64s(ctx, conn, sql)
			wantError(t, sql+" without USAGE", err, "42501", denied)
		}
		_, err := queryInt64s(ctx, conn, "SELECT snowflake.nextval('privseq') + $1::int8 * 0", int64(0))
		wantError(t, "nextval('privseq') + $1 without USAGE", err, "42501", denied)
		_, err = queryInt64s(ctx, conn, "INSERT INTO noinsert (v) VALUES (1) RETURNING id")
		wantError(t, "INSERT without INSERT privilege", err, "42501", "permission denied for table noinsert")

		// What the role may use works: the extension's own sequence is
		// usable by PUBLIC, and a granted sequence.
		checkIDs(t, "nextval() as an unprivileged role", mustInt64s(t, conn, "SELECT snowflake.nextval()"), pgxNode)
		checkIDs(t, "nextval('granted_seq') with USAGE", mustInt64s(t, conn, "SELECT snowflake.nextval('granted_seq')"), pgxNode)
		checkIDs(t, "per-row nextval('granted_seq') with USAGE", mustInt64s(t, conn, "SELECT snowflake.nextval('granted_seq') FROM generate_series(1,3)"), pgxNode)

		// A non-superuser may not change the node (42501 as with the extension).
		_, err = run(ctx, conn, "SET snowflake.node = 5")
		wantError(t, "SET snowflake.node as a non-superuser", err, "42501", `permission denied to set parameter "snowflake.node"`)
	})
}

// A session whose role loses the membership that let it use a sequence is
// refused from then on, as with the extension, on explicit calls and
// INSERT defaults alike. REVOKE of a role fires no event trigger, and the
// session kept its cached "may use the sequence" and got fast-path IDs
// until DDL happened in the database (regression); the catalog watch now
// reads the roles' fingerprint and moves the epoch.
func TestPgxRevokedMembershipRefused(t *testing.T) {
	// A server of its own: a membership granted and revoked moves the
	// privilege epoch of every database of the server, and sessions of
	// other tests would drop their caches (and send an INSERT to the shim
	// where they assert the fast path).
	srv := pgtest.Start(t, pgserver.Options{})
	e := newEnvOn(t, srv, pgtest.NewDatabase(t, srv), pgxNode)
	e.installExtension(t)
	grp, mem := "grp_"+e.db, "mem_"+e.db
	pgtestExecCluster(t, e, fmt.Sprintf("CREATE ROLE %s NOLOGIN; CREATE ROLE %s LOGIN; GRANT %[1]s TO %[2]s", grp, mem))
	t.Cleanup(func() {
		e.execDirect(t, "DROP OWNED BY "+grp+", "+mem)
		pgtestExecCluster(t, e, "DROP ROLE IF EXISTS "+mem+"; DROP ROLE IF EXISTS "+grp)
	})
	e.execDirect(t, fmt.Sprintf(`CREATE SEQUENCE grpseq; GRANT USAGE ON SEQUENCE grpseq TO %[1]s;
		CREATE TABLE grptab (id bigint DEFAULT snowflake.nextval('grpseq'), v int);
		GRANT INSERT, SELECT ON grptab TO %[2]s`, grp, mem))
	asMember := func(c *pgx.ConnConfig) { c.User = mem }
	conn := e.connectWith(t, pgx.QueryExecModeSimpleProtocol, asMember)
	refused := e.connectWith(t, pgx.QueryExecModeSimpleProtocol, asMember)
	ctx := context.Background()
	for _, c := range []*pgx.Conn{conn, refused} {
		checkIDs(t, "nextval('grpseq') as a member", mustInt64s(t, c, "SELECT snowflake.nextval('grpseq')"), pgxNode)
		checkIDs(t, "INSERT as a member", mustInt64s(t, c, "INSERT INTO grptab (v) VALUES (1) RETURNING id"), pgxNode)
	}

	pgtestExecCluster(t, e, fmt.Sprintf("REVOKE %s FROM %s", grp, mem))
	const denied = "permission denied for sequence grpseq"

	// The server's shim sees the REVOKE at once; a session it refused
	// stops serving the sequence from its cache then, not at the catalog
	// watch's next reading (regression: the explicit call got an ID
	// after the per-row call was refused).
	_, err := queryInt64s(ctx, refused, "SELECT snowflake.nextval('grpseq') FROM generate_series(1,2)")
	wantError(t, "per-row nextval('grpseq') after the REVOKE", err, "42501", denied)
	_, err = queryInt64s(ctx, refused, "SELECT snowflake.nextval('grpseq')")
	wantError(t, "nextval('grpseq') after the server refused it", err, "42501", denied)

	// A session the server never refused learns it from the watch.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := queryInt64s(ctx, conn, "INSERT INTO grptab (v) VALUES (1) RETURNING id")
		if err != nil {
			wantError(t, "INSERT after the REVOKE", err, "42501", denied)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("INSERT defaults still filled 15 s after the membership was revoked")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
	_, err = queryInt64s(ctx, conn, "SELECT snowflake.nextval('grpseq')")
	wantError(t, "nextval('grpseq') after the REVOKE", err, "42501", denied)
}

// In a database whose shim a non-superuser installed there are no event
// triggers, so DDL made elsewhere is not announced; a REVOKE of USAGE on a
// sequence made on another connection was never seen by sessions that had
// used it: they got fast-path IDs for as long as they lived (regression).
// The catalog watch of such a database reads the sequences' privileges as
// it reads the roles, and sessions drop what they cached when they change.
func TestPgxRevokeSeenWithoutEventTriggers(t *testing.T) {
	e := newEnv(t, pgxNode)
	inst, user := "inst_"+e.db, "user_"+e.db
	pgtestExecCluster(t, e, fmt.Sprintf("CREATE ROLE %s LOGIN; CREATE ROLE %s LOGIN", inst, user))
	t.Cleanup(func() {
		e.execDirect(t, "DROP OWNED BY "+inst+", "+user+" CASCADE")
		pgtestExecCluster(t, e, "DROP ROLE IF EXISTS "+user+"; DROP ROLE IF EXISTS "+inst)
	})
	e.execDirect(t, fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s; GRANT CREATE ON SCHEMA public TO %[2]s", e.db, inst))
	ctx := context.Background()
	installer := e.connectWith(t, pgx.QueryExecModeSimpleProtocol, func(c *pgx.ConnConfig) { c.User = inst })
	for _, sql := range []string{
		"CREATE EXTENSION snowflake",
		"CREATE SEQUENCE useq",
		"GRANT USAGE ON SEQUENCE useq TO " + user,
	} {
		if _, err := installer.Exec(ctx, sql); err != nil {
			t.Fatalf("%s as %s: %v", sql, inst, err)
		}
	}
	if n := mustInt64(t, e.connectDirect(t), "SELECT count(*) FROM pg_event_trigger"); n != 0 {
		t.Fatalf("%d event triggers after a non-superuser's install, want 0", n)
	}
	conn := e.connectWith(t, pgx.QueryExecModeSimpleProtocol, func(c *pgx.ConnConfig) { c.User = user })
	if _, err := run(ctx, conn, "SET snowflake.node = 1"); err == nil {
		t.Fatal("a non-superuser set the node")
	}
	checkIDs(t, "nextval('useq') with USAGE", mustInt64s(t, conn, "SELECT snowflake.nextval('useq')"), pgxNode)

	if _, err := e.connectDirect(t).Exec(ctx, "SET ROLE "+inst+"; REVOKE USAGE ON SEQUENCE useq FROM "+user); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := queryInt64s(ctx, conn, "SELECT snowflake.nextval('useq')")
		if err != nil {
			wantError(t, "nextval('useq') after the REVOKE", err, "42501", "permission denied for sequence useq")
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nextval('useq') still served 15 s after USAGE was revoked")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
}

// pgtestExecCluster runs cluster-wide statements (roles) on the postgres
// database, straight on the server.
func pgtestExecCluster(t testing.TB, e *testEnv, sql string) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, e.srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestPgxReadOnlyTransactionRefusesNextval(t *testing.T) {
	e := newPgxEnv(t)
	e.execDirect(t, "CREATE SEQUENCE roseq")
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		ctx := context.Background()
		for _, sql := range []string{
			"SELECT snowflake.nextval()",
			"SELECT snowflake.nextval('roseq')",
			"SELECT snowflake.nextval() FROM generate_series(1,2)",
		} {
			mustRun(t, conn, "BEGIN READ ONLY")
			_, err := queryInt64s(ctx, conn, sql)
			wantError(t, sql+" in BEGIN READ ONLY", err, "25006", "read-only transaction")
			if st := conn.PgConn().TxStatus(); st != 'E' {
				t.Errorf("transaction status after the error = %c, want E", st)
			}
			mustRun(t, conn, "ROLLBACK")
		}
		mustRun(t, conn, "SET default_transaction_read_only = on")
		_, err := queryInt64s(ctx, conn, "SELECT snowflake.nextval()")
		wantError(t, "nextval() with default_transaction_read_only", err, "25006", "read-only transaction")
		mustRun(t, conn, "SET default_transaction_read_only = off")
		// Reading functions stay allowed in a read-only transaction.
		mustRun(t, conn, "BEGIN READ ONLY")
		if n := mustInt64(t, conn, "SELECT snowflake.get_node($1)::int8", knownIDs[0]); n != int64(decodeID(knownIDs[0]).Node) {
			t.Errorf("get_node in a read-only transaction = %d", n)
		}
		mustRun(t, conn, "COMMIT")
		checkIDs(t, "nextval after read-only transactions", mustInt64s(t, conn, "SELECT snowflake.nextval()"), pgxNode)
	})
}

func TestPgxFailedTransactionRefusesNextval(t *testing.T) {
	e := newPgxEnv(t)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		ctx := context.Background()
		mustRun(t, conn, "BEGIN")
		_, err := run(ctx, conn, "SELECT 1/0")
		wantError(t, "SELECT 1/0", err, "22012", "division by zero")
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{"SELECT snowflake.nextval()", nil},
			{"SELECT snowflake.currval()", nil},
			{"SELECT snowflake.nextval() + $1::int8 * 0", []any{int64(0)}},
		} {
			sql := q.sql
			_, err = queryInt64s(ctx, conn, sql, q.args...)
			wantError(t, sql+" in a failed transaction", err, "25P02", "current transaction is aborted, commands ignored until end of transaction block")
			if st := conn.PgConn().TxStatus(); st != 'E' {
				t.Errorf("%s: transaction status = %c, want E", sql, st)
			}
		}
		if tag := mustRun(t, conn, "ROLLBACK"); tag.String() != "ROLLBACK" {
			t.Errorf("ROLLBACK tag = %q", tag)
		}
		checkIDs(t, "nextval after ROLLBACK", mustInt64s(t, conn, "SELECT snowflake.nextval()"), pgxNode)

		// A savepoint rolled back restores a usable transaction.
		mustRun(t, conn, "BEGIN")
		a := mustInt64(t, conn, "SELECT snowflake.nextval()")
		mustRun(t, conn, "SAVEPOINT sp")
		_, err = run(ctx, conn, "SELECT 1/0")
		wantError(t, "SELECT 1/0 after a savepoint", err, "22012", "")
		_, err = queryInt64s(ctx, conn, "SELECT snowflake.nextval()")
		wantError(t, "nextval() after the error", err, "25P02", "")
		mustRun(t, conn, "ROLLBACK TO SAVEPOINT sp")
		b := mustInt64(t, conn, "SELECT snowflake.nextval()")
		mustRun(t, conn, "COMMIT")
		checkIDs(t, "nextval around a savepoint", []int64{a, b}, pgxNode)
	})
}

func TestPgxNextvalInsideTransactions(t *testing.T) {
	e := newPgxEnv(t)
	e.execDirect(t, "CREATE TABLE txrows (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), v int)")
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn := e.connect(t, mode)
		ctx := context.Background()

		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := mustInt64s(t, conn, "SELECT snowflake.nextval()")
		if st := conn.PgConn().TxStatus(); st != 'T' {
			t.Errorf("transaction status after nextval inside BEGIN = %c, want T", st)
		}
		ids = append(ids, mustInt64s(t, conn, "SELECT snowflake.nextval() + $1::int8 * 0", int64(3))...)
		ids = append(ids, mustInt64s(t, conn, "INSERT INTO txrows (v) VALUES (1) RETURNING id")...)
		ids = append(ids, mustInt64s(t, conn, "SELECT snowflake.nextval() FROM generate_series(1,3)")...)
		if cur := mustInt64(t, conn, "SELECT snowflake.currval()"); cur != ids[len(ids)-1] {
			t.Errorf("currval() inside the transaction = %d, want %d", cur, ids[len(ids)-1])
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if st := conn.PgConn().TxStatus(); st != 'I' {
			t.Errorf("transaction status after COMMIT = %c, want I", st)
		}

		// IDs are not given back by a rollback.
		tx, err = conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, mustInt64s(t, conn, "SELECT snowflake.nextval()")...)
		ids = append(ids, mustInt64s(t, conn, "INSERT INTO txrows (v) VALUES (2) RETURNING id")...)
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, mustInt64s(t, conn, "SELECT snowflake.nextval()")...)
		ids = append(ids, mustInt64s(t, conn, "INSERT INTO txrows (v) VALUES (3) RETURNING id")...)
		checkIDs(t, "IDs across a committed and a rolled-back transaction", ids, pgxNode)
		if cur := mustInt64(t, conn, "SELECT snowflake.currval()"); cur != ids[len(ids)-1] {
			t.Errorf("currval() after the rollback = %d, want %d", cur, ids[len(ids)-1])
		}
	})
}
