package tests

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// A Parse of a name the server already has fails (42P05) and the name
// keeps its statement; so does one skipped after an error. The proxy's
// record of the name must follow the server's, not the refused text
// (wire/namedparse.go). pairs takes one ID per row, twin two.
const namedParseTables = `CREATE TABLE pairs (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), a int, b bigint);
	CREATE TABLE twin (id bigint NOT NULL DEFAULT snowflake.nextval(), id2 bigint NOT NULL DEFAULT snowflake.nextval(), a int)`

const (
	pairsInsert = "INSERT INTO pairs (a, b) VALUES ($1, $2) RETURNING id"
	twinInsert  = "INSERT INTO twin (a) VALUES ($1) RETURNING id"
)

func newNamedParseEnv(t *testing.T) (*testEnv, *rawSession) {
	t.Helper()
	e := newInsertEnv(t, namedParseTables)
	conn := e.connect(t, pgx.QueryExecModeCacheStatement)
	waitFastDefaults(t, conn, "pairs")
	waitFastDefaults(t, conn, "twin")
	return e, newRawSession(t, conn)
}

// refusedPrepare prepares name as sql and expects the server's 42P05.
func (r *rawSession) refusedPrepare(name, sql string) {
	r.t.Helper()
	_, err := r.pc.Prepare(context.Background(), name, sql, nil)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P05" {
		r.t.Fatalf("prepare %q again: %v, want 42P05", name, err)
	}
}

// Regression: the refused Parse replaced the proxy's record, so a later
// Bind of the name got the IDs of the refused text (two, after one
// parameter) and the server's statement stored one of them in b; one with
// the statement's own two parameters failed.
func TestRefusedNamedParseKeepsTheStatement(t *testing.T) {
	e, r := newNamedParseEnv(t)
	r.prepare("x", pairsInsert)
	first := r.mustExec("x", "1", "2")

	r.refusedPrepare("x", twinInsert)
	if _, err := r.exec("x", "7"); err == nil {
		t.Fatal("a Bind of x with one parameter ran; x takes two")
	}
	// The same, pipelined behind the refused Parse: skipped.
	codes := r.sendRaw(1, &pgproto3.Parse{Name: "x", Query: twinInsert},
		&pgproto3.Bind{PreparedStatement: "x", Parameters: [][]byte{[]byte("13")}},
		&pgproto3.Execute{}, &pgproto3.Sync{})
	if !slices.Equal(codes, []string{"42P05"}) {
		t.Fatalf("pipelined refused Parse: errors %v, want [42P05]", codes)
	}
	id := r.mustExec("x", "8", "9")
	if id <= first {
		t.Fatalf("x returned id %d after %d", id, first)
	}

	direct := e.connectDirect(t)
	if n := mustInt64(t, direct, "SELECT count(*) FROM pairs WHERE a IN (7, 13) OR b NOT IN (2, 9)"); n != 0 {
		t.Fatalf("%d rows of pairs from Binds meant for the refused text", n)
	}
	if n := mustInt64(t, direct, "SELECT count(*) FROM pairs WHERE id = $1 AND a = 8 AND b = 9", id); n != 1 {
		t.Fatal("the row of x's last execution is not (8, 9) under its id")
	}
	if n := mustInt64(t, direct, "SELECT count(*) FROM twin WHERE a IS NOT NULL"); n != 0 {
		t.Fatalf("%d rows in twin", n)
	}
}

// A refused Parse of a statement the proxy passes as it is, under the name
// of one it fills: the name keeps the INSERT and its IDs (before the fix
// the record went, and the Bind lacked the ID: 08P01).
func TestRefusedNamedParseOfAPlainStatement(t *testing.T) {
	e, r := newNamedParseEnv(t)
	r.prepare("y", pairsInsert)
	r.refusedPrepare("y", "SELECT $1::int + $2::int")
	id := r.mustExec("y", "10", "11")
	if n := mustInt64(t, e.connectDirect(t), "SELECT count(*) FROM pairs WHERE id = $1 AND a = 10 AND b = 11", id); n != 1 {
		t.Fatalf("y returned %d, not the id of the row it inserted", id)
	}
}

// A name freed (DEALLOCATE, Close) takes the new statement: its record is
// the new one, with two IDs per row.
func TestNamedParseAfterDeallocate(t *testing.T) {
	e, r := newNamedParseEnv(t)
	r.prepare("z", pairsInsert)
	r.mustExec("z", "1", "2")
	r.run("DEALLOCATE z")
	id := prepareTwin(t, e, r, "z", 12)
	if err := r.pc.Deallocate(context.Background(), "z"); err != nil {
		t.Fatal(err)
	}
	r.prepare("z", pairsInsert)
	if id2 := r.mustExec("z", "3", "4"); id2 <= id {
		t.Fatalf("z returned %d after %d", id2, id)
	}
}
