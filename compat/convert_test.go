package compat

import (
	"testing"
)

func convert(t *testing.T, c *testConn, seq string) int64 {
	t.Helper()
	return queryInt(t, c, "SELECT snowflake.convert_sequence_to_snowflake($1::regclass)", seq)
}

func columnInfo(t *testing.T, c *testConn, table, col string) (typ, def string) {
	t.Helper()
	err := c.QueryRow(ctxT(t), `SELECT format_type(a.atttypid, a.atttypmod), coalesce(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1::regclass AND a.attname = $2`, table, col).Scan(&typ, &def)
	if err != nil {
		t.Fatal(err)
	}
	return typ, def
}

// afterConversion checks what every conversion must leave behind: pg_dump's
// setval works, and new rows get larger IDs. A new ID lies above the
// sequence's last_value unless it comes from the live per-row block, whose
// top last_value is until the clock passes the block (docs/state-model.md,
// "What a user sees"); the test's session uses node 2.
func afterConversion(t *testing.T, c *testConn, seq, table string) {
	t.Helper()
	lv := queryInt(t, c, "SELECT last_value FROM "+seq)
	if lv < 1<<22 {
		t.Fatalf("%s last_value %d is not a snowflake", seq, lv)
	}
	mustExec(t, c, "SELECT pg_catalog.setval($1::regclass, $2, true)", seq, lv)
	if table != "" {
		maxBefore := queryInt(t, c, "SELECT coalesce(max(id), 0) FROM "+table)
		id := queryInt(t, c, "INSERT INTO "+table+" DEFAULT VALUES RETURNING id")
		if id <= maxBefore {
			t.Fatalf("new id %d not above %d", id, maxBefore)
		}
		if id <= lv {
			// The live block [d, d + 1023] of node 2, R holding d.
			d := queryInt(t, c, "SELECT coalesce(pg_sequence_last_value(snowflake._blkd($1::regclass)), 0)", seq)
			if d == 0 || id <= d || lv != d+1023 {
				t.Fatalf("new id %d not above last_value %d nor in the live block at %d", id, lv, d)
			}
		}
	}
}

func TestConvertSequence(t *testing.T) {
	c := connect(t, newDB(t))
	install(t, c)
	mustExec(t, c, "SET snowflake.node = 2")

	// serial: 1 change (the type).
	mustExec(t, c, "CREATE TABLE ts (id serial PRIMARY KEY, v text)")
	mustExec(t, c, "INSERT INTO ts (v) VALUES ('a'), ('b')")
	c.takeNotices()
	if n := convert(t, c, "ts_id_seq"); n != 1 {
		t.Fatalf("serial: %d", n)
	}
	wantNotices(t, c,
		"EXECUTE ALTER TABLE public.ts ALTER COLUMN id SET DATA TYPE int8",
		"EXECUTE ALTER TABLE public.ts ALTER COLUMN id SET DEFAULT snowflake.nextval('public.ts_id_seq'::regclass)",
		"ALTER SEQUENCE public.ts_id_seq AS bigint NO CYCLE MAXVALUE 9223372036854775807")
	if typ, def := columnInfo(t, c, "ts", "id"); typ != "bigint" || def != "snowflake.nextval('ts_id_seq'::regclass)" {
		t.Fatalf("serial column: %s %s", typ, def)
	}
	afterConversion(t, c, "ts_id_seq", "ts")

	// bigserial: 0.
	mustExec(t, c, "CREATE TABLE tb (id bigserial PRIMARY KEY)")
	if n := convert(t, c, "tb_id_seq"); n != 0 {
		t.Fatalf("bigserial: %d", n)
	}
	wantNotices(t, c,
		"EXECUTE ALTER TABLE public.tb ALTER COLUMN id SET DEFAULT snowflake.nextval('public.tb_id_seq'::regclass)",
		"ALTER SEQUENCE public.tb_id_seq AS bigint NO CYCLE MAXVALUE 9223372036854775807")
	afterConversion(t, c, "tb_id_seq", "tb")

	// identity ALWAYS and BY DEFAULT.
	for _, kind := range []string{"ALWAYS", "BY DEFAULT"} {
		mustExec(t, c, "DROP TABLE IF EXISTS ti")
		mustExec(t, c, "CREATE TABLE ti (id int GENERATED "+kind+" AS IDENTITY PRIMARY KEY, v text)")
		mustExec(t, c, "INSERT INTO ti (v) VALUES ('x')")
		c.takeNotices()
		if n := convert(t, c, "ti_id_seq"); n != 1 {
			t.Fatalf("identity %s: %d", kind, n)
		}
		wantNotices(t, c,
			"Update pg_attribute: reset attidentity value for table public.ti, column id",
			"EXECUTE ALTER TABLE public.ti ALTER COLUMN id SET DATA TYPE int8",
			"EXECUTE ALTER TABLE public.ti ALTER COLUMN id SET DEFAULT snowflake.nextval('public.ti_id_seq'::regclass)",
			"ALTER SEQUENCE public.ti_id_seq AS bigint NO CYCLE MAXVALUE 9223372036854775807")
		afterConversion(t, c, "ti_id_seq", "ti")
		mustExec(t, c, "INSERT INTO ti (id, v) VALUES (-1, 'an explicit id is allowed now')")
	}

	// A plain sequence behind an explicit default, shared by two tables
	// with integer columns: 2 per column.
	mustExec(t, c, "CREATE SEQUENCE shared")
	mustExec(t, c, "CREATE TABLE p1 (id integer DEFAULT nextval('shared'::regclass))")
	mustExec(t, c, "CREATE TABLE p2 (id integer DEFAULT nextval('public.shared'::regclass))")
	mustExec(t, c, "INSERT INTO p1 DEFAULT VALUES")
	c.takeNotices()
	if n := convert(t, c, "shared"); n != 4 {
		t.Fatalf("shared: %d", n)
	}
	wantNotices(t, c,
		"EXECUTE ALTER TABLE public.p1 ALTER COLUMN id SET DATA TYPE int8",
		"EXECUTE ALTER TABLE public.p1 ALTER COLUMN id SET DEFAULT snowflake.nextval('public.shared'::regclass)",
		"EXECUTE ALTER TABLE public.p2 ALTER COLUMN id SET DATA TYPE int8",
		"EXECUTE ALTER TABLE public.p2 ALTER COLUMN id SET DEFAULT snowflake.nextval('public.shared'::regclass)",
		"ALTER SEQUENCE public.shared AS bigint NO CYCLE MAXVALUE 9223372036854775807")
	afterConversion(t, c, "shared", "p1")
	afterConversion(t, c, "shared", "p2")

	// One integer column: 2.
	mustExec(t, c, "CREATE SEQUENCE one")
	mustExec(t, c, "CREATE TABLE o (id integer DEFAULT nextval('one'::regclass))")
	if n := convert(t, c, "one"); n != 2 {
		t.Fatalf("one column: %d", n)
	}
	c.takeNotices()

	// A plain unused sequence: 0, but it becomes a snowflake sequence.
	mustExec(t, c, "CREATE SEQUENCE unused AS integer")
	if n := convert(t, c, "unused"); n != 0 {
		t.Fatalf("unused: %d", n)
	}
	wantNotices(t, c, "ALTER SEQUENCE public.unused AS bigint NO CYCLE MAXVALUE 9223372036854775807")
	afterConversion(t, c, "unused", "")

	// Not a sequence.
	mustExec(t, c, "CREATE TABLE plain (x int)")
	pe := pgErr(t, c, "SELECT snowflake.convert_sequence_to_snowflake('plain')")
	wantErr(t, pe, "P0001", `Input value "public.plain" is not a valid convertable sequence`)

	// An owned sequence whose column default is something else.
	mustExec(t, c, "CREATE TABLE odd (id serial)")
	mustExec(t, c, "ALTER TABLE odd ALTER COLUMN id SET DEFAULT 42")
	wantErr(t, pgErr(t, c, "SELECT snowflake.convert_sequence_to_snowflake('odd_id_seq')"), "P0001",
		`definition of DEFAULT value for column "id" of relation "odd" does not correspond serial or bigserial type: "42"`)
	mustExec(t, c, "ALTER TABLE odd ALTER COLUMN id DROP DEFAULT")
	wantErr(t, pgErr(t, c, "SELECT snowflake.convert_sequence_to_snowflake('odd_id_seq')"), "P0001",
		`definition of DEFAULT value for column "id" of relation "odd" does not correspond serial or bigserial type: "<NULL>"`)
}

func TestConvertColumnToInt8(t *testing.T) {
	c := connect(t, newDB(t))
	install(t, c)
	mustExec(t, c, "CREATE TABLE parent (id integer PRIMARY KEY)")
	mustExec(t, c, "CREATE TABLE child (pid integer REFERENCES parent (id))")
	mustExec(t, c, "CREATE TABLE grandchild (cid integer, pid integer REFERENCES parent (id))")
	c.takeNotices()
	if n := queryInt(t, c, "SELECT snowflake.convert_column_to_int8('parent', 1::smallint)"); n != 3 {
		t.Fatalf("altered %d", n)
	}
	wantNotices(t, c,
		"EXECUTE ALTER TABLE public.parent ALTER COLUMN id SET DATA TYPE int8",
		"EXECUTE ALTER TABLE public.child ALTER COLUMN pid SET DATA TYPE int8",
		"EXECUTE ALTER TABLE public.grandchild ALTER COLUMN pid SET DATA TYPE int8")
	if n := queryInt(t, c, "SELECT snowflake.convert_column_to_int8('parent', 1::smallint)"); n != 0 {
		t.Fatalf("second run altered %d", n)
	}
	wantNotices(t, c)
}
