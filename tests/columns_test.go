package tests

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// columnsQueries call every function of the API, with and without
// arguments where valid, in the select list and in FROM, bare, cast, with
// explicit aliases and under SELECT *. Some fail on both sides (get_node
// without argument, a column that does not exist): the error must be the
// same too.
func columnsQueries(id int64) []string {
	qs := []string{
		// select list
		"SELECT snowflake.nextval()",
		"SELECT snowflake.nextval('s')",
		"SELECT snowflake.nextval('s'::regclass)",
		"SELECT snowflake.currval()",
		"SELECT snowflake.currval('s')",
		"SELECT snowflake.nextval('s') AS id",
		"SELECT snowflake.currval('s') id",
		"SELECT snowflake.nextval('s')::text",
		"SELECT snowflake.nextval('s')::bigint",
		"SELECT CAST(snowflake.currval('s') AS numeric)",
		"SELECT snowflake.currval('s')::text COLLATE \"C\"",
		"SELECT (snowflake.nextval('s'))",
		"SELECT snowflake.nextval('s') + 1, -snowflake.currval('s')",
		"SELECT snowflake.nextval('s'), snowflake.currval('s'), snowflake.nextval() AS x",
		"SELECT snowflake.currval('s') WHERE true",
		"SELECT snowflake.currval('s') FROM generate_series(1, 2)",
		"SELECT snowflake.nextval('s') FROM generate_series(1, 2)",
		"SELECT (SELECT snowflake.currval('s'))",
		"SELECT * FROM (SELECT snowflake.currval('s')) sub",
		"SELECT currval FROM (SELECT snowflake.currval('s')) sub",
		"SELECT * FROM (SELECT snowflake.nextval('s'), snowflake.currval('s')) sub",
		"WITH w AS (SELECT snowflake.currval('s')) SELECT * FROM w",
		"SELECT snowflake.nextval('s') UNION ALL SELECT snowflake.nextval('s')",
		"VALUES (snowflake.nextval('s'), snowflake.currval('s'))",
		"SELECT snowflake.currval('s') ORDER BY 1",
		"INSERT INTO cols DEFAULT VALUES RETURNING id, snowflake.currval('s')",
		"INSERT INTO cols VALUES (snowflake.nextval('s')) RETURNING snowflake.currval('s'), snowflake.currval('s')::text",
		"UPDATE cols SET id = id RETURNING snowflake.currval('s')",
		"DELETE FROM cols WHERE id < 0 RETURNING snowflake.currval('s')",
		"SELECT snowflake.get_node()",
		"SELECT snowflake.currval('nosuch')",
		"SELECT nosuch FROM snowflake.currval('s')",
		// FROM
		"SELECT * FROM snowflake.nextval()",
		"SELECT * FROM snowflake.nextval('s')",
		"SELECT nextval FROM snowflake.nextval('s')",
		"SELECT * FROM snowflake.currval()",
		"SELECT * FROM snowflake.currval('s')",
		"SELECT currval FROM snowflake.currval('s')",
		"SELECT currval.currval FROM snowflake.currval('s')",
		"SELECT * FROM snowflake.currval('s') AS c",
		"SELECT c FROM snowflake.currval('s') c",
		"SELECT * FROM snowflake.currval('s') AS c(x)",
		"SELECT x FROM snowflake.currval('s') AS c(x)",
		"SELECT * FROM snowflake.currval('s') WITH ORDINALITY",
		"SELECT * FROM snowflake.currval('s') WITH ORDINALITY AS c",
		"SELECT * FROM ROWS FROM (snowflake.currval('s'))",
		"SELECT * FROM ROWS FROM (snowflake.currval('s'), generate_series(1, 2))",
		"SELECT currval.* FROM ROWS FROM (snowflake.currval('s'), generate_series(1, 2))",
		"SELECT * FROM ROWS FROM (snowflake.currval('s'), generate_series(1, 2)) AS r",
		"SELECT * FROM ROWS FROM (snowflake.currval('s'), generate_series(1, 2)) AS r(a)",
		"SELECT * FROM ROWS FROM (generate_series(1, 2), snowflake.currval('s'))",
		"SELECT * FROM CAST(snowflake.currval('s') AS text)",
		"SELECT * FROM generate_series(1, 2) g, LATERAL snowflake.currval('s')",
		"SELECT * FROM snowflake.currval('s')JOIN snowflake.currval('s') c2 ON true",
		"SELECT currval, get_count FROM snowflake.currval('s'), snowflake.get_count(snowflake.currval('s'))",
		"SELECT * FROM snowflake.currval('nosuch')",
	}
	for _, f := range []string{"get_epoch", "get_count", "get_node", "format"} {
		for _, arg := range []string{"snowflake.nextval('s')", "snowflake.nextval()", "snowflake.currval('s')", fmt.Sprint(id)} {
			qs = append(qs,
				fmt.Sprintf("SELECT snowflake.%s(%s)", f, arg),
				fmt.Sprintf("SELECT snowflake.%s(%s) AS v", f, arg),
				fmt.Sprintf("SELECT * FROM snowflake.%s(%s)", f, arg),
				fmt.Sprintf("SELECT * FROM snowflake.%s(%s) AS v", f, arg),
			)
		}
		qs = append(qs, fmt.Sprintf("SELECT %[1]s FROM snowflake.%[1]s(snowflake.currval('s'))", f))
	}
	return qs
}

// described is what a client learns about a statement's result.
type described struct {
	fields []pgconn.FieldDescription
	tag    string
	rows   int
	code   string // SQLSTATE when it failed
}

func describe(c *pgx.Conn, sql string) (described, error) {
	rows, err := c.Query(context.Background(), sql)
	if err != nil {
		if code := sqlState(err); code != "" {
			return described{code: code}, nil
		}
		return described{}, err
	}
	d := described{fields: append([]pgconn.FieldDescription(nil), rows.FieldDescriptions()...)}
	for rows.Next() {
		d.rows++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		if code := sqlState(err); code != "" {
			return described{code: code}, nil
		}
		return described{}, err
	}
	d.tag = rows.CommandTag().String()
	return d, nil
}

// Regression: SELECT * FROM snowflake.currval('s') through the proxy named
// its column _currval (the shim function the call became), where the
// extension names it currval, so SELECT currval FROM snowflake.currval('s')
// failed with 42703; a currval in a RETURNING list or a select list with
// FROM was renamed the same way, and SELECT snowflake.nextval()::text was
// answered by the proxy itself as an int8 column. For every call of the
// API in the select list and in FROM, the RowDescription (names, type
// OIDs, sizes, modifiers, formats, in order), the row count, the command
// tag and any SQLSTATE through the proxy must equal what the server gives
// for the unrewritten statement with the shim installed, in the simple and
// in every extended-protocol mode of pgx.
func TestResultColumnsMatchServer(t *testing.T) {
	const node = 4
	e := newEnv(t, node)
	e.installExtension(t)
	e.execDirect(t, "CREATE SEQUENCE s; CREATE TABLE cols (id bigint DEFAULT snowflake.nextval('s'))")
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		proxy := e.connect(t, mode)
		cfg, err := pgx.ParseConfig(e.srv.URL(e.db))
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = mode
		cfg.RuntimeParams["snowflake.node"] = fmt.Sprint(node)
		direct := connectConfig(t, cfg)
		// currval is defined in both sessions from here on.
		id := mustInt64(t, proxy, "SELECT snowflake.nextval('s')")
		mustInt64(t, proxy, "SELECT snowflake.nextval()")
		mustInt64(t, direct, "SELECT snowflake.nextval('s')")
		mustInt64(t, direct, "SELECT snowflake.nextval()")
		for _, sql := range columnsQueries(id) {
			want, err := describe(direct, sql)
			if err != nil {
				t.Fatalf("%s directly: %v", sql, err)
			}
			got, err := describe(proxy, sql)
			if err != nil {
				t.Fatalf("%s through the proxy: %v", sql, err)
			}
			if got.code != want.code || got.tag != want.tag || got.rows != want.rows {
				t.Errorf("%s:\nproxy:  SQLSTATE %q, tag %q, %d rows\nserver: SQLSTATE %q, tag %q, %d rows",
					sql, got.code, got.tag, got.rows, want.code, want.tag, want.rows)
				continue
			}
			if fmt.Sprint(got.fields) != fmt.Sprint(want.fields) {
				t.Errorf("%s: columns differ\nproxy:  %+v\nserver: %+v", sql, got.fields, want.fields)
			}
		}
	})
}
