package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite"
)

// Syntax newer than the proxy's parser (pg_query_go v6 parses PostgreSQL
// 17) is forwarded as written and works on a PostgreSQL 18 server, also
// when it mentions snowflake functions: the server's shim answers those.

const newerSyntaxNode = 9

// newerSyntax: statements each test checks the parser refuses, with %s
// standing for the test's table.
var newerSyntax = map[string]string{
	"virtual generated column":  "CREATE TABLE %s (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), price int, doubled int GENERATED ALWAYS AS (price * 2) VIRTUAL)",
	"RETURNING OLD and NEW":     "UPDATE %s SET price = price + 1 WHERE id = $1 RETURNING WITH (OLD AS o, NEW AS n) o.price, n.price, n.doubled",
	"RETURNING NEW, nextval":    "INSERT INTO %s (id, price) VALUES (snowflake.nextval(), 3) RETURNING WITH (NEW AS n) n.id, snowflake.get_node(n.id)",
	"NOT ENFORCED, new default": "ALTER TABLE %s ALTER COLUMN id SET DEFAULT 0, ADD CONSTRAINT positive CHECK (price > 0) NOT ENFORCED",
}

// newerSQL is the statement of newerSyntax named name for table, after
// checking that the proxy's parser cannot parse it (else the test would
// prove nothing: pick newer syntax).
func newerSQL(t *testing.T, name, table string) string {
	t.Helper()
	sql := strings.ReplaceAll(newerSyntax[name], "%s", table)
	if rewrite.Parses(sql) {
		t.Fatalf("%s: the proxy's parser parses %q: it is not newer syntax", name, sql)
	}
	return sql
}

// TestPostgres18SyntaxThroughTheProxy: on PostgreSQL 18, in the simple
// protocol and pgx's default mode, a virtual generated column, RETURNING
// WITH (OLD, NEW) and NOT ENFORCED pass through the proxy and do what they
// do on the server; a snowflake.nextval in such a statement is issued by
// the shim with the proxy's node.
func TestPostgres18SyntaxThroughTheProxy(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t, pgserver.Options{BinDir: pgtest.BinDirAtLeast(t, 18)})
	e := newEnvOn(t, srv, pgtest.NewDatabase(t, srv), newerSyntaxNode)
	e.installExtension(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		t.Run(modeName(mode), func(t *testing.T) {
			table := "items_" + modeName(mode)
			c := e.connect(t, mode)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			mustRun(t, c, newerSQL(t, "virtual generated column", table))
			var id int64
			var doubled int
			if err := c.QueryRow(ctx, "INSERT INTO "+table+" (price) VALUES (10) RETURNING id, doubled").Scan(&id, &doubled); err != nil {
				t.Fatalf("INSERT into a table with a virtual column: %s", describeErr(err))
			}
			checkIDs(t, "INSERT's id", []int64{id}, newerSyntaxNode)
			if doubled != 20 {
				t.Errorf("virtual column doubled = %d, want 20", doubled)
			}

			var oldPrice, newPrice, newDoubled int
			if err := c.QueryRow(ctx, newerSQL(t, "RETURNING OLD and NEW", table), id).Scan(&oldPrice, &newPrice, &newDoubled); err != nil {
				t.Fatalf("UPDATE ... RETURNING WITH (OLD, NEW): %s", describeErr(err))
			}
			if oldPrice != 10 || newPrice != 11 || newDoubled != 22 {
				t.Errorf("RETURNING old.price, new.price, new.doubled = %d, %d, %d; want 10, 11, 22", oldPrice, newPrice, newDoubled)
			}

			// The session's ids keep increasing across the paths
			// (regression: a statement the parser could not read was
			// forwarded with no effects on the session, so the fast path
			// did not fence after the shim's id and issued below it).
			before := mustInt64(t, c, "SELECT snowflake.nextval()")
			var shimID, node int64
			if err := c.QueryRow(ctx, newerSQL(t, "RETURNING NEW, nextval", table)).Scan(&shimID, &node); err != nil {
				t.Fatalf("INSERT of snowflake.nextval() ... RETURNING WITH (NEW): %s", describeErr(err))
			}
			if node != newerSyntaxNode {
				t.Errorf("snowflake.get_node of the shim's id = %d, want %d", node, newerSyntaxNode)
			}
			after := mustInt64(t, c, "SELECT snowflake.nextval()")
			checkIDs(t, "ids of the session: fast path, shim, fast path", []int64{id, before, shimID, after}, newerSyntaxNode)
		})
	}
}

// TestUnparsedDDLInATransactionDropsCachedDefaults: an ALTER TABLE the
// parser cannot read, which changes a snowflake default to 0, is followed
// in the same transaction by an INSERT that gets the server's new default
// (regression: the statement was forwarded with no effects on the
// session, whose cached snowflake default of the table filled the id on
// the fast path until the transaction's commit told the proxy).
func TestUnparsedDDLInATransactionDropsCachedDefaults(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t, pgserver.Options{BinDir: pgtest.BinDirAtLeast(t, 18)})
	e := newEnvOn(t, srv, pgtest.NewDatabase(t, srv), newerSyntaxNode)
	e.installExtension(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		t.Run(modeName(mode), func(t *testing.T) {
			table := "items_" + modeName(mode)
			c := e.connect(t, mode)
			mustRun(t, c, "CREATE TABLE "+table+" (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), price int)")
			waitFastDefaults(t, c, table) // the session now knows the default
			insert := "INSERT INTO " + table + " (price) VALUES (1) RETURNING id"
			mustRun(t, c, "BEGIN")
			checkIDs(t, "INSERT before the ALTER", []int64{mustInt64(t, c, insert)}, newerSyntaxNode)
			mustRun(t, c, newerSQL(t, "NOT ENFORCED, new default", table))
			if id := mustInt64(t, c, insert); id != 0 {
				t.Errorf("INSERT after the ALTER in its transaction: id %d %v, want the new default 0", id, decodeID(id))
			}
			mustRun(t, c, "ROLLBACK")
		})
	}
}
