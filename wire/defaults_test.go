package wire

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/compat/catalog"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// Regression: the hidden query returned sequence OIDs as JSON strings (oid
// has no JSON number form), applyRel refused the row, and no INSERT default
// was ever filled. This runs the real hidden query on a real server and
// checks what the session learns: which shapes of default qualify, their
// positions, sequences, privileges and INCREMENTs (regression: the
// INCREMENT of a default's sequence was not read, and INSERT defaults of an
// INCREMENT 100 sequence were issued with INCREMENT 1).
func TestRelColumnOnTheServer(t *testing.T) {
	srv := pgtest.Shared(t)
	db := pgtest.NewDatabase(t, srv)
	pgtest.Exec(t, srv, db, shimSQL+`
		CREATE SEQUENCE s1 INCREMENT 100;
		CREATE TABLE t (gone int, a int, id bigint DEFAULT snowflake.nextval(), "Id2" bigint DEFAULT snowflake.nextval('s1'::regclass),
			cast_id int DEFAULT snowflake.nextval('s1'), dyn bigint DEFAULT snowflake.nextval('s1'::text::regclass),
			plus bigint DEFAULT snowflake.nextval('s1') + 1, plain bigint DEFAULT nextval('s1'));
		ALTER TABLE t DROP COLUMN gone;
		CREATE TABLE p (id bigint DEFAULT snowflake.nextval('s1'), k int) PARTITION BY LIST (k);
		CREATE VIEW v AS SELECT * FROM t`)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rels := []string{`"t"`, `"public"."p"`, `"v"`, `"missing"`}
	q := catalog.StateQuery{Targets: rels}
	row := make([]*string, q.Columns())
	ptrs := make([]any, len(row))
	for i := range row {
		ptrs[i] = &row[i]
	}
	if err := conn.QueryRow(ctx, string(q.AppendSQL(nil)), pgx.QueryExecModeSimpleProtocol).Scan(ptrs...); err != nil {
		t.Fatalf("hidden query: %v", err)
	}
	st, err := q.Decode(row)
	if err != nil {
		t.Fatalf("decode of the hidden query's row %v: %v", deref(row), err)
	}
	var m mirror
	m.apply(st, nil, rels)
	var s1, idSeq uint32
	if err := conn.QueryRow(ctx, "SELECT 's1'::regclass::oid, 'snowflake.id_seq'::regclass::oid").Scan(&s1, &idSeq); err != nil {
		t.Fatal(err)
	}
	got := m.rels[`"t"`].defs
	if len(got) != 2 || got[0].Name != "id" || got[0].Position != 1 || got[1].Name != "Id2" || got[1].Quoted != `"Id2"` || got[1].Position != 2 {
		t.Fatalf("defaults of t = %+v, want id at 1 and Id2 at 2 (casts, dynamic arguments, expressions and pg_catalog.nextval do not qualify)", got)
	}
	if m.seqs[got[0].Seq] != (seqInfo{oid: idSeq, usable: true, inc: 1}) || m.seqs[got[1].Seq] != (seqInfo{oid: s1, usable: true, inc: 100}) {
		t.Errorf("sequences of t's defaults: %q -> %+v, %q -> %+v", got[0].Seq, m.seqs[got[0].Seq], got[1].Seq, m.seqs[got[1].Seq])
	}
	if !got[0].Insertable || !got[0].AllInsertable {
		t.Errorf("superuser: %+v not insertable", got[0])
	}
	if d := m.rels[`"public"."p"`].defs; len(d) != 1 || d[0].Name != "id" {
		t.Errorf("partitioned table defaults = %+v", d)
	}
	if d, ok := m.rels[`"v"`]; !ok || d.defs != nil {
		t.Errorf("a view is left to the server: %+v", d)
	}
	if d, ok := m.rels[`"missing"`]; !ok || d.defs != nil {
		t.Errorf("a missing table is known to have no defaults: %+v", d)
	}
}

func deref(row []*string) []string {
	out := make([]string, len(row))
	for i, p := range row {
		if p != nil {
			out[i] = *p
		}
	}
	return out
}
