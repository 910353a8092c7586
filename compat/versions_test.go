package compat

import (
	"fmt"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

func createVersion(t *testing.T, v string) string {
	t.Helper()
	return extSQL(t, plan.CreateExtension, &plan.ExtensionOptions{Version: v})
}

func updateTo(t *testing.T, v string) string {
	t.Helper()
	return extSQL(t, plan.AlterExtension, &plan.ExtensionOptions{Version: v})
}

func installedVersion(t *testing.T, c *testConn) string {
	t.Helper()
	return queryText(t, c, "SELECT snowflake._shim_version()")
}

// Every released version installs, reports itself and gives the API.
func TestCreateExtensionVersions(t *testing.T) {
	cases := []struct{ version, want string }{{"", DefaultVersion}}
	for _, v := range Versions() {
		cases = append(cases, struct{ version, want string }{v, v})
	}
	for _, tc := range cases {
		t.Run("version="+tc.version, func(t *testing.T) {
			t.Parallel()
			c := connect(t, newDB(t))
			mustExec(t, c, createVersion(t, tc.version))
			wantNotices(t, c)
			if got := installedVersion(t, c); got != tc.want {
				t.Fatalf("installed version %q, want %q", got, tc.want)
			}
			mustExec(t, c, "SET snowflake.node = 3")
			if node := queryInt(t, c, "SELECT snowflake.get_node(snowflake.nextval())"); node != 3 {
				t.Fatalf("node of a new ID %d, want 3", node)
			}
			wantErr(t, pgErr(t, c, createVersion(t, tc.version)), "42710", `extension "snowflake" already exists`)
		})
	}
}

// Versions the shim does not install get PostgreSQL's errors: its texts
// and SQLSTATE for a version without script or path, and for names no
// version may have (check_valid_version_name).
func TestCreateExtensionVersionRefused(t *testing.T) {
	c := connect(t, newDB(t))
	// 2.5 was never released (pgEdge went from 2.4 to 2.5.0); 1.0 to 2.0
	// have scripts in the extension but another API; 2.6.1 does not exist.
	for _, v := range []string{"9.9", "2.5", "1.0", "2.0", "2.1", "2.6.1", "2.4.0"} {
		wantErr(t, pgErr(t, c, createVersion(t, v)),
			"22023", `extension "snowflake" has no installation script nor update path for version "`+v+`"`)
	}
	for _, tc := range []struct{ version, detail string }{
		{"a--b", `Version names must not contain "--".`},
		{"-2.4", `Version names must not begin or end with "-".`},
		{"2.4-", `Version names must not begin or end with "-".`},
		{"2.4/x", "Version names must not contain directory separator characters."},
	} {
		pe := pgErr(t, c, createVersion(t, tc.version))
		wantErr(t, pe, "22023", `invalid extension version name: "`+tc.version+`"`)
		if pe.Detail != tc.detail {
			t.Fatalf("%s: detail %q, want %q", tc.version, pe.Detail, tc.detail)
		}
	}
	if n := queryInt(t, c, "SELECT count(*) FROM pg_namespace WHERE nspname = 'snowflake'"); n != 0 {
		t.Fatal("a refused CREATE EXTENSION left the schema")
	}
}

// ALTER EXTENSION snowflake UPDATE moves the recorded version forward
// only, with PostgreSQL's notice when it is already there and its error
// when no update script leads to the target.
func TestUpdateExtensionVersions(t *testing.T) {
	c := connect(t, newDB(t))
	mustExec(t, c, createVersion(t, "2.2"))
	mustExec(t, c, "SET snowflake.node = 4")
	id := queryInt(t, c, "SELECT snowflake.nextval()")

	mustExec(t, c, updateTo(t, "2.3"))
	wantNotices(t, c)
	if got := installedVersion(t, c); got != "2.3" {
		t.Fatalf("after UPDATE TO '2.3': %q", got)
	}
	mustExec(t, c, updateTo(t, "2.3"))
	wantNotices(t, c, `version "2.3" of extension "snowflake" is already installed`)
	for _, v := range []string{"2.2", "2.5", "9.9"} {
		wantErr(t, pgErr(t, c, updateTo(t, v)),
			"22023", `extension "snowflake" has no update path from version "2.3" to version "`+v+`"`)
	}
	pe := pgErr(t, c, updateTo(t, "x--y"))
	wantErr(t, pe, "22023", `invalid extension version name: "x--y"`)
	if pe.Detail != `Version names must not contain "--".` {
		t.Fatalf("detail %q", pe.Detail)
	}

	// Without TO: the default version, over several steps at once.
	mustExec(t, c, updateTo(t, ""))
	wantNotices(t, c)
	if got := installedVersion(t, c); got != DefaultVersion {
		t.Fatalf("after UPDATE: %q, want %q", got, DefaultVersion)
	}
	mustExec(t, c, updateTo(t, ""))
	wantNotices(t, c, `version "`+DefaultVersion+`" of extension "snowflake" is already installed`)
	// The legacy spelling lies before 2.6.0: no way back to it.
	wantErr(t, pgErr(t, c, updateTo(t, "2.6")),
		"22023", `extension "snowflake" has no update path from version "2.6.0" to version "2.6"`)
	if next := queryInt(t, c, "SELECT snowflake.nextval()"); next <= id {
		t.Fatalf("nextval after the updates %d <= %d", next, id)
	}
}

// A shim installed by a proxy from before versions reports "2.6": it
// updates to 2.6.0.
func TestUpdateExtensionFromLegacyVersion(t *testing.T) {
	c := connect(t, newDB(t))
	mustExec(t, c, createVersion(t, "2.6"))
	if got := installedVersion(t, c); got != "2.6" {
		t.Fatalf("installed %q", got)
	}
	mustExec(t, c, updateTo(t, ""))
	wantNotices(t, c)
	if got := installedVersion(t, c); got != "2.6.0" {
		t.Fatalf("after UPDATE: %q", got)
	}
}

// Only the shim's owner (the role that installed it) or a superuser may
// update it, as only the extension's owner may.
func TestUpdateExtensionNeedsOwner(t *testing.T) {
	c := connect(t, newDB(t))
	install(t, c)
	role := fmt.Sprintf("sf_update_%d", queryInt(t, c, "SELECT pg_backend_pid()"))
	mustExec(t, c, "CREATE ROLE "+role)
	t.Cleanup(func() {
		_, _ = c.Exec(ctxT(t), "RESET ROLE")
		_, _ = c.Exec(ctxT(t), "DROP ROLE IF EXISTS "+role)
	})
	mustExec(t, c, "SET ROLE "+role)
	wantErr(t, pgErr(t, c, updateTo(t, "")), "42501", "must be owner of extension snowflake")
	mustExec(t, c, "RESET ROLE")
}

// seqState is what the tests read of a sequence: its type, ceiling and
// last value (as SELECT last_value FROM seq says it: the start value
// before the first nextval).
type seqState struct {
	typ  string
	max  int64
	last int64
}

func readSeq(t *testing.T, c *testConn, seq string) seqState {
	t.Helper()
	var s seqState
	err := c.QueryRow(ctxT(t), `SELECT format_type(seqtypid, NULL), seqmax, coalesce(pg_sequence_last_value($1::regclass), seqstart)
		FROM pg_sequence WHERE seqrelid = $1::regclass`, seq).Scan(&s.typ, &s.max, &s.last)
	if err != nil {
		t.Fatalf("read %s: %v", seq, err)
	}
	return s
}

// convertAs24 leaves seq as pgEdge 2.4's convert_sequence_to_snowflake
// did: its ceiling at the old last_value + 1 (and its type unchanged),
// then a snowflake stored above it by the extension's nextval, which
// ignores MAXVALUE. On a stock server only setval can store a value, and
// it honours MAXVALUE, so the snowflake is stored first and the catalog
// row lowered afterwards: the row and the sequence's data page are then
// those 2.4 left behind. typ is the sequence's type before the conversion.
func convertAs24(t *testing.T, c *testConn, seq, typ string) {
	t.Helper()
	old := readSeq(t, c, seq).last
	mustExec(t, c, "ALTER SEQUENCE "+seq+" AS bigint MAXVALUE 9223372036854775807")
	mustExec(t, c, "SELECT setval($1::regclass, $2)", seq, compose(100_000_000_000, 7, 5))
	mustExec(t, c, "UPDATE pg_catalog.pg_sequence SET seqmax = $2, seqtypid = $3::regtype WHERE seqrelid = $1::regclass",
		seq, old+1, typ)
}

// Regression-style check of pgEdge's 2.5.0 repair (SUP-140): sequences
// that 2.4 converted kept a MAXVALUE below their last_value, so the setval
// that pg_dump writes for them failed on restore ("setval: value ... is
// out of bounds"). Updating across 2.5.0 makes them AS bigint MAXVALUE
// 9223372036854775807 and leaves every other sequence alone.
func TestUpdateRepairsConvertedSequences(t *testing.T) {
	c := connect(t, newDB(t))
	mustExec(t, c, createVersion(t, "2.4"))
	mustExec(t, c, "SET snowflake.node = 5")

	// A serial column converted by 2.4: int8 column, snowflake default,
	// integer sequence with a low ceiling.
	mustExec(t, c, "CREATE TABLE ts (id serial PRIMARY KEY, v text)")
	mustExec(t, c, "INSERT INTO ts (v) VALUES ('a'), ('b')")
	mustExec(t, c, "ALTER TABLE ts ALTER COLUMN id SET DATA TYPE int8")
	mustExec(t, c, "ALTER TABLE ts ALTER COLUMN id SET DEFAULT snowflake.nextval('public.ts_id_seq'::regclass)")
	convertAs24(t, c, "ts_id_seq", "integer")
	// A plain sequence behind an explicit default, converted by 2.4.
	mustExec(t, c, "CREATE SEQUENCE tp_seq")
	mustExec(t, c, "CREATE TABLE tp (id bigint DEFAULT snowflake.nextval('public.tp_seq'::regclass))")
	convertAs24(t, c, "tp_seq", "bigint")
	// A standalone sequence converted by 2.4.
	mustExec(t, c, "CREATE SEQUENCE ps")
	convertAs24(t, c, "ps", "bigint")
	// A sequence behind a snowflake default whose ceiling is low but not
	// yet passed: the shim's nextval could not store a snowflake in it.
	mustExec(t, c, "CREATE SEQUENCE low_seq MAXVALUE 1000000")
	mustExec(t, c, "CREATE TABLE tl (id bigint DEFAULT snowflake.nextval('low_seq'))")
	// Not snowflake's: left alone.
	mustExec(t, c, "CREATE SEQUENCE other MAXVALUE 1000")
	mustExec(t, c, "SELECT setval('other', 10)")
	mustExec(t, c, "CREATE TABLE plain (id serial PRIMARY KEY)")

	broken := []string{"ts_id_seq", "tp_seq", "ps"}
	before := map[string]seqState{}
	for _, s := range broken {
		before[s] = readSeq(t, c, s)
		// The dump of this state does not restore.
		wantErr(t, pgErr(t, c, "SELECT pg_catalog.setval($1::regclass, $2, true)", s, before[s].last),
			"22003", fmt.Sprintf("setval: value %d is out of bounds for sequence %q (1..%d)", before[s].last, s, before[s].max))
	}
	untouched := map[string]seqState{}
	for _, s := range []string{"other", "plain_id_seq"} {
		untouched[s] = readSeq(t, c, s)
	}

	mustExec(t, c, updateTo(t, "2.5.0"))
	wantNotices(t, c) // pgEdge's update script runs with client_min_messages at warning

	for _, s := range append(broken, "low_seq") {
		got := readSeq(t, c, s)
		if got.typ != "bigint" || got.max != 9223372036854775807 {
			t.Fatalf("%s after the update: %s MAXVALUE %d, want bigint MAXVALUE 9223372036854775807", s, got.typ, got.max)
		}
		if b, ok := before[s]; ok && got.last != b.last {
			t.Fatalf("%s: last_value %d changed to %d", s, b.last, got.last)
		}
		mustExec(t, c, "SELECT pg_catalog.setval($1::regclass, $2, true)", s, got.last)
		if next := queryInt(t, c, "SELECT snowflake.nextval($1::regclass)", s); next <= got.last {
			t.Fatalf("%s: nextval %d not above %d", s, next, got.last)
		}
	}
	for s, want := range untouched {
		if got := readSeq(t, c, s); got != want {
			t.Fatalf("%s changed: %+v, was %+v", s, got, want)
		}
	}
}

// The repair belongs to the step from 2.4 to 2.5.0: an update that does
// not take that step repairs nothing, and CREATE EXTENSION of 2.5.0 or
// later takes it (PostgreSQL installs those from the 2.3 script and the
// update scripts after it).
func TestRepairOnlyAcross250(t *testing.T) {
	for _, tc := range []struct {
		name         string
		create, to   string
		wantRepaired bool
	}{
		{"update 2.5.0 to 2.6.0", "2.5.0", "2.6.0", false},
		{"update 2.3 to 2.4", "2.3", "2.4", false},
		{"update 2.2 to 2.6.0", "2.2", "2.6.0", true},
		{"create 2.4", "2.4", "", false},
		{"create 2.5.0", "2.5.0", "", true},
		{"create default", "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := connect(t, newDB(t))
			mustExec(t, c, "CREATE SEQUENCE ps")
			if tc.to != "" {
				mustExec(t, c, createVersion(t, tc.create))
				convertAs24(t, c, "ps", "bigint")
				mustExec(t, c, updateTo(t, tc.to))
			} else {
				convertAs24(t, c, "ps", "bigint")
				mustExec(t, c, createVersion(t, tc.create))
			}
			got := readSeq(t, c, "ps")
			if repaired := got.max == 9223372036854775807; repaired != tc.wantRepaired {
				t.Fatalf("repaired %v (MAXVALUE %d), want %v", repaired, got.max, tc.wantRepaired)
			}
		})
	}
}
