package compat

import (
	"strings"
	"testing"

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

	install(t, c)
	mustExec(t, c, "SET snowflake.node = 2")
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
