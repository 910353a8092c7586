package wire

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// hookedReader returns its chunks one per Read, calling before(i) first.
type hookedReader struct {
	chunks []string
	i      int
	before func(i int)
}

func (r *hookedReader) Read(p []byte) (int, error) {
	if r.i == len(r.chunks) {
		return 0, io.EOF
	}
	r.before(r.i)
	n := copy(p, r.chunks[r.i])
	r.i++
	return n, nil
}

// TestCopyGeneratorFailsMidCopy: a COPY whose rows the proxy completes
// gets its IDs from the generator; when the generator fails in the middle
// of one, the proxy ends it with a CopyFail: the client gets the server's
// 57014 with the reason, no row of it is stored, and the session goes on.
// When it refuses before the COPY is sent, the shim fills the defaults.
func TestCopyGeneratorFailsMidCopy(t *testing.T) {
	srv := pgtest.Shared(t)
	db := pgtest.NewDatabase(t, srv)
	pgtest.Exec(t, srv, db, shimSQL+"CREATE TABLE ct (id bigint DEFAULT snowflake.nextval(), v text)")
	const sql = "COPY ct (v) FROM STDIN"
	plans := snowflakePlans()
	plans[sql] = &plan.Plan{Statements: []plan.Statement{{}}, Touches: plan.TouchShim,
		Copy: &plan.Copy{SQL: sql, ColsEnd: strings.Index(sql, ")"), Rel: `"ct"`, Cols: []string{"v"},
			Delim: '\t', Quote: '"', Escape: '"', Null: `\N`}}
	sf := &fakeSnowflakes{}
	sf.epoch.Store(1) // the catalog is watched: defaults may be filled
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: plans}, Snowflakes: sf, Node: 5})
	c := connectPg(t, p.url(srv, db))
	ctx := ctxT(t)

	tag, err := c.CopyFrom(ctx, strings.NewReader("a\nb\n"), sql)
	if err != nil || tag.RowsAffected() != 2 {
		t.Fatalf("COPY: %v (%q)", err, tag)
	}
	res, err := c.Exec(ctx, "SELECT min(id), count(*) FROM ct").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if row := res[0].Rows[0]; string(row[0])[0] == '-' || string(row[1]) != "2" {
		t.Fatalf("ids of the COPY: min %s of %s rows, want the generator's (positive)", row[0], row[1])
	}
	if sf.calls.Load() == 0 {
		t.Fatal("the generator issued nothing for the COPY")
	}

	// The first message's rows get IDs; before the second, whose rows need
	// more than the first batches left, the generator fails. The second is
	// one the read buffer holds whole, or one relayed in parts. (The
	// client sends the data without waiting for the server: the failure
	// waits until the proxy has issued the first message's IDs, or the
	// proxy would leave the whole COPY to the shim.)
	for _, rows := range []int{2000, 50000} {
		base := sf.calls.Load()
		r := &hookedReader{chunks: []string{strings.Repeat("x\n", 1000), strings.Repeat("y\n", rows)},
			before: func(i int) {
				if i != 1 {
					return
				}
				deadline := time.Now().Add(time.Minute)
				for sf.calls.Load() < base+1001 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				sf.fail.Store(true)
			}}
		_, err = c.CopyFrom(ctx, r, sql)
		sf.fail.Store(false)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "57014" || !strings.Contains(pe.Message, errCopyIDs.Error()) {
			t.Fatalf("COPY with a failing generator (%d rows): %v, want 57014 naming %q", rows, err, errCopyIDs)
		}
		res, err = c.Exec(ctx, "SELECT count(*) FROM ct").ReadAll()
		if err != nil || string(res[0].Rows[0][0]) != "2" {
			t.Fatalf("after the failed COPY: %v, %v rows; want the first COPY's 2", err, res)
		}
	}
	tag, err = c.CopyFrom(ctx, strings.NewReader("c\n"), sql)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("COPY after the failed one: %v (%q)", err, tag)
	}

	sf.fail.Store(true)
	tag, err = c.CopyFrom(ctx, strings.NewReader("shim\n"), sql)
	sf.fail.Store(false)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("COPY with a generator that refuses from the start: %v (%q)", err, tag)
	}
	res, err = c.Exec(ctx, "SELECT id FROM ct WHERE v = 'shim'").ReadAll()
	if err != nil || len(res[0].Rows) != 1 || string(res[0].Rows[0][0])[0] != '-' {
		t.Fatalf("the row of a COPY the generator refused: %v %v, want the shim's id (negative)", err, res)
	}
}
