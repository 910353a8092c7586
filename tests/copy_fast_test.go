package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// COPY ... FROM STDIN whose rows the proxy completes with its IDs
// (wire/copyin.go, wire/pgcopy). Every test loads the same data twice: through
// the proxy into one table, and straight into the server (the shim fills the
// defaults) into a twin table. The two must hold the same rows in the same
// order in every column but the snowflake ones; the proxy's ids must be
// distinct, increasing in row order, of the proxy's node, issued without a
// shim call, and below the next ID the session gets.

// chunkReader returns data in reads of at most n bytes: pgconn.CopyFrom
// sends each read as one CopyData message, so rows, quoted fields and
// escapes are split across messages at every place.
type chunkReader struct {
	data []byte
	n, k int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	// Sizes cycle through 1..n, so that cuts fall everywhere.
	r.k = r.k%r.n + 1
	m := min(r.k, len(p), len(r.data))
	copy(p, r.data[:m])
	r.data = r.data[m:]
	return m, nil
}

// copyPair is a table created twice, "p_"+name through the proxy's
// COPY and "s_"+name loaded straight on the server.
type copyPair struct {
	name string
	// ddl creates the table; %s is its name. Every table has a column n
	// serial, for row order.
	ddl string
	// ids are its snowflake default columns.
	ids []string
}

func (c copyPair) proxyTable() string  { return "p_" + c.name }
func (c copyPair) serverTable() string { return "s_" + c.name }

func (c copyPair) create(t *testing.T, e *testEnv) {
	t.Helper()
	e.execDirect(t, fmt.Sprintf(c.ddl, c.proxyTable())+";"+fmt.Sprintf(c.ddl, c.serverTable()))
}

// rowsWithoutIDs returns table's rows as JSON without its snowflake
// columns and n, in row order.
func (c copyPair) rowsWithoutIDs(t *testing.T, conn *pgx.Conn, table string) []string {
	t.Helper()
	drop := "'n'"
	for _, id := range c.ids {
		drop += ", '" + id + "'"
	}
	rows, err := conn.Query(context.Background(), fmt.Sprintf("SELECT (to_jsonb(x) - ARRAY[%s])::text FROM %s x ORDER BY n", drop, table))
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// check compares the two tables and checks the proxy table's ids
// (conn: a proxy session).
func (c copyPair) check(t *testing.T, e *testEnv, conn *pgx.Conn, wantRows int) {
	t.Helper()
	direct := e.connectDirect(t)
	got := c.rowsWithoutIDs(t, direct, c.proxyTable())
	want := c.rowsWithoutIDs(t, direct, c.serverTable())
	if len(got) != wantRows || !slices.Equal(got, want) {
		t.Fatalf("%d rows through the proxy, %d straight (want %d); first rows:\nproxy  %q\nserver %q",
			len(got), len(want), wantRows, head(got), head(want))
	}
	// Each column's ids increase in row order (so they are distinct), and
	// the session's next ID of the column's sequence is above them: none
	// is issued again.
	for _, id := range c.ids {
		ids := mustInt64s(t, direct, fmt.Sprintf("SELECT %s FROM %s ORDER BY n", id, c.proxyTable()))
		checkIDs(t, c.name+": "+id+" in row order", ids, copyNode)
		if len(ids) == 0 {
			continue
		}
		seq := mustString(t, direct, fmt.Sprintf("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef JOIN pg_attribute ON attrelid = adrelid AND attnum = adnum WHERE adrelid = '%s'::regclass AND attname = '%s'", c.proxyTable(), id))
		next := mustInt64(t, conn, "SELECT "+seq)
		if m := slices.Max(ids); next <= m {
			t.Errorf("%s: %s after the COPY = %d, not above its largest %s %d", c.name, seq, next, id, m)
		}
	}
}

// connectShim connects straight to the server, with a node of its own:
// the shim issues the IDs of its statements.
func (e *testEnv) connectShim(t *testing.T) *pgx.Conn {
	t.Helper()
	c := e.connectDirect(t)
	mustRun(t, c, "SET snowflake.node = 8")
	return c
}

func head(s []string) []string { return s[:min(len(s), 3)] }

// copyBoth runs copySQL (%s: the table) with data through the proxy on
// conn, in reads of at most chunk bytes, and straight on the server; both
// must succeed with the same tag, and the proxy's with no shim call.
func (c copyPair) copyBoth(t *testing.T, e *testEnv, conn *pgx.Conn, copySQL, data string, chunk int) {
	t.Helper()
	ctx := copyCtx(t)
	var tag pgconn.CommandTag
	if n := shimCalls(t, conn, func() {
		var err error
		tag, err = conn.PgConn().CopyFrom(ctx, &chunkReader{data: []byte(data), n: chunk}, fmt.Sprintf(copySQL, c.proxyTable()))
		if err != nil {
			mustRun(t, conn, "ROLLBACK")
			t.Fatalf("%s through the proxy: %v", fmt.Sprintf(copySQL, c.proxyTable()), err)
		}
	}); n != 0 {
		t.Errorf("%s: the shim's nextval ran %d times, want 0", c.name, n)
	}
	direct := e.connectShim(t)
	want, err := direct.PgConn().CopyFrom(ctx, strings.NewReader(data), fmt.Sprintf(copySQL, c.serverTable()))
	if err != nil {
		t.Fatalf("%s straight: %v", fmt.Sprintf(copySQL, c.serverTable()), err)
	}
	if tag.String() != want.String() {
		t.Errorf("tag %q through the proxy, %q straight", tag, want)
	}
}

// copyBothRefused runs copySQL with data as copyBoth does, for a COPY the
// server refuses: through the proxy and straight, it must fail with the
// same SQLSTATE and message, and the proxy's session must go on.
func (c copyPair) copyBothRefused(t *testing.T, e *testEnv, conn *pgx.Conn, copySQL, data string, chunk int) {
	t.Helper()
	ctx := copyCtx(t)
	_, err := conn.PgConn().CopyFrom(ctx, &chunkReader{data: []byte(data), n: chunk}, fmt.Sprintf(copySQL, c.proxyTable()))
	var got *pgconn.PgError
	if !errors.As(err, &got) {
		t.Fatalf("%s through the proxy: %v, want the server's error", fmt.Sprintf(copySQL, c.proxyTable()), err)
	}
	direct := e.connectShim(t)
	_, err = direct.PgConn().CopyFrom(ctx, strings.NewReader(data), fmt.Sprintf(copySQL, c.serverTable()))
	var want *pgconn.PgError
	if !errors.As(err, &want) {
		t.Fatalf("%s straight: %v, want an error", fmt.Sprintf(copySQL, c.serverTable()), err)
	}
	if got.Code != want.Code || got.Message != want.Message {
		t.Errorf("through the proxy %s %q, straight %s %q", got.Code, got.Message, want.Code, want.Message)
	}
	mustRun(t, conn, "SELECT 1")
}

const copyTableDDL = "CREATE TABLE %s (n serial, id bigint PRIMARY KEY DEFAULT snowflake.nextval(), v text, w int, d date)"

// TestCopyFastTextAndCSV: text and csv data with every option that
// changes how rows are read, sent whole and split into messages of 1 to 7
// bytes. Some options and data a server takes only from or before a
// version (versioned); a server outside that range refuses the COPY, and
// must refuse it through the proxy alike.
func TestCopyFastTextAndCSV(t *testing.T) {
	e := newCopyEnv(t, "")
	conn, _, _ := e.copySession(t, pgx.QueryExecModeCacheStatement)
	num := serverVersionNum(t, conn)
	var long strings.Builder
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&long, "row %d with\\ttab and \\\\ backslash\t%d\t2024-01-%02d\n", i, i, i%28+1)
	}
	cases := []struct {
		name, copy, data string
		rows             int
	}{
		{"text", "COPY %s (v, w, d) FROM STDIN", "a\t1\t2024-01-01\n\\N\t\\N\t\\N\nlast\t3\t2024-01-03", 3},
		{"text_escapes", "COPY %s (v, w) FROM STDIN", "tab\\there\t1\nnew\\nline\t2\nback\\\\slash\t3\n\\x41\\101\t4\n", 4},
		{"text_crlf", "COPY %s (v, w) FROM STDIN", "a\t1\r\nb\t2\r\n", 2},
		{"text_delimiter_null", "COPY %s (v, w) FROM STDIN WITH (DELIMITER '|', NULL 'nil')", "a|1\nnil|nil\nx\\|y|3\n", 3},
		{"text_end_marker", "COPY %s (v, w) FROM STDIN", "a\t1\nb\t2\n\\.\n", 2},
		{"text_one_column", "COPY %s (v) FROM STDIN", "a\n\nc\n", 3},
		{"text_header", "COPY %s (v, w) FROM STDIN WITH (HEADER)", "v\tw\na\t1\n", 1},
		{"text_header_match", "COPY %s (v, w) FROM STDIN WITH (HEADER match)", "v\tw\na\t1\n", 1},
		{"text_large", "COPY %s (v, w, d) FROM STDIN", long.String(), 3000},
		{"csv", "COPY %s (v, w) FROM STDIN WITH (FORMAT csv)", "a,1\n\"b,with comma\",2\n\"c \"\"quoted\"\"\nand newline\",3\n,\n\"\",5", 5},
		{"csv_quote_escape", "COPY %s (v, w) FROM STDIN WITH (FORMAT csv, QUOTE '''', ESCAPE '\\')", "'a\\'b',1\n'x,\r\ny',2\n'\\\\',3\n", 3},
		{"csv_delimiter_crlf", "COPY %s (v, w) FROM STDIN WITH (FORMAT csv, DELIMITER ';')", "a;1\r\n\"b;c\";2\r\n", 2},
		{"csv_header", "COPY %s (v, w) FROM STDIN WITH (FORMAT csv, HEADER)", "anything,at all\na,1\n", 1},
		{"csv_header_match", "COPY %s (v, w, d) FROM STDIN WITH (FORMAT csv, HEADER match)", "v,w,d\na,1,2024-02-03\n", 1},
		{"csv_force_null", "COPY %s (v, w) FROM STDIN WITH (FORMAT csv, FORCE_NULL (v), FORCE_NOT_NULL (w))", "\"\",1\n,2\n", 2},
		{"csv_force_not_null", "COPY %s (v, w) FROM STDIN WITH (FORMAT csv, FORCE_NOT_NULL (v))", ",1\n", 1},
		{"csv_null_string", "COPY %s (v, w) FROM STDIN WITH (FORMAT csv, NULL 'NULL')", "NULL,1\n\"NULL\",2\n", 2},
		{"csv_end_marker", "COPY %s (v, w) FROM STDIN WITH (FORMAT csv)", "a,1\n\\.\n", 1},
		{"csv_end_marker_one_column", "COPY %s (v) FROM STDIN WITH (FORMAT csv)", "a\n\\.\n", 1},
		{"csv_encoding_latin1", "COPY %s (v, w) FROM STDIN WITH (FORMAT csv, ENCODING 'LATIN1')", "caf\xe9,1\n", 1},
		{"csv_encoding_utf8", "COPY %s (v, w) FROM STDIN WITH (FORMAT csv, ENCODING 'UTF8')", "café,1\n", 1},
		{"csv_old_syntax", "COPY %s (v, w) FROM STDIN WITH CSV HEADER DELIMITER AS '|' QUOTE AS '\"'", "h|h\n\"a|b\"|1\n", 1},
	}
	// What a server takes only from or before a version.
	versioned := map[string]struct{ since, before int64 }{
		"text_header":       {since: 150000},
		"text_header_match": {since: 150000},
		"csv_header_match":  {since: 150000},
		// From PostgreSQL 18 on a line that is exactly \. is csv data.
		"csv_end_marker": {before: 180000},
	}
	rowsFrom18 := map[string]int{"csv_end_marker_one_column": 2}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows := c.rows
			if n, ok := rowsFrom18[c.name]; ok && num >= 180000 {
				rows = n
			}
			v := versioned[c.name]
			taken := num >= v.since && (v.before == 0 || num < v.before)
			for _, chunk := range []int{1 << 16, 7} {
				p := copyPair{name: fmt.Sprintf("%s_%d", c.name, chunk), ddl: copyTableDDL, ids: []string{"id"}}
				p.create(t, e)
				if !taken {
					p.copyBothRefused(t, e, conn, c.copy, c.data, chunk)
					p.check(t, e, conn, 0)
					continue
				}
				p.copyBoth(t, e, conn, c.copy, c.data, chunk)
				p.check(t, e, conn, rows)
			}
		})
	}
}

// copyBinaryRows are the rows of the binary tests: some with NULLs.
func copyBinaryRows(n int) [][]any {
	rows := make([][]any, n)
	for i := range rows {
		switch i % 3 {
		case 0:
			rows[i] = []any{fmt.Sprintf("bin %d %s", i, copyPad), int32(i)}
		case 1:
			rows[i] = []any{nil, int32(i)}
		default:
			rows[i] = []any{"", nil}
		}
	}
	return rows
}

// TestCopyFastBinary: pgx CopyFrom (binary) in every exec mode, and a
// binary COPY sent in messages of 1 to 7 bytes.
func TestCopyFastBinary(t *testing.T) {
	e := newCopyEnv(t, "")
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		conn, ctx, _ := e.copySession(t, mode)
		p := copyPair{name: "bin_" + modeName(mode), ddl: copyTableDDL, ids: []string{"id"}}
		p.create(t, e)
		rows := copyBinaryRows(5000)
		var n int64
		var err error
		calls := shimCalls(t, conn, func() {
			n, err = conn.CopyFrom(ctx, pgx.Identifier{p.proxyTable()}, []string{"v", "w"}, pgx.CopyFromRows(rows))
		})
		if err != nil || n != int64(len(rows)) {
			t.Fatalf("CopyFrom: %d rows, %v", n, err)
		}
		if calls != 0 {
			t.Errorf("the shim's nextval ran %d times, want 0", calls)
		}
		direct := e.connectShim(t)
		if _, err := direct.CopyFrom(ctx, pgx.Identifier{p.serverTable()}, []string{"v", "w"}, pgx.CopyFromRows(rows)); err != nil {
			t.Fatal(err)
		}
		p.check(t, e, conn, len(rows))
	})
	t.Run("split", func(t *testing.T) {
		conn, ctx, _ := e.copySession(t, pgx.QueryExecModeCacheStatement)
		// The binary data of a few rows, as the server itself writes it.
		direct := e.connectDirect(t)
		var buf strings.Builder
		if _, err := direct.PgConn().CopyTo(ctx, &buf, "COPY (SELECT 'a'::text, 1, NULL::date UNION ALL SELECT NULL, NULL, '2024-05-06' UNION ALL SELECT repeat('x', 300), 3, NULL) TO STDOUT (FORMAT binary)"); err != nil {
			t.Fatal(err)
		}
		p := copyPair{name: "bin_split", ddl: copyTableDDL, ids: []string{"id"}}
		p.create(t, e)
		p.copyBoth(t, e, conn, "COPY %s (v, w, d) FROM STDIN (FORMAT binary)", buf.String(), 7)
		p.check(t, e, conn, 3)
	})
}

// TestCopyFastTableShapes: several snowflake defaults (one with INCREMENT
// 10), a partitioned table, a table found through search_path.
func TestCopyFastTableShapes(t *testing.T) {
	e := newCopyEnv(t, `CREATE SEQUENCE s10 INCREMENT 10; CREATE SCHEMA other`)
	conn, ctx, _ := e.copySession(t, pgx.QueryExecModeCacheStatement)

	multi := copyPair{name: "multi", ids: []string{"id", "id2"},
		ddl: "CREATE TABLE %s (n serial, id bigint DEFAULT snowflake.nextval(), v text, id2 bigint DEFAULT snowflake.nextval('s10'))"}
	multi.create(t, e)
	multi.copyBoth(t, e, conn, "COPY %s (v) FROM STDIN", textRows("m", 2000), 1<<16)
	multi.check(t, e, conn, 2000)
	// Each row's two ids come from their own sequences: s10's counts step
	// by 10 within a millisecond.
	counts := mustInt64s(t, conn, "SELECT snowflake.get_count(id2) FROM "+multi.proxyTable()+" ORDER BY n")
	if slices.ContainsFunc(counts, func(c int64) bool { return c%10 != 0 }) {
		t.Errorf("counts of id2 (INCREMENT 10) are not all multiples of 10: %v...", counts[:10])
	}

	part := copyPair{name: "part", ids: []string{"id"},
		ddl: "CREATE TABLE %[1]s (n serial, id bigint DEFAULT snowflake.nextval(), k int, v text) PARTITION BY LIST (k); " +
			"CREATE TABLE %[1]s_1 PARTITION OF %[1]s FOR VALUES IN (1); CREATE TABLE %[1]s_2 PARTITION OF %[1]s FOR VALUES IN (2)"}
	part.create(t, e)
	part.copyBoth(t, e, conn, "COPY %s (k, v) FROM STDIN", "1\ta\n2\tb\n1\tc\n", 1<<16)
	part.check(t, e, conn, 3)

	e.execDirect(t, "CREATE TABLE other.sp (n serial, id bigint DEFAULT snowflake.nextval(), v text)")
	mustRun(t, conn, "SET search_path = other, public")
	var tag pgconn.CommandTag
	var err error
	calls := shimCalls(t, conn, func() {
		tag, err = conn.PgConn().CopyFrom(ctx, strings.NewReader("a\nb\n"), "COPY sp (v) FROM STDIN")
	})
	if err != nil || tag.RowsAffected() != 2 || calls != 0 {
		t.Errorf("COPY sp through search_path: %v, tag %q, %d shim calls (want 0)", err, tag, calls)
	}
	checkIDs(t, "other.sp", mustInt64s(t, conn, "SELECT id FROM sp ORDER BY n"), copyNode)
	mustRun(t, conn, "RESET search_path")
}

// TestCopyFastLeftToTheServer: a COPY naming the id column, COPY TO, a
// COPY without a column list and one in the extended protocol keep their
// path (the server's own data or the shim's defaults).
func TestCopyFastLeftToTheServer(t *testing.T) {
	e := newCopyEnv(t, "")
	conn, ctx, _ := e.copySession(t, pgx.QueryExecModeCacheStatement)
	tag, err := conn.PgConn().CopyFrom(ctx, strings.NewReader("42\tgiven\n"), "COPY t (id, payload) FROM STDIN")
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("COPY naming id: %v", err)
	}
	if id := mustInt64(t, conn, "SELECT id FROM t WHERE payload = 'given'"); id != 42 {
		t.Errorf("id %d, want the client's 42", id)
	}
	_, err = conn.PgConn().CopyFrom(ctx, strings.NewReader("\\N\tnone\n"), "COPY t FROM STDIN")
	wantError(t, "COPY t FROM STDIN with a NULL id", err, "23502", "")
	out, _ := copyOut(t, ctx, conn, "COPY t (payload) TO STDOUT")
	if string(out) != "given\n" {
		t.Errorf("COPY t (payload) TO STDOUT: %q", out)
	}
}

// TestCopyFastErrors: what the client sees of a row the server refuses,
// of CopyFail, and of a role without USAGE on the sequence is what it
// sees without the proxy: SQLSTATE, message, and the line number in the
// context.
func TestCopyFastErrors(t *testing.T) {
	e := newCopyEnv(t, "CREATE TABLE e2 (n serial, id bigint DEFAULT snowflake.nextval(), a int, b text)")
	conn, ctx, before := e.copySession(t, pgx.QueryExecModeCacheStatement)
	direct := e.connectShim(t)
	for _, c := range []struct{ name, copy, data string }{
		{"bad value", "COPY e2 (a, b) FROM STDIN", "1\tx\n2\ty\nnope\tz\n"},
		{"too few fields", "COPY e2 (a, b) FROM STDIN", "1\tx\n2\n"},
		{"too many fields", "COPY e2 (a, b) FROM STDIN", "1\tx\n2\ty\textra\n"},
		{"csv too few", "COPY e2 (a, b) FROM STDIN (FORMAT csv)", "1,x\n2\n"},
		{"csv too many", "COPY e2 (a, b) FROM STDIN (FORMAT csv)", "1,x,y\n"},
		{"csv unterminated", "COPY e2 (a, b) FROM STDIN (FORMAT csv)", "1,\"x\n"},
		{"header mismatch", "COPY e2 (a, b) FROM STDIN (FORMAT csv, HEADER match)", "a,c\n1,x\n"},
		{"end marker corrupt", "COPY e2 (a, b) FROM STDIN", "1\tx\n\\.x\n"},
		{"empty line", "COPY e2 (a, b) FROM STDIN", "1\tx\n\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := conn.PgConn().CopyFrom(ctx, strings.NewReader(c.data), c.copy)
			_, want := direct.PgConn().CopyFrom(ctx, strings.NewReader(c.data), c.copy)
			if want == nil || err == nil {
				t.Fatalf("through the proxy: %v; straight: %v; want both to fail", err, want)
			}
			var g, w *pgconn.PgError
			if !asPgError(err, &g) || !asPgError(want, &w) {
				t.Fatalf("through the proxy: %v; straight: %v", err, want)
			}
			if g.Code != w.Code || g.Message != w.Message || g.Where != w.Where {
				t.Errorf("through the proxy:\n  %s %s\n  %s\nstraight:\n  %s %s\n  %s", g.Code, g.Message, g.Where, w.Code, w.Message, w.Where)
			}
			checkSessionUsable(t, conn, "after "+c.name, before)
		})
	}
	t.Run("CopyFail", func(t *testing.T) {
		src := &abortingSource{n: 3000, err: fmt.Errorf("given up")}
		_, err := conn.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"payload"}, src)
		wantError(t, "CopyFrom aborted", err, "57014", "given up")
		checkSessionUsable(t, conn, "after CopyFail", before)
		if n := mustInt64(t, conn, "SELECT count(*) FROM t"); n != 0 {
			t.Errorf("%d rows stored", n)
		}
	})
	t.Run("no USAGE", func(t *testing.T) {
		role := "copy_nousage_" + e.db
		pgtestExecCluster(t, e, fmt.Sprintf("CREATE ROLE %s LOGIN", role))
		t.Cleanup(func() {
			e.execDirect(t, "DROP OWNED BY "+role)
			pgtestExecCluster(t, e, "DROP ROLE IF EXISTS "+role)
		})
		e.execDirect(t, fmt.Sprintf(`CREATE SEQUENCE secret_seq;
			CREATE TABLE guarded (id bigint DEFAULT snowflake.nextval('secret_seq'), v int);
			GRANT INSERT, SELECT ON guarded TO %[1]s; GRANT INSERT, SELECT ON probe TO %[1]s`, role))
		rc := e.connectWith(t, pgx.QueryExecModeCacheStatement, func(c *pgx.ConnConfig) { c.User = role })
		waitFastDefaults(t, rc, "probe")
		_, err := rc.PgConn().CopyFrom(ctx, strings.NewReader("1\n"), "COPY guarded (v) FROM STDIN")
		wantError(t, "COPY without USAGE on the sequence", err, "42501", "permission denied for sequence secret_seq")
	})
}

func asPgError(err error, pe **pgconn.PgError) bool {
	p, ok := err.(*pgconn.PgError)
	if ok {
		*pe = p
	}
	return ok
}

// TestCopyFastProtocol: on the wire, the client sees the CopyInResponse of
// its own column list (one text column), not that of the statement the
// proxy sent, in the simple protocol and in the extended protocol (Parse,
// Bind, Execute of the unnamed statement); both get the proxy's IDs (a
// count below 3072: the shim issues 3072 and above while the proxy holds
// a lease). A named prepared COPY is left to the shim.
func TestCopyFastProtocol(t *testing.T) {
	e := newCopyEnv(t, "")
	conn, _, _ := e.copySession(t, pgx.QueryExecModeCacheStatement)
	check := e.connect(t, pgx.QueryExecModeCacheStatement)
	if err := conn.PgConn().Conn().SetDeadline(time.Now().Add(copyTimeout)); err != nil {
		t.Fatal(err)
	}
	hj, err := conn.PgConn().Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer hj.Conn.Close()
	fe := hj.Frontend
	// receive reads messages up to one of type T, failing on an error.
	receive := func(what string) []pgproto3.BackendMessage {
		var got []pgproto3.BackendMessage
		for {
			m, err := fe.Receive()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			switch m := m.(type) {
			case *pgproto3.ErrorResponse:
				t.Fatalf("%s: %s %s", what, m.Code, m.Message)
			case *pgproto3.CopyInResponse:
				c := *m
				c.ColumnFormatCodes = slices.Clone(m.ColumnFormatCodes)
				return append(got, &c)
			case *pgproto3.ReadyForQuery:
				return append(got, m)
			case *pgproto3.CommandComplete:
				got = append(got, &pgproto3.CommandComplete{CommandTag: slices.Clone(m.CommandTag)})
			}
		}
	}
	copyRows := func(what string) {
		fe.Send(&pgproto3.CopyData{Data: []byte("wire-" + what + "\n")})
		fe.Send(&pgproto3.CopyDone{})
		if what != "simple" {
			fe.Send(&pgproto3.Sync{})
		}
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		msgs := receive(what + ": after CopyDone")
		if len(msgs) != 2 || string(msgs[0].(*pgproto3.CommandComplete).CommandTag) != "COPY 1" {
			t.Fatalf("%s: %#v after CopyDone, want COPY 1 and ReadyForQuery", what, msgs)
		}
	}

	fe.Send(&pgproto3.Query{String: "COPY t (payload) FROM STDIN"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	msgs := receive("simple COPY")
	cin, ok := msgs[len(msgs)-1].(*pgproto3.CopyInResponse)
	if !ok || cin.OverallFormat != 0 || !slices.Equal(cin.ColumnFormatCodes, []uint16{0}) {
		t.Fatalf("simple COPY: %#v, want a CopyInResponse of one text column", msgs)
	}
	copyRows("simple")

	for _, name := range []string{"", "named"} {
		what := "extended"
		if name != "" {
			what = "named"
		}
		fe.Send(&pgproto3.Parse{Name: name, Query: "COPY t (payload) FROM STDIN"})
		fe.Send(&pgproto3.Bind{PreparedStatement: name})
		fe.Send(&pgproto3.Execute{})
		fe.Send(&pgproto3.Flush{})
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		msgs = receive(what + " COPY")
		cin, ok = msgs[len(msgs)-1].(*pgproto3.CopyInResponse)
		if !ok || !slices.Equal(cin.ColumnFormatCodes, []uint16{0}) {
			t.Fatalf("%s COPY: %#v, want a CopyInResponse of one text column", what, msgs)
		}
		copyRows(what)
	}

	ids := mustInt64s(t, check, "SELECT id FROM t WHERE payload LIKE 'wire-%' ORDER BY array_position(ARRAY['wire-simple', 'wire-extended', 'wire-named'], payload)")
	if len(ids) != 3 {
		t.Fatalf("%d rows, want 3", len(ids))
	}
	checkIDs(t, "the ids of the simple, the extended and the named COPY", ids, copyNode)
	for i, what := range []string{"simple", "extended"} {
		if c := decodeID(ids[i]).Count; c >= 3072 {
			t.Errorf("%s COPY: count %d, want one of the proxy's (below 3072)", what, c)
		}
	}
	if c := decodeID(ids[2]).Count; c < 3072 {
		t.Errorf("named COPY: count %d, want one of the shim's (3072 and above)", c)
	}
}

// TestCopyFastPsql: psql's \copy (a COPY FROM STDIN of a file's lines) in
// text and csv with a header, compared with the same file loaded straight.
func TestCopyFastPsql(t *testing.T) {
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Fatal("psql not installed: these tests need the PostgreSQL client (e.g. apt-get install postgresql-client)")
	}
	e := newCopyEnv(t, "")
	conn, _, _ := e.copySession(t, pgx.QueryExecModeCacheStatement)
	dir := t.TempDir()
	var text, csv strings.Builder
	csv.WriteString("v,w\n")
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&text, "psql row %d\t%d\n", i, i)
		fmt.Fprintf(&csv, "\"psql, row\n%d\",%d\n", i, i)
	}
	host, port := splitHostPort(t, e.proxyAddr())
	// HEADER match from PostgreSQL 15 on; before, the header is skipped.
	header := "HEADER match"
	if serverVersionNum(t, conn) < 150000 {
		header = "HEADER"
	}
	for _, c := range []struct{ name, data, options string }{
		{"text", text.String(), ""},
		{"csv", csv.String(), " WITH (FORMAT csv, " + header + ")"},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(dir, c.name)
			if err := os.WriteFile(file, []byte(c.data), 0o644); err != nil {
				t.Fatal(err)
			}
			p := copyPair{name: "psql_" + c.name, ddl: copyTableDDL, ids: []string{"id"}}
			p.create(t, e)
			cmd := exec.Command(psql, "-X", "-v", "ON_ERROR_STOP=1", "-h", host, "-p", port, "-U", "postgres", "-d", e.db,
				"-c", fmt.Sprintf(`\copy %s (v, w) FROM '%s'%s`, p.proxyTable(), file, c.options))
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C", "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=30"}
			out, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "COPY 5000" {
				t.Fatalf("psql \\copy: %v: %s", err, out)
			}
			loadStraight(t, e, p, c.data, c.options)
			p.check(t, e, conn, 5000)
		})
	}
}

// endlessRows is a COPY source in text format: at least first rows, then,
// once released, rows without end, 4 KiB per read.
type endlessRows struct {
	first    int
	released <-chan struct{}
	sent     chan struct{} // closed when the first rows are out
	gated    bool
	i        int
}

func (r *endlessRows) Read(p []byte) (int, error) {
	if r.i >= r.first && !r.gated {
		r.gated = true
		close(r.sent)
		<-r.released
	}
	n := 0
	for n+32 < len(p) && n < 4096 {
		r.i++
		n += copy(p[n:], fmt.Sprintf("endless %d\n", r.i))
	}
	return n, nil
}

// TestCopyFastCancel: a cancel request while the proxy completes a COPY's
// rows ends it with the server's 57014, stores nothing, and the session
// goes on with the fast path.
func TestCopyFastCancel(t *testing.T) {
	e := newCopyEnv(t, "")
	conn, ctx, before := e.copySession(t, pgx.QueryExecModeCacheStatement)
	release := make(chan struct{})
	src := &endlessRows{first: 100, released: release, sent: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := conn.PgConn().CopyFrom(ctx, src, "COPY t (payload) FROM STDIN")
		done <- err
	}()
	select {
	case <-src.sent:
	case <-ctx.Done():
		t.Fatal("the COPY never sent its first rows")
	}
	// The server ignores a cancel that comes before it runs the COPY:
	// wait until it does (waiting for the rows the source holds back).
	direct := e.connectDirect(t)
	deadline := time.Now().Add(copyTimeout)
	for mustInt64(t, direct, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE 'COPY t %'", conn.PgConn().PID()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the server never ran the COPY")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	close(release) // rows go on until the server acts on the cancel
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the cancelled COPY did not end")
	}
	wantError(t, "cancelled COPY", err, "57014", "canceling statement due to user request")
	checkSessionUsable(t, conn, "after the cancelled COPY", before)
	if n := mustInt64(t, conn, "SELECT count(*) FROM t"); n != 0 {
		t.Errorf("%d rows stored by the cancelled COPY", n)
	}
}

// TestCopyFastClientDisconnects: a client that goes away in the middle of
// a COPY leaves no row and no backend behind, and the proxy goes on
// serving other sessions with the fast path.
func TestCopyFastClientDisconnects(t *testing.T) {
	e := newCopyEnv(t, "")
	conn, ctx, _ := e.copySession(t, pgx.QueryExecModeCacheStatement)
	pid := conn.PgConn().PID()
	release := make(chan struct{})
	src := &endlessRows{first: 2000, released: release, sent: make(chan struct{})}
	go func() { _, _ = conn.PgConn().CopyFrom(ctx, src, "COPY t (payload) FROM STDIN") }()
	select {
	case <-src.sent:
	case <-ctx.Done():
		t.Fatal("the COPY never sent its first rows")
	}
	_ = conn.PgConn().Conn().Close() // gone, mid-COPY
	close(release)
	direct := e.connectDirect(t)
	deadline := time.Now().Add(copyTimeout)
	for mustInt64(t, direct, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the backend of the departed client is still there")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := mustInt64(t, direct, "SELECT count(*) FROM t"); n != 0 {
		t.Errorf("%d rows stored by the abandoned COPY", n)
	}
	other, _, _ := e.copySession(t, pgx.QueryExecModeCacheStatement)
	tag, err := other.PgConn().CopyFrom(ctx, strings.NewReader("after\n"), "COPY t (payload) FROM STDIN")
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("COPY on another session afterwards: %v", err)
	}
}

// TestCopyFastBinaryFieldCount: a binary tuple with the wrong number of
// fields gets the server's error with the client's count in it.
func TestCopyFastBinaryFieldCount(t *testing.T) {
	e := newCopyEnv(t, "CREATE TABLE e3 (id bigint DEFAULT snowflake.nextval(), a int, b text)")
	conn, ctx, before := e.copySession(t, pgx.QueryExecModeCacheStatement)
	direct := e.connectShim(t)
	data := "PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
		"\x00\x02\x00\x00\x00\x04\x00\x00\x00\x01\x00\x00\x00\x01x" + // (1, 'x')
		"\x00\x01\x00\x00\x00\x04\x00\x00\x00\x02" + // (2): one field short
		"\xff\xff"
	const sql = "COPY e3 (a, b) FROM STDIN (FORMAT binary)"
	_, err := conn.PgConn().CopyFrom(ctx, strings.NewReader(data), sql)
	_, want := direct.PgConn().CopyFrom(ctx, strings.NewReader(data), sql)
	var g, w *pgconn.PgError
	if !asPgError(err, &g) || !asPgError(want, &w) {
		t.Fatalf("through the proxy: %v; straight: %v", err, want)
	}
	if g.Code != w.Code || g.Message != w.Message || g.Where != w.Where {
		t.Errorf("through the proxy: %s %s (%s); straight: %s %s (%s)", g.Code, g.Message, g.Where, w.Code, w.Message, w.Where)
	}
	checkSessionUsable(t, conn, "after the bad tuple", before)
}
