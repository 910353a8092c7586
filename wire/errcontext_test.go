package wire

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snowflake-proxy/snowflake-proxy/wire/pgmsg"
)

func TestShimContext(t *testing.T) {
	const (
		issue   = "PL/pgSQL function snowflake._issue(regclass,name) line 33 at RAISE"
		nextval = "PL/pgSQL function snowflake.nextval(regclass) line 6 at assignment"
		doRaise = "PL/pgSQL function inline_code_block line 1 at RAISE"
	)
	for _, c := range []struct {
		name, in string
		own      bool
		want     string
	}{
		{"top-level nextval", issue + "\n" + nextval, false, ""},
		{"nextval in the client's function", issue + "\n" + nextval + "\nPL/pgSQL function f() line 3 at RETURN",
			false, "PL/pgSQL function f() line 3 at RETURN"},
		{"nextval in a statement of the client's function",
			issue + "\n" + nextval + "\nSQL statement \"SELECT snowflake.nextval()\"\nPL/pgSQL function g() line 2 at PERFORM",
			false, "SQL statement \"SELECT snowflake.nextval()\"\nPL/pgSQL function g() line 2 at PERFORM"},
		{"inside the stand-in", "SQL statement \"SELECT pg_advisory_lock(lk)\"\nPL/pgSQL function snowflake._issue(regclass,name) line 61 at PERFORM\n" + nextval,
			false, ""},
		{"currval", "PL/pgSQL function snowflake._currval_check(regclass,bigint) line 10 at RAISE\nPL/pgSQL function _currval(regclass,bigint) line 6 at RETURN",
			false, ""},
		{"set_config", "PL/pgSQL function snowflake.set_config(text,text,boolean) line 14 at RAISE", false, ""},
		{"the proxy's DO block", doRaise, true, ""},
		{"a statement of the proxy's DO block", "SQL statement \"CREATE SCHEMA snowflake\"\nPL/pgSQL function inline_code_block line 28 at SQL statement", true, ""},
		{"the client's event trigger under the proxy's DO block",
			"PL/pgSQL function evt() line 3 at RAISE\nSQL statement \"CREATE SCHEMA snowflake\"\nPL/pgSQL function inline_code_block line 28 at SQL statement",
			true, "PL/pgSQL function evt() line 3 at RAISE"},
		// Kept: the client's own DO blocks, and functions PL/pgSQL in the
		// extension too.
		{"the client's DO block", doRaise, false, doRaise},
		{"convert", "PL/pgSQL function snowflake.convert_sequence_to_snowflake(regclass) line 18 at RAISE", false,
			"PL/pgSQL function snowflake.convert_sequence_to_snowflake(regclass) line 18 at RAISE"},
		{"an SQL function", "SQL function \"nextval\" statement 1", false, "SQL function \"nextval\" statement 1"},
		{"nextval's slow path not inlined",
			"PL/pgSQL function snowflake._issue(regclass,name) line 33 at RAISE\nPL/pgSQL function snowflake._nextval_slow(regclass) line 6 at assignment\nSQL function \"nextval\" statement 1",
			false, ""},
		{"nextval's slow path not inlined in the client's function",
			"PL/pgSQL function snowflake._nextval_slow(regclass) line 6 at assignment\nSQL function \"nextval\" statement 1\nPL/pgSQL function f() line 3 at RETURN",
			false, "PL/pgSQL function f() line 3 at RETURN"},
		{"localized", "función PL/pgSQL snowflake.nextval(regclass) en la línea 6 en asignación", false, ""},
	} {
		got, changed := shimContext(c.in, c.own)
		if got != c.want || changed != (c.in != c.want) {
			t.Errorf("%s: got %q (changed %v), want %q", c.name, got, changed, c.want)
		}
	}
}

func TestWithoutShimContext(t *testing.T) {
	e := &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "F0000",
		Message: "value for snowflake.node is not set",
		Where:   "PL/pgSQL function snowflake._issue(regclass,name) line 33 at RAISE\nPL/pgSQL function snowflake.nextval(regclass) line 6 at assignment",
		File:    "pl_exec.c", Line: 3905, Routine: "exec_stmt_raise"}
	b, _ := e.Encode(nil)
	fixed, ok := withoutShimContext(mustFields(t, b[5:]), false)
	if !ok {
		t.Fatal("unchanged")
	}
	var got pgproto3.ErrorResponse
	if err := got.Decode(fixed); err != nil {
		t.Fatal(err)
	}
	want := *e
	want.Where = ""
	if got.Where != "" || got.Message != want.Message || got.Code != want.Code || got.File != want.File ||
		got.Line != want.Line || got.Routine != want.Routine || got.Severity != want.Severity {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, ok := withoutShimContext(mustFields(t, b[5:]), false); !ok {
		t.Fatal("the body was changed in place")
	}
	plain := &pgproto3.ErrorResponse{Severity: "ERROR", Code: "42601", Message: "syntax error", Where: "PL/pgSQL function f() line 1"}
	b, _ = plain.Encode(nil)
	if _, ok := withoutShimContext(mustFields(t, b[5:]), false); ok {
		t.Fatal("changed an error without shim frames")
	}
}

// mustFields reads the fields of an ErrorResponse body pgproto3 encoded.
func mustFields(t *testing.T, body []byte) pgmsg.Fields {
	t.Helper()
	f, ok := pgmsg.ReadFields(body)
	if !ok {
		t.Fatalf("malformed ErrorResponse body % x", body)
	}
	return f
}
