package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// copyClientRows are the rows the client tests load: v text, w int, as
// COPY text format (for the table loaded straight through the shim).
func copyClientRows(client string, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%s row %d\t%d\n", client, i, i)
	}
	return b.String()
}

// loadStraight loads data (columns v and w, in the format options say)
// into p's server table through the shim on a direct connection.
func loadStraight(t *testing.T, e *testEnv, p copyPair, data, options string) {
	t.Helper()
	if _, err := e.connectShim(t).PgConn().CopyFrom(copyCtx(t), strings.NewReader(data),
		fmt.Sprintf("COPY %s (v, w) FROM STDIN%s", p.serverTable(), options)); err != nil {
		t.Fatal(err)
	}
}

// runClient runs a client program against the proxy and fails with its
// output when it fails.
func runClient(t *testing.T, what string, cmd *exec.Cmd) {
	t.Helper()
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", what, err, out)
	}
}

// TestCopyFastPsycopg: psycopg 3's cursor.copy, in text (write_row) and
// binary (set_types, write_row), through the proxy, compared with the same
// rows loaded straight.
func TestCopyFastPsycopg(t *testing.T) {
	python := pgtest.Tool(t, "psycopg")
	e := newCopyEnv(t, "")
	conn, _, _ := e.copySession(t, pgx.QueryExecModeCacheStatement)
	host, port := splitHostPort(t, e.proxyAddr())
	const script = `
import sys, psycopg
dsn, table, fmt, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with psycopg.connect(dsn) as conn:
    with conn.cursor() as cur:
        opts = " (FORMAT BINARY)" if fmt == "binary" else ""
        with cur.copy("COPY %s (v, w) FROM STDIN%s" % (table, opts)) as copy:
            if fmt == "binary":
                copy.set_types(["text", "int4"])
            for i in range(n):
                copy.write_row(("psycopg row %d" % i, i))
`
	for _, format := range []string{"text", "binary"} {
		t.Run(format, func(t *testing.T) {
			p := copyPair{name: "psycopg_" + format, ddl: copyTableDDL, ids: []string{"id"}}
			p.create(t, e)
			dsn := fmt.Sprintf("host=%s port=%s user=postgres dbname=%s sslmode=disable", host, port, e.db)
			runClient(t, "psycopg", exec.Command(python, "-c", script, dsn, p.proxyTable(), format, "3000"))
			loadStraight(t, e, p, copyClientRows("psycopg", 3000), "")
			p.check(t, e, conn, 3000)
		})
	}
}

// TestCopyFastPgJDBC: pgjdbc's CopyManager.copyIn (text and csv) through
// the proxy, compared with the same rows loaded straight.
func TestCopyFastPgJDBC(t *testing.T) {
	java := pgtest.Tool(t, "java")
	jar := pgtest.Tool(t, "pgjdbc")
	e := newCopyEnv(t, "")
	conn, _, _ := e.copySession(t, pgx.QueryExecModeCacheStatement)
	host, port := splitHostPort(t, e.proxyAddr())
	src := filepath.Join(t.TempDir(), "CopyIn.java")
	if err := os.WriteFile(src, []byte(`
import java.io.StringReader;
import java.sql.Connection;
import java.sql.DriverManager;
import org.postgresql.copy.CopyManager;
import org.postgresql.core.BaseConnection;

public class CopyIn {
    public static void main(String[] args) throws Exception {
        String url = args[0], table = args[1], format = args[2];
        int n = Integer.parseInt(args[3]);
        StringBuilder data = new StringBuilder();
        for (int i = 0; i < n; i++) {
            if (format.equals("csv")) {
                data.append("\"pgjdbc row ").append(i).append("\",").append(i).append('\n');
            } else {
                data.append("pgjdbc row ").append(i).append('\t').append(i).append('\n');
            }
        }
        try (Connection c = DriverManager.getConnection(url)) {
            CopyManager cm = new CopyManager((BaseConnection) c);
            String opts = format.equals("csv") ? " WITH (FORMAT csv)" : "";
            long rows = cm.copyIn("COPY " + table + " (v, w) FROM STDIN" + opts, new StringReader(data.toString()));
            if (rows != n) {
                throw new IllegalStateException("copied " + rows + " rows, want " + n);
            }
        }
    }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"text", "csv"} {
		t.Run(format, func(t *testing.T) {
			p := copyPair{name: "pgjdbc_" + format, ddl: copyTableDDL, ids: []string{"id"}}
			p.create(t, e)
			url := fmt.Sprintf("jdbc:postgresql://%s:%s/%s?user=postgres&sslmode=disable", host, port, e.db)
			runClient(t, "pgjdbc", exec.Command(java, "-cp", jar, src, url, p.proxyTable(), format, "3000"))
			loadStraight(t, e, p, copyClientRows("pgjdbc", 3000), "")
			p.check(t, e, conn, 3000)
		})
	}
}
