package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// snowflakeSetup gives a test database with the stand-in shim and a proxy
// with the fake rewriter and generator, node 5.
func snowflakeSetup(t *testing.T) (*pgserver.Server, string, *proxy, *fakeSnowflakes) {
	srv := pgtest.Shared(t)
	db := pgtest.NewDatabase(t, srv)
	pgtest.Exec(t, srv, db, shimSQL)
	plans := snowflakePlans()
	plans["BEGIN READ ONLY"] = &plan.Plan{Statements: []plan.Statement{{}}, Touches: plan.TouchReadOnly}
	sf := &fakeSnowflakes{}
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: plans}, Snowflakes: sf, Node: 5})
	return srv, db, p, sf
}

// rawSession is a hand-driven protocol session that returns raw bytes.
type rawSession struct {
	t *testing.T
	c net.Conn
}

func startRaw(t *testing.T, addr, user, db string) *rawSession {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	b, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": user, "database": db}}).Encode(nil)
	_, _ = c.Write(b)
	s := &rawSession{t: t, c: c}
	s.untilReady()
	return s
}

// untilReady returns the raw bytes of every message up to ReadyForQuery.
func (s *rawSession) untilReady() []byte {
	var out []byte
	for {
		var h [5]byte
		if _, err := io.ReadFull(s.c, h[:]); err != nil {
			s.t.Fatal(err)
		}
		body := make([]byte, binary.BigEndian.Uint32(h[1:])-4)
		if _, err := io.ReadFull(s.c, body); err != nil {
			s.t.Fatal(err)
		}
		if h[0] == 'E' && len(out) == 0 && body == nil {
			s.t.Fatal("error")
		}
		out = append(append(out, h[:]...), body...)
		if h[0] == 'Z' {
			return out
		}
	}
}

func (s *rawSession) query(sql string) []byte {
	b, _ := (&pgproto3.Query{String: sql}).Encode(nil)
	_, _ = s.c.Write(b)
	return s.untilReady()
}

// Local answers must be byte-identical to the server's answer to the same
// SELECT with the value as a literal, in and out of a transaction block.
func TestLocalAnswerMatchesServer(t *testing.T) {
	srv, db, p, sf := snowflakeSetup(t)
	viaProxy := startRaw(t, p.addr, srv.Superuser(), db)
	direct := startRaw(t, srv.Addr(), srv.Superuser(), db)
	for _, begin := range []bool{false, true} {
		if begin {
			viaProxy.query("BEGIN")
			direct.query("BEGIN")
		}
		before := p.Stats()
		got := viaProxy.query("SELECT snowflake.nextval()")
		if st := p.Stats(); st.LocalAnswers != before.LocalAnswers+1 || st.LocalIDs != before.LocalIDs+1 || st.FastIDs != before.FastIDs+1 {
			t.Fatalf("not answered locally with one fast-path ID: %+v", st)
		}
		id := sf.next.Load()<<12 | 5
		want := direct.query("SELECT " + strconv.FormatInt(id, 10) + "::int8 AS nextval")
		if !bytes.Equal(got, want) {
			t.Fatalf("local answer differs:\n got %q\nwant %q", got, want)
		}
	}
}

func TestFastPathNodeAndFallback(t *testing.T) {
	srv, db, p, sf := snowflakeSetup(t)
	c := connect(t, p.url(srv, db))
	ctx := ctxT(t)
	var id int64
	if err := c.QueryRow(ctx, "SELECT snowflake.nextval()", pgx.QueryExecModeSimpleProtocol).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if id&0x3ff != 5 || id <= 0 {
		t.Fatalf("id %d: node bits %d, want 5", id, id&0x3ff)
	}
	if _, err := c.Exec(ctx, "SET snowflake.node = 9", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, "SELECT snowflake.nextval()", pgx.QueryExecModeSimpleProtocol).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if id&0x3ff != 9 {
		t.Fatalf("after SET: node %d, want 9", id&0x3ff)
	}
	// When the generator refuses, the server's shim answers (the stand-in
	// returns negative values).
	sf.fail.Store(true)
	if err := c.QueryRow(ctx, "SELECT snowflake.nextval()", pgx.QueryExecModeSimpleProtocol).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if id >= 0 {
		t.Fatalf("fallback: got %d, want the shim's value", id)
	}
	sf.fail.Store(false)
	// Per-row calls are not the proxy's: the shim gives one value per row.
	rows, _ := c.Query(ctx, "SELECT snowflake.nextval() FROM generate_series(1,3)")
	n := 0
	for rows.Next() {
		n++
	}
	if rows.Err() != nil || n != 3 {
		t.Fatalf("per-row: %d %v", n, rows.Err())
	}
}

func TestFailedAndReadOnlyTransactions(t *testing.T) {
	srv, db, p, _ := snowflakeSetup(t)
	c := connect(t, p.url(srv, db))
	ctx := ctxT(t)
	var pe *pgconn.PgError
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		sql := "SELECT snowflake.nextval()"
		if mode == pgx.QueryExecModeExec {
			sql = "SELECT snowflake.nextval() + $1::int8 * 0 AS x"
		}
		args := []any{mode}
		if mode == pgx.QueryExecModeExec {
			args = append(args, 1)
		}
		_, _ = c.Exec(ctx, "BEGIN", pgx.QueryExecModeSimpleProtocol)
		_, _ = c.Exec(ctx, "SELECT 1/0", pgx.QueryExecModeSimpleProtocol)
		_, err := c.Exec(ctx, sql, args...)
		if !errors.As(err, &pe) || pe.Code != "25P02" {
			t.Fatalf("%v failed transaction: want 25P02, got %v", mode, err)
		}
		_, _ = c.Exec(ctx, "ROLLBACK", pgx.QueryExecModeSimpleProtocol)

		_, _ = c.Exec(ctx, "BEGIN READ ONLY", pgx.QueryExecModeSimpleProtocol)
		_, err = c.Exec(ctx, sql, args...)
		if !errors.As(err, &pe) || pe.Code != "25006" {
			t.Fatalf("%v read-only: want 25006, got %v", mode, err)
		}
		_, _ = c.Exec(ctx, "ROLLBACK", pgx.QueryExecModeSimpleProtocol)
	}
}

func TestExtensionStatementTag(t *testing.T) {
	srv, db, p, _ := snowflakeSetup(t)
	c := connectPg(t, p.url(srv, db))
	var notices []string
	_ = notices
	res, err := c.Exec(ctxT(t), "CREATE EXTENSION snowflake").ReadAll()
	if err != nil || len(res) != 1 || res[0].CommandTag.String() != "CREATE EXTENSION" {
		t.Fatalf("got %v %v", res, err)
	}
}

// The extended protocol: injected parameters are invisible to the client
// (pgx's default mode binds exactly what the ParameterDescription says),
// and every execution of a prepared statement gets a fresh ID.
func TestExtendedParameterStripping(t *testing.T) {
	srv, db, p, sf := snowflakeSetup(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		c := connect(t, p.url(srv, db))
		ctx := ctxT(t)
		seen := map[int64]bool{}
		for i := 0; i < 4; i++ {
			var x int64
			if err := c.QueryRow(ctx, "SELECT snowflake.nextval() + $1::int8 * 0 AS x", mode, int64(i)).Scan(&x); err != nil {
				t.Fatalf("%v: %v", mode, err)
			}
			if x <= 0 || x&0x3ff != 5 || seen[x] {
				t.Fatalf("%v: id %d (seen %v)", mode, x, seen[x])
			}
			seen[x] = true
			var a int64
			var b string
			var cc int64
			if err := c.QueryRow(ctx, "SELECT snowflake.nextval() AS a, $1::text AS b, $2::int8 AS c", mode, "hi", int64(7)).Scan(&a, &b, &cc); err != nil {
				t.Fatalf("%v: %v", mode, err)
			}
			if a <= 0 || b != "hi" || cc != 7 || seen[a] {
				t.Fatalf("%v: got %d %q %d", mode, a, b, cc)
			}
			seen[a] = true
		}
		if mode == pgx.QueryExecModeCacheStatement {
			sd, err := c.Prepare(ctx, "s1", "SELECT snowflake.nextval() + $1::int8 * 0 AS x")
			if err != nil || len(sd.ParamOIDs) != 1 {
				t.Fatalf("prepare: %v %v", sd, err)
			}
		}
	}
	if sf.calls.Load() == 0 {
		t.Fatal("fast path never used")
	}
	// Binary and text formats of the injected value, through pgconn.
	pc := connectPg(t, p.url(srv, db))
	ctx := ctxT(t)
	if _, err := pc.Prepare(ctx, "p", "SELECT snowflake.nextval() + $1::int8 * 0 AS x", nil); err != nil {
		t.Fatal(err)
	}
	eight := make([]byte, 8)
	for _, formats := range [][]int16{nil, {1}, {0}} {
		v := []byte("0")
		if len(formats) == 1 && formats[0] == 1 {
			v = eight
		}
		r := pc.ExecPrepared(ctx, "p", [][]byte{v}, formats, nil).Read()
		if r.Err != nil {
			t.Fatalf("formats %v: %v", formats, r.Err)
		}
		id, _ := strconv.ParseInt(string(r.Rows[0][0]), 10, 64)
		if id <= 0 || id&0x3ff != 5 {
			t.Fatalf("formats %v: %s", formats, r.Rows[0][0])
		}
	}
	if r := pc.Exec(ctx, "DEALLOCATE p"); r == nil {
		t.Fatal("exec")
	} else if _, err := r.ReadAll(); err != nil {
		t.Fatal(err)
	}
}
