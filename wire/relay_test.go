package wire

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

func TestRelayQueries(t *testing.T) {
	srv := pgtest.Shared(t)
	for _, name := range []string{"relay", "tracked"} {
		t.Run(name, func(t *testing.T) {
			cfg := Config{}
			if name == "tracked" {
				cfg.Rewriter = &fakeRewriter{plans: snowflakePlans()}
			}
			p := startProxy(t, srv, cfg)
			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
				pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
				c := connect(t, p.url(srv, "postgres"))
				ctx := ctxT(t)
				for i := 0; i < 3; i++ {
					var s string
					var n int64
					if err := c.QueryRow(ctx, "SELECT $1::text || 'x', $2::int8 + 1", mode, "a", int64(i)).Scan(&s, &n); err != nil {
						t.Fatalf("%v: %v", mode, err)
					}
					if s != "ax" || n != int64(i)+1 {
						t.Fatalf("%v: got %q %d", mode, s, n)
					}
				}
				rows, _ := c.Query(ctx, "SELECT g FROM generate_series(1, 1000) g", mode)
				sum := 0
				for rows.Next() {
					var g int
					_ = rows.Scan(&g)
					sum += g
				}
				if rows.Err() != nil || sum != 500500 {
					t.Fatalf("%v: sum %d err %v", mode, sum, rows.Err())
				}
				// An error, then the session continues.
				_, err := c.Exec(ctx, "SELECT 1/0", mode)
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != "22012" {
					t.Fatalf("%v: want 22012, got %v", mode, err)
				}
				var one int
				if err := c.QueryRow(ctx, "SELECT 1", mode).Scan(&one); err != nil || one != 1 {
					t.Fatalf("%v: after error: %v", mode, err)
				}
			}
		})
	}
}

func TestPipelineBatch(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}})
	c := connectPg(t, p.url(srv, "postgres"))
	ctx := ctxT(t)
	b := &pgconn.Batch{}
	for i := 0; i < 50; i++ {
		b.ExecParams("SELECT $1::int8 * 2", [][]byte{[]byte("21")}, nil, nil, nil)
	}
	b.ExecParams("SELECT 1/0", nil, nil, nil, nil)
	b.ExecParams("SELECT 3", nil, nil, nil, nil)
	res, err := c.ExecBatch(ctx, b).ReadAll()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "22012" {
		t.Fatalf("want 22012, got %v", err)
	}
	if len(res) < 50 || string(res[0].Rows[0][0]) != "42" {
		t.Fatalf("results: %d", len(res))
	}
	// The session is usable after the failed pipeline.
	r := c.ExecParams(ctx, "SELECT 7", nil, nil, nil, nil).Read()
	if r.Err != nil || string(r.Rows[0][0]) != "7" {
		t.Fatalf("after pipeline: %v", r.Err)
	}
}

func TestCopyBothWays(t *testing.T) {
	srv := pgtest.Shared(t)
	db := pgtest.NewDatabase(t, srv)
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}})
	c := connectPg(t, p.url(srv, db))
	ctx := ctxT(t)
	if err := c.Exec(ctx, "CREATE TABLE t (a int, b text)").Close(); err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	for i := 0; i < 5000; i++ {
		in.WriteString("1\thello world\n")
	}
	tag, err := c.CopyFrom(ctx, strings.NewReader(in.String()), "COPY t FROM STDIN")
	if err != nil || tag.RowsAffected() != 5000 {
		t.Fatalf("copy in: %v %v", tag, err)
	}
	var out strings.Builder
	tag, err = c.CopyTo(ctx, &out, "COPY t TO STDOUT")
	if err != nil || tag.RowsAffected() != 5000 || out.String() != in.String() {
		t.Fatalf("copy out: %v %v", tag, err)
	}
	// A failing COPY keeps the session usable.
	_, err = c.CopyFrom(ctx, strings.NewReader("x\ty\n"), "COPY t FROM STDIN")
	if err == nil {
		t.Fatal("bad copy accepted")
	}
	if r := c.ExecParams(ctx, "SELECT count(*) FROM t", nil, nil, nil, nil).Read(); r.Err != nil || string(r.Rows[0][0]) != "5000" {
		t.Fatalf("after copy: %v", r.Err)
	}
}

func TestListenNotify(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{Rewriter: &fakeRewriter{plans: snowflakePlans()}})
	listener := connect(t, p.url(srv, "postgres"))
	ctx := ctxT(t)
	if _, err := listener.Exec(ctx, "LISTEN chan1"); err != nil {
		t.Fatal(err)
	}
	direct := connect(t, srv.URL("postgres"))
	if _, err := direct.Exec(ctx, "NOTIFY chan1, 'hello'"); err != nil {
		t.Fatal(err)
	}
	n, err := listener.WaitForNotification(ctx)
	if err != nil || n.Channel != "chan1" || n.Payload != "hello" {
		t.Fatalf("notification: %v %v", n, err)
	}
}

func TestCancelRequest(t *testing.T) {
	srv := pgtest.Shared(t)
	p := startProxy(t, srv, Config{})
	c := connectPg(t, p.url(srv, "postgres"))
	other := connectPg(t, p.url(srv, "postgres"))
	ctx := ctxT(t)
	// Cancel once the query runs: watch pg_stat_activity from the other
	// connection (no sleeps used as synchronisation).
	errc := make(chan error, 1)
	go func() {
		errc <- c.ExecParams(ctx, "SELECT pg_sleep(60)", nil, nil, nil, nil).Read().Err
	}()
	pid := c.PID()
	for {
		r := other.ExecParams(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query = 'SELECT pg_sleep(60)' AND state = 'active'",
			[][]byte{[]byte(strconv.Itoa(int(pid)))}, nil, nil, nil).Read()
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if string(r.Rows[0][0]) == "1" {
			break
		}
	}
	if err := c.CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "57014" {
		t.Fatalf("want 57014, got %v", err)
	}
	if p.Stats().Cancels != 1 {
		t.Fatalf("stats: %+v", p.Stats())
	}
	// The other session was untouched.
	if r := other.ExecParams(ctx, "SELECT 1", nil, nil, nil, nil).Read(); r.Err != nil {
		t.Fatal(r.Err)
	}
}
