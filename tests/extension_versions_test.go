package tests

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// noticeLog collects the notices of a connection.
type noticeLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *noticeLog) add(_ *pgconn.PgConn, n *pgconn.Notice) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, n.Message)
}

func (l *noticeLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.msgs
	l.msgs = nil
	return m
}

// CREATE EXTENSION snowflake VERSION and ALTER EXTENSION snowflake UPDATE
// TO through the proxy, in every query exec mode: the command tags,
// notices and errors of PostgreSQL, and the installed version reported by
// snowflake._shim_version().
func TestExtensionVersionsThroughProxy(t *testing.T) {
	e := newEnv(t, 2)
	forEachMode(t, func(t *testing.T, mode pgx.QueryExecMode) {
		notices := &noticeLog{}
		conn := e.connectWith(t, mode, func(c *pgx.ConnConfig) { c.OnNotice = notices.add })
		if tag := mustRun(t, conn, "CREATE EXTENSION snowflake VERSION '2.4'"); tag.String() != "CREATE EXTENSION" {
			t.Fatalf("tag %q", tag)
		}
		if v := mustString(t, conn, "SELECT snowflake._shim_version()"); v != "2.4" {
			t.Fatalf("installed version %q, want 2.4", v)
		}
		if tag := mustRun(t, conn, "ALTER EXTENSION snowflake UPDATE TO '2.5.0'"); tag.String() != "ALTER EXTENSION" {
			t.Fatalf("tag %q", tag)
		}
		if v := mustString(t, conn, "SELECT snowflake._shim_version()"); v != "2.5.0" {
			t.Fatalf("installed version %q, want 2.5.0", v)
		}
		if n := notices.take(); len(n) != 0 {
			t.Fatalf("notices %q, want none", n)
		}
		mustRun(t, conn, "ALTER EXTENSION snowflake UPDATE TO '2.5.0'")
		if n := notices.take(); len(n) != 1 || n[0] != `version "2.5.0" of extension "snowflake" is already installed` {
			t.Fatalf("notices %q", n)
		}
		_, err := run(context.Background(), conn, "ALTER EXTENSION snowflake UPDATE TO '2.4'")
		wantError(t, "downgrade", err, "22023", `extension "snowflake" has no update path from version "2.5.0" to version "2.4"`)
		mustRun(t, conn, "ALTER EXTENSION snowflake UPDATE")
		if v := mustString(t, conn, "SELECT snowflake._shim_version()"); v != "2.6.0" {
			t.Fatalf("installed version %q, want 2.6.0", v)
		}
		if id := mustInt64(t, conn, "SELECT snowflake.nextval()"); decodeID(id).Node != 2 {
			t.Fatalf("id %d has node %d, want 2", id, decodeID(id).Node)
		}
		mustRun(t, conn, "DROP EXTENSION snowflake")

		_, err = run(context.Background(), conn, "CREATE EXTENSION snowflake VERSION '9.9'")
		wantError(t, "unknown version", err, "22023", `extension "snowflake" has no installation script nor update path for version "9.9"`)
		if msg := errorMessage(err); msg != `extension "snowflake" has no installation script nor update path for version "9.9"` {
			t.Fatalf("message %q", msg)
		}
	})
}

// The story of pgEdge's 2.5.0 repair end to end: a database whose serial
// column 2.4 converted dumps into a script that does not restore (its
// setval is above the sequence's MAXVALUE); after ALTER EXTENSION
// snowflake UPDATE through the proxy the dump restores, and new rows get
// IDs above the stored ones.
func TestDumpRestoresAfterUpdateRepair(t *testing.T) {
	e := newEnv(t, 3)
	conn := e.connect(t, pgx.QueryExecModeSimpleProtocol)
	mustRun(t, conn, "CREATE EXTENSION snowflake VERSION '2.4'")
	mustRun(t, conn, "CREATE TABLE legacy (id serial PRIMARY KEY, v text)")
	mustRun(t, conn, "INSERT INTO legacy (v) VALUES ('a'), ('b'), ('c')")
	// What 2.4's convert_sequence_to_snowflake left: an int8 column with a
	// snowflake default, its integer sequence capped at the old
	// last_value + 1, and a snowflake stored above the cap by the
	// extension's nextval (which ignores MAXVALUE). setval honours the cap,
	// so the value goes in first and the cap is lowered in the catalog.
	mustRun(t, conn, "ALTER TABLE legacy ALTER COLUMN id SET DATA TYPE int8")
	mustRun(t, conn, "ALTER TABLE legacy ALTER COLUMN id SET DEFAULT snowflake.nextval('public.legacy_id_seq'::regclass)")
	mustRun(t, conn, "ALTER SEQUENCE legacy_id_seq AS bigint")
	// The row goes in on a direct connection, so that the shim stores its
	// snowflake in the sequence as the extension's nextval did (regression:
	// through the proxy the fast path may issue it, leaving the sequence at
	// 3, and whether it did depended on how soon the proxy's catalog watch
	// armed; the restore then succeeded and the test failed).
	direct := e.connectDirect(t)
	mustRun(t, direct, "SET snowflake.node = 3")
	mustRun(t, direct, "INSERT INTO legacy (v) VALUES ('d')")
	last := mustInt64(t, conn, "SELECT last_value FROM legacy_id_seq")
	if last <= 4 {
		t.Fatalf("last_value %d after the shim's INSERT: no snowflake stored above the cap", last)
	}
	mustRun(t, conn, "UPDATE pg_catalog.pg_sequence SET seqmax = 4, seqtypid = 'integer'::regtype WHERE seqrelid = 'legacy_id_seq'::regclass")

	dumpRestore := func() error {
		t.Helper()
		_, out, err := dumpAndRestore(t, e)
		if err != nil && !strings.Contains(string(out), "setval: value "+strconv.FormatInt(last, 10)+" is out of bounds") {
			t.Fatalf("restore failed otherwise than on the setval: %v: %s", err, out)
		}
		return err
	}
	if err := dumpRestore(); err == nil {
		t.Fatal("the dump of the 2.4 state restored: the test does not reproduce the bug")
	}

	mustRun(t, conn, "ALTER EXTENSION snowflake UPDATE")
	if typ := mustString(t, conn, "SELECT data_type || ' ' || max_value FROM pg_sequences WHERE sequencename = 'legacy_id_seq'"); typ != "bigint 9223372036854775807" {
		t.Fatalf("after the update: %s", typ)
	}
	if err := dumpRestore(); err != nil {
		t.Fatalf("the dump does not restore after the update: %v", err)
	}
	if id := mustInt64(t, conn, "INSERT INTO legacy (v) VALUES ('e') RETURNING id"); id <= last {
		t.Fatalf("new id %d not above %d", id, last)
	}
}
