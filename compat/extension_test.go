package compat

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

func TestCreateExtension(t *testing.T) {
	c := connect(t, newDB(t))
	create := func(o *plan.ExtensionOptions) string { return extSQL(t, plan.CreateExtension, o) }

	// Inside a transaction that rolls back, nothing stays.
	mustExec(t, c, "BEGIN")
	mustExec(t, c, create(nil))
	mustExec(t, c, "ROLLBACK")
	if queryInt(t, c, "SELECT count(*) FROM pg_namespace WHERE nspname = 'snowflake'") != 0 {
		t.Fatal("schema survived a rollback")
	}

	wantErr(t, pgErr(t, c, create(&plan.ExtensionOptions{Version: "9.9"})),
		"22023", `extension "snowflake" has no installation script nor update path for version "9.9"`)
	wantErr(t, pgErr(t, c, create(&plan.ExtensionOptions{Schema: "public"})),
		"0A000", `extension "snowflake" must be installed in schema "snowflake"`)

	mustExec(t, c, create(&plan.ExtensionOptions{Schema: "snowflake", Version: DefaultVersion}))
	wantNotices(t, c)
	wantErr(t, pgErr(t, c, create(nil)), "42710", `extension "snowflake" already exists`)
	mustExec(t, c, create(&plan.ExtensionOptions{IfNotExists: true, Version: "9.9"}))
	// Regression (equivalence suite, lifecycle.sql): the notice carried
	// SQLSTATE 00000; PostgreSQL's carries 42710.
	if n := wantNotices(t, c, `extension "snowflake" already exists, skipping`); n[0].Code != "42710" {
		t.Fatalf("notice SQLSTATE %s, want 42710", n[0].Code)
	}

	var comment string
	if err := c.QueryRow(ctxT(t), "SELECT obj_description('snowflake'::regnamespace, 'pg_namespace')").Scan(&comment); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(comment, "snowflake-proxy shim") {
		t.Fatalf("schema comment %q", comment)
	}
	// Exact signatures of the API.
	for _, f := range []string{
		"snowflake.nextval(regclass)", "snowflake.currval(regclass)", "snowflake.get_epoch(bigint)",
		"snowflake.get_count(bigint)", "snowflake.get_node(bigint)", "snowflake.format(bigint)",
		"snowflake.convert_sequence_to_snowflake(regclass)", "snowflake.convert_column_to_int8(regclass,smallint)",
		"snowflake._currval(regclass,bigint)", "snowflake.set_config(text,text,boolean)",
	} {
		if queryInt(t, c, "SELECT count(*) FROM pg_proc WHERE oid = to_regprocedure($1)", f) != 1 {
			t.Fatalf("%s missing", f)
		}
	}
	var types string
	if err := c.QueryRow(ctxT(t), `SELECT string_agg(p.proname || ':' || p.prorettype::regtype::text, ',' ORDER BY p.proname)
		FROM pg_proc p WHERE p.pronamespace = 'snowflake'::regnamespace AND p.proname NOT LIKE '\_%'
		-- the proxy's stand-ins for set_config and current_setting of
		-- snowflake.node, named so that result columns keep their names
		AND p.proname NOT IN ('set_config', 'current_setting')`).Scan(&types); err != nil {
		t.Fatal(err)
	}
	want := "convert_column_to_int8:integer,convert_sequence_to_snowflake:integer,currval:bigint,format:jsonb,get_count:integer,get_epoch:numeric,get_node:integer,nextval:bigint"
	if types != want {
		t.Fatalf("return types %s\nwant %s", types, want)
	}
}

func TestDropExtension(t *testing.T) {
	c := connect(t, newDB(t))
	drop := func(o *plan.ExtensionOptions) string { return extSQL(t, plan.DropExtension, o) }

	wantErr(t, pgErr(t, c, drop(nil)), "42704", `extension "snowflake" does not exist`)
	mustExec(t, c, drop(&plan.ExtensionOptions{IfExists: true}))
	// PostgreSQL's DROP ... IF EXISTS notice has no code (00000), unlike
	// CREATE ... IF NOT EXISTS (42710).
	if n := wantNotices(t, c, `extension "snowflake" does not exist, skipping`); n[0].Code != "00000" {
		t.Fatalf("notice SQLSTATE %s, want 00000", n[0].Code)
	}

	// Plain install and drop: no notices at all.
	install(t, c)
	mustExec(t, c, "SET snowflake.node = 1")
	mustExec(t, c, "SELECT snowflake.nextval()")
	mustExec(t, c, drop(nil))
	wantNotices(t, c)
	if queryInt(t, c, "SELECT count(*) FROM pg_namespace WHERE nspname = 'snowflake'") != 0 {
		t.Fatal("schema left behind")
	}

	install(t, c)
	mustExec(t, c, "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), v text)")
	pe := pgErr(t, c, drop(nil))
	wantErr(t, pe, "2BP01", "cannot drop extension snowflake because other objects depend on it")
	if pe.Detail != "default value for column id of table t depends on function snowflake.nextval(regclass)" {
		t.Fatalf("detail %q", pe.Detail)
	}
	if pe.Hint != "Use DROP ... CASCADE to drop the dependent objects too." {
		t.Fatalf("hint %q", pe.Hint)
	}
	mustExec(t, c, drop(&plan.ExtensionOptions{Cascade: true}))
	wantNotices(t, c, "drop cascades to default value for column id of table t")
	if queryInt(t, c, "SELECT count(*) FROM pg_attrdef WHERE adrelid = 't'::regclass") != 0 {
		t.Fatal("default survived CASCADE")
	}

	// Two dependents: one NOTICE with a DETAIL line per object.
	install(t, c)
	mustExec(t, c, "CREATE TABLE t2 (id bigint DEFAULT snowflake.nextval())")
	mustExec(t, c, "CREATE VIEW v AS SELECT snowflake.format(1) AS f")
	pe = pgErr(t, c, drop(nil))
	if pe.Detail != "default value for column id of table t2 depends on function snowflake.nextval(regclass)\nview v depends on function snowflake.format(bigint)" {
		t.Fatalf("detail %q", pe.Detail)
	}
	mustExec(t, c, drop(&plan.ExtensionOptions{Cascade: true}))
	n := wantNotices(t, c, "drop cascades to 2 other objects")
	if n[0].Detail != "drop cascades to default value for column id of table t2\ndrop cascades to view v" {
		t.Fatalf("detail %q", n[0].Detail)
	}
	// client_min_messages is back to what it was.
	var cmm string
	if err := c.QueryRow(ctxT(t), "SHOW client_min_messages").Scan(&cmm); err != nil || cmm != "notice" {
		t.Fatalf("client_min_messages %q %v", cmm, err)
	}
}

func TestAlterExtension(t *testing.T) {
	c := connect(t, newDB(t))
	alter := func(o *plan.ExtensionOptions) string { return extSQL(t, plan.AlterExtension, o) }
	wantErr(t, pgErr(t, c, alter(nil)), "42704", `extension "snowflake" does not exist`)

	// The install makes id_seq's blocks for the session's node.
	mustExec(t, c, "SET snowflake.node = 2")
	install(t, c)
	id := queryInt(t, c, "SELECT snowflake.nextval()")
	mustExec(t, c, "CREATE TABLE t (id bigint DEFAULT snowflake.nextval())")
	mustExec(t, c, alter(nil))
	wantNotices(t, c, `version "2.6.0" of extension "snowflake" is already installed`)
	mustExec(t, c, alter(&plan.ExtensionOptions{Version: DefaultVersion}))
	wantNotices(t, c, `version "2.6.0" of extension "snowflake" is already installed`)
	wantErr(t, pgErr(t, c, alter(&plan.ExtensionOptions{Version: "3.0"})),
		"22023", `extension "snowflake" has no update path from version "2.6.0" to version "3.0"`)
	// State and dependents are kept. The sequence holds the top of the
	// block the ID came from (docs/state-model.md, "Blocks").
	if got := queryInt(t, c, "SELECT last_value FROM snowflake.id_seq"); got != id+1023 {
		t.Fatalf("id_seq last_value %d, want %d, the top of %d's block", got, id+1023, id)
	}
	if next := queryInt(t, c, "SELECT snowflake.nextval()"); next <= id {
		t.Fatalf("nextval after update %d <= %d", next, id)
	}
	mustExec(t, c, "INSERT INTO t DEFAULT VALUES")
}

func TestSQLTextQuoting(t *testing.T) {
	c := connect(t, newDB(t))
	for _, v := range []string{`it's`, `back\slash`, `$sfshim$`} {
		pe := pgErr(t, c, extSQL(t, plan.CreateExtension, &plan.ExtensionOptions{Version: v}))
		wantErr(t, pe, "22023", `extension "snowflake" has no installation script nor update path for version "`+v+`"`)
	}
}

// A schema snowflake that existed before CREATE EXTENSION is the user's:
// DROP EXTENSION removes only the shim's objects from it.
func TestPreexistingSchema(t *testing.T) {
	c := connect(t, newDB(t))
	mustExec(t, c, "CREATE SCHEMA snowflake")
	mustExec(t, c, "CREATE TABLE snowflake.keep (x int)")
	install(t, c)
	mustExec(t, c, "SET snowflake.node = 1")
	queryInt(t, c, "SELECT snowflake.nextval()")
	mustExec(t, c, extSQL(t, plan.DropExtension, nil))
	wantNotices(t, c)
	if queryInt(t, c, "SELECT count(*) FROM pg_class WHERE relnamespace = 'snowflake'::regnamespace") != 1 {
		t.Fatal("want only snowflake.keep left")
	}
	if queryInt(t, c, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'snowflake'::regnamespace") != 0 {
		t.Fatal("shim functions left")
	}
	// Installed again, it is reported as installed.
	install(t, c)
	wantErr(t, pgErr(t, c, extSQL(t, plan.CreateExtension, nil)), "42710", `extension "snowflake" already exists`)
}

// Default privileges of the installer do not reach the shim's own
// objects: with ALTER DEFAULT PRIVILEGES giving another role everything
// on the installer's new tables, sequences and functions (common, for an
// application role), that role got UPDATE on the lock's table, the narrow
// store, the block sequences and every H, and EXECUTE on the proxies'
// functions, so it could stop others' calls, date IDs ahead or repeat
// them (regression). The block sequences keep PUBLIC's USAGE and SELECT,
// the per-row path's.
func TestShimObjectsIgnoreDefaultPrivileges(t *testing.T) {
	t.Parallel()
	url := newDB(t)
	c := connect(t, url)
	role, _ := testRole(t, c, url, "defpriv")
	mustExec(t, c, "ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO "+role)
	mustExec(t, c, "ALTER DEFAULT PRIVILEGES GRANT ALL ON SEQUENCES TO "+role)
	mustExec(t, c, "ALTER DEFAULT PRIVILEGES GRANT ALL ON FUNCTIONS TO "+role)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.Exec(ctx, "ALTER DEFAULT PRIVILEGES REVOKE ALL ON TABLES FROM "+role)
		_, _ = c.Exec(ctx, "ALTER DEFAULT PRIVILEGES REVOKE ALL ON SEQUENCES FROM "+role)
		_, _ = c.Exec(ctx, "ALTER DEFAULT PRIVILEGES REVOKE ALL ON FUNCTIONS FROM "+role)
	})
	install(t, c)
	mustExec(t, c, "CREATE SEQUENCE s")
	mustExec(t, c, "SELECT snowflake._blocks('s', 3)")
	mustExec(t, c, "SELECT * FROM snowflake._lease('s', 3, 0, 0, 0)")
	check := func(when string) {
		t.Helper()
		rows, err := c.Query(ctxT(t), `SELECT c.relname, coalesce(c.relacl::text, '')
			FROM pg_class c WHERE c.relnamespace = 'snowflake'::regnamespace AND c.relkind IN ('r', 'S')
			  AND c.relname NOT IN ('id_seq', '_claims')
			  AND has_table_privilege($1, c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE') ORDER BY 1`, role)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var name, acl string
			if err := rows.Scan(&name, &acl); err != nil {
				t.Fatal(err)
			}
			// PUBLIC's SELECT on the block starts is the per-row path's.
			if strings.HasPrefix(name, "_blkd_") && acl != "" && !strings.Contains(acl, role) {
				continue
			}
			t.Errorf("%s: %s holds privileges on snowflake.%s (%s)", when, role, name, acl)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n := queryInt(t, c, `SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'snowflake'::regnamespace
			AND ((c.relname LIKE '\_blk\_%' AND NOT has_sequence_privilege('public', c.oid, 'USAGE'))
			  OR (c.relname LIKE '\_blkd\_%' AND NOT has_sequence_privilege('public', c.oid, 'SELECT')))`); n != 0 {
			t.Errorf("%s: %d block sequences without PUBLIC's privilege", when, n)
		}
	}
	check("after the install")
	for fn, want := range map[string]bool{
		"snowflake._lease(regclass, integer, bigint, bigint, bigint)": false,
		"snowflake._release(regclass, integer, bigint, bigint)":       false,
		"snowflake._blocks(regclass, integer)":                        false,
		"snowflake.nextval(regclass)":                                 true,
	} {
		if got := queryInt(t, c, "SELECT has_function_privilege($1, $2, 'EXECUTE')::int", role, fn) == 1; got != want {
			t.Errorf("%s may execute %s: %v, want %v", role, fn, got, want)
		}
	}
	// An update takes back what earlier shims let the defaults give.
	mustExec(t, c, "GRANT ALL ON ALL SEQUENCES IN SCHEMA snowflake TO "+role)
	mustExec(t, c, "GRANT ALL ON ALL TABLES IN SCHEMA snowflake TO "+role)
	mustExec(t, c, extSQL(t, plan.AlterExtension, nil))
	check("after an update")
}
