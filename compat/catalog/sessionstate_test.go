package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/compat"
	"github.com/snowflake-proxy/snowflake-proxy/compat/catalog"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func mustExec(t *testing.T, c *pgx.Conn, sql string) {
	t.Helper()
	if _, err := c.Exec(ctxT(t), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

var updateState = flag.Bool("update", false, "record testdata/state/*.json from a real server")

// stateFixture is one recorded answer of the session state query: the
// query, the row a real server gave, and what Decode must make of it.
type stateFixture struct {
	Query catalog.StateQuery
	Row   []*string
	Want  catalog.SessionState
}

// stateCase is a session set up on a real server and the query it runs.
type stateCase struct {
	name  string
	setup []string // run on the session before the query, in order
	query catalog.StateQuery
	check func(t *testing.T, st catalog.SessionState, oids map[string]uint32)
}

func stateCases() []stateCase {
	seqs := []string{`"s1"`, `public.s2`, `"t"`, `"missing"`, `snowflake.id_seq`}
	targets := []string{`"t"`, `"public"."p"`, `"v"`, `"missing"`}
	return []stateCase{{
		name:  "owner",
		setup: []string{"SET snowflake.node = 7"},
		query: catalog.StateQuery{Sequences: seqs, Targets: targets},
		check: func(t *testing.T, st catalog.SessionState, oids map[string]uint32) {
			if st.Node != 7 || st.ReadOnly || !st.Shim || st.Isolation != "read committed" || st.BackendPID == 0 || st.Role != "postgres" {
				t.Errorf("settings = %+v", st)
			}
			want := []catalog.SequenceState{
				{OID: oids["s1"], Usable: true, Increment: 100},
				{OID: oids["s2"], Usable: true, Increment: 1},
				{}, // a table: no sequence
				{}, // nothing of that name
				{OID: oids["snowflake.id_seq"], Usable: true, Increment: 1},
			}
			if !reflect.DeepEqual(st.Sequences, want) {
				t.Errorf("sequences = %+v, want %+v", st.Sequences, want)
			}
			tt := st.Targets[0]
			if !tt.Table || !tt.AllInsertable || len(tt.Defaults) != 2 {
				t.Fatalf("t = %+v: want a table with two snowflake defaults (casts, dynamic arguments, expressions and pg_catalog.nextval do not qualify)", tt)
			}
			id, id2 := tt.Defaults[0], tt.Defaults[1]
			if id != (catalog.ColumnDefault{Name: "id", Quoted: "id", Position: 1, SeqOID: oids["snowflake.id_seq"], Seq: "snowflake.id_seq", SeqUsable: true, Insertable: true, Increment: 1, Int8: true}) {
				t.Errorf("t.id = %+v", id)
			}
			if id2 != (catalog.ColumnDefault{Name: "Id2", Quoted: `"Id2"`, Position: 2, SeqOID: oids["s1"], Seq: "public.s1", SeqUsable: true, Insertable: true, Increment: 100, Int8: true}) {
				t.Errorf("t.Id2 = %+v", id2)
			}
			if p := st.Targets[1]; !p.Table || len(p.Defaults) != 1 || p.Defaults[0].Name != "id" {
				t.Errorf("partitioned p = %+v", p)
			}
			if st.Targets[2].Table || st.Targets[3].Table {
				t.Errorf("a view and a missing name are no tables: %+v %+v", st.Targets[2], st.Targets[3])
			}
		},
	}, {
		name:  "state_reader",
		setup: []string{"SET ROLE state_reader", "BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"},
		query: catalog.StateQuery{Sequences: seqs[:2], Targets: targets[:1]},
		check: func(t *testing.T, st catalog.SessionState, oids map[string]uint32) {
			if st.Node != 0 || !st.ReadOnly || st.Role != "state_reader" || st.Isolation != "repeatable read" {
				t.Errorf("settings = %+v", st)
			}
			// USAGE on s1 only.
			want := []catalog.SequenceState{{OID: oids["s1"], Usable: true, Increment: 100}, {OID: oids["s2"], Increment: 1}}
			if !reflect.DeepEqual(st.Sequences, want) {
				t.Errorf("sequences = %+v, want %+v", st.Sequences, want)
			}
			// INSERT on column a only; snowflake.id_seq is every role's
			// (the shim grants it to PUBLIC), s1 by grant.
			tt := st.Targets[0]
			if !tt.Table || tt.AllInsertable || len(tt.Defaults) != 2 || tt.Defaults[0].Insertable || tt.Defaults[1].Insertable ||
				!tt.Defaults[0].SeqUsable || !tt.Defaults[1].SeqUsable {
				t.Errorf("t as state_reader = %+v", tt)
			}
		},
	}}
}

// TestStateQueryOnTheServer runs the query on a real server and checks
// what Decode makes of each answer: which shapes of default qualify, their
// positions, sequences, privileges and INCREMENTs, and the session's
// settings. With -update it records the rows and answers as the fixtures
// of TestStateFixtures.
func TestStateQueryOnTheServer(t *testing.T) {
	srv := pgtest.Shared(t)
	url := srv.URL(pgtest.NewDatabase(t, srv))
	c := connect(t, url)
	shim, err := compat.ExtensionSQL(plan.CreateExtension, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, c, shim)
	mustExec(t, c, `
		CREATE SEQUENCE s1 INCREMENT 100;
		CREATE SEQUENCE s2;
		CREATE TABLE t (gone int, a int, id bigint DEFAULT snowflake.nextval(), "Id2" bigint DEFAULT snowflake.nextval('s1'::regclass),
			cast_id int DEFAULT snowflake.nextval('s1'), dyn bigint DEFAULT snowflake.nextval('s1'::text::regclass),
			plus bigint DEFAULT snowflake.nextval('s1') + 1, plain bigint DEFAULT nextval('s1'));
		ALTER TABLE t DROP COLUMN gone;
		CREATE TABLE p (id bigint DEFAULT snowflake.nextval('s1'), k int) PARTITION BY LIST (k);
		CREATE VIEW v AS SELECT * FROM t;
		DROP ROLE IF EXISTS state_reader;
		CREATE ROLE state_reader;
		GRANT USAGE ON SEQUENCE s1 TO state_reader;
		GRANT SELECT ON SEQUENCE s2 TO state_reader; -- SELECT alone does not make it usable
		GRANT INSERT (a) ON t TO state_reader;
		GRANT USAGE ON SCHEMA snowflake TO state_reader`)
	t.Cleanup(func() {
		cl := connect(t, url)
		mustExec(t, cl, "DROP OWNED BY state_reader; DROP ROLE state_reader")
	})
	oids := map[string]uint32{}
	for _, name := range []string{"s1", "s2", "snowflake.id_seq"} {
		var oid int64
		if err := c.QueryRow(ctxT(t), "SELECT $1::regclass::oid::int8", name).Scan(&oid); err != nil {
			t.Fatal(err)
		}
		oids[name] = uint32(oid)
	}
	for _, tc := range stateCases() {
		t.Run(tc.name, func(t *testing.T) {
			s := connect(t, url)
			for _, sql := range tc.setup {
				mustExec(t, s, sql)
			}
			row := make([]*string, tc.query.Columns())
			dst := make([]any, len(row))
			for i := range row {
				dst[i] = &row[i]
			}
			sql := string(tc.query.AppendSQL(nil))
			if err := s.QueryRow(ctxT(t), sql, pgx.QueryExecModeSimpleProtocol).Scan(dst...); err != nil {
				t.Fatalf("state query: %v", err)
			}
			st, err := tc.query.Decode(row)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			tc.check(t, st, oids)
			if *updateState {
				writeStateFixture(t, tc.name, stateFixture{Query: tc.query, Row: row, Want: st})
			}
		})
	}
}

func writeStateFixture(t *testing.T, name string, f stateFixture) {
	t.Helper()
	b, err := json.MarshalIndent(f, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join("testdata", "state"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "state", name+".json"), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestStateFixtures decodes the rows recorded from a real server
// (TestStateQueryOnTheServer -update) without one.
func TestStateFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "state", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < len(stateCases()) {
		t.Fatalf("%d fixtures in testdata/state, want %d (go test -run TestStateQueryOnTheServer -update)", len(files), len(stateCases()))
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var f stateFixture
			if err := json.Unmarshal(b, &f); err != nil {
				t.Fatal(err)
			}
			got, err := f.Query.Decode(f.Row)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, f.Want) {
				t.Fatalf("decoded\n%+v\nwant\n%+v", got, f.Want)
			}
		})
	}
}

func strp(s string) *string { return &s }

// Rows that are not an answer to the query are refused with catalog.ErrStateRow,
// never half-read.
func TestStateDecodeRefusesMalformedRows(t *testing.T) {
	q := catalog.StateQuery{Sequences: []string{`"s"`}, Targets: []string{`"t"`}}
	fixed := []*string{strp("7"), strp("off"), strp("postgres"), strp("t"), strp("read committed"), strp("4242")}
	row := func(seq, target *string) []*string { return append(append([]*string{}, fixed...), seq, target) }
	okSeq := strp(`{"oid": 16384, "kind": "S", "usable": true, "increment": 1}`)
	okCol := `{"name": "id", "quoted": "id", "position": 0, "seq_oid": 16384, "seq": "public.s", "seq_usable": true, "insertable": true, "increment": 1}`
	okTarget := strp(`{"insert": true, "columns": [` + okCol + `]}`)
	if _, err := q.Decode(row(okSeq, okTarget)); err != nil {
		t.Fatalf("a well-formed row: %v", err)
	}
	for _, tc := range []struct {
		name string
		row  []*string
	}{
		{"too few columns", fixed},
		{"too many columns", append(row(okSeq, okTarget), nil)},
		{"pid not a number", append(append(append([]*string{}, fixed[:5]...), strp("x")), okSeq, okTarget)},
		{"sequence not JSON", row(strp("{"), okTarget)},
		{"sequence without oid", row(strp(`{"kind": "S", "usable": true, "increment": 1}`), okTarget)},
		{"sequence without increment", row(strp(`{"oid": 1, "kind": "S", "usable": true}`), okTarget)},
		{"oid out of range", row(strp(`{"oid": 4294967296, "kind": "S", "usable": true, "increment": 1}`), okTarget)},
		{"target not JSON", row(okSeq, strp("[1"))},
		{"target without privilege", row(okSeq, strp(`{"columns": null}`))},
		{"column missing a field", row(okSeq, strp(`{"insert": true, "columns": [{"name": "id"}]}`))},
		{"column without sequence", row(okSeq, strp(`{"insert": true, "columns": [`+strings.Replace(okCol, `"seq_oid": 16384`, `"seq_oid": 0`, 1)+`]}`))},
		{"negative position", row(okSeq, strp(`{"insert": true, "columns": [`+strings.Replace(okCol, `"position": 0`, `"position": -1`, 1)+`]}`))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st, err := q.Decode(tc.row); !errors.Is(err, catalog.ErrStateRow) {
				t.Fatalf("decoded %+v, %v; want catalog.ErrStateRow", st, err)
			}
		})
	}
}

func TestAppendLiteral(t *testing.T) {
	for in, want := range map[string]string{
		`s`:       `'s'`,
		`"it's"`:  `'"it''s"'`,
		`a\b`:     `E'a\\b'`,
		`'\`:      `E'''\\'`,
		``:        `''`,
		`"Ü"."ß"`: `'"Ü"."ß"'`,
	} {
		if got := string(catalog.AppendLiteral(nil, in)); got != want {
			t.Errorf("catalog.AppendLiteral(%q) = %s, want %s", in, got, want)
		}
	}
}

// FuzzStateDecode feeds Decode rows whose columns are split from the input
// at NUL bytes (an empty piece is NULL): it must answer or refuse, never
// panic, and what it accepts must have a sequence state per name.
func FuzzStateDecode(f *testing.F) {
	f.Add("7\x00off\x00postgres\x00t\x00read committed\x004242\x00" +
		`{"oid": 16384, "kind": "S", "usable": true, "increment": 1}` + "\x00" +
		`{"insert": true, "columns": [{"name": "id", "quoted": "id", "position": 0, "seq_oid": 16384, "seq": "public.s", "seq_usable": true, "insertable": true, "increment": 1}]}`)
	f.Add("\x00on\x00r\x00f\x00serializable\x001\x00\x00")
	f.Add("1\x00off\x00u\x00t\x00x\x002\x00{\"oid\":1,\"kind\":\"r\"}\x00{\"insert\":false,\"columns\":null}")
	q := catalog.StateQuery{Sequences: []string{`"s"`}, Targets: []string{`"t"`}}
	f.Fuzz(func(t *testing.T, in string) {
		parts := strings.Split(in, "\x00")
		row := make([]*string, len(parts))
		for i, p := range parts {
			if p != "" {
				row[i] = &parts[i]
			}
		}
		st, err := q.Decode(row)
		if err != nil {
			if !errors.Is(err, catalog.ErrStateRow) {
				t.Fatalf("error %v does not wrap catalog.ErrStateRow", err)
			}
			return
		}
		if len(st.Sequences) != 1 || len(st.Targets) != 1 {
			t.Fatalf("accepted %+v", st)
		}
		for _, d := range st.Targets[0].Defaults {
			if d.SeqOID == 0 || d.Position < 0 {
				t.Fatalf("accepted an invalid default %+v", d)
			}
		}
	})
}
