package tests

import (
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Messages that drop or replace a statement (Close, DEALLOCATE, DEALLOCATE
// ALL, a Parse of the unnamed statement) change nothing when the server
// skips them after an earlier error, or when the statement that holds them
// fails first. The proxy changes its records when the server has answered,
// as it does for named Parses (wire/namedparse.go).

// badParse is a Parse the server refuses with 42601, which makes it skip
// the messages that follow until Sync.
var badParse = &pgproto3.Parse{Name: "bad", Query: "SELEC 1"}

// prepareTwin prepares name as twinInsert, executes it with a and checks
// that the row it made has two IDs: the name's record is the new one.
func prepareTwin(t *testing.T, e *testEnv, r *rawSession, name string, a int) int64 {
	t.Helper()
	r.prepare(name, twinInsert)
	id := r.mustExec(name, strconv.Itoa(a))
	if n := mustInt64(t, e.connectDirect(t), "SELECT count(*) FROM twin WHERE id = $1 AND a = $2 AND id2 <> id", id, a); n != 1 {
		t.Fatalf("%s returned %d, not the id of a twin row with two IDs", name, id)
	}
	return id
}

// pairsRow counts the rows of pairs holding (a, b).
func pairsRow(t *testing.T, e *testEnv, a, b int) int64 {
	t.Helper()
	return mustInt64(t, e.connectDirect(t), "SELECT count(*) FROM pairs WHERE a = $1 AND b = $2 AND id IS NOT NULL", a, b)
}

// Regression: a Close skipped after an error dropped the record of x,
// which the server kept, and the next Bind of x lacked its ID (08P01).
func TestSkippedCloseKeepsTheStatement(t *testing.T) {
	e, r := newNamedParseEnv(t)
	r.prepare("x", pairsInsert)
	r.mustExec("x", "1", "2")
	codes := r.sendRaw(1, badParse, &pgproto3.Close{ObjectType: 'S', Name: "x"}, &pgproto3.Sync{})
	if !slices.Equal(codes, []string{"42601"}) {
		t.Fatalf("errors %v, want [42601]", codes)
	}
	r.mustExec("x", "3", "4")
	if pairsRow(t, e, 3, 4) != 1 {
		t.Fatal("x's execution after the skipped Close stored no (3, 4)")
	}
	// A Close that runs still frees the name for another statement.
	codes = r.sendRaw(1, &pgproto3.Close{ObjectType: 'S', Name: "x"}, &pgproto3.Sync{})
	if len(codes) != 0 {
		t.Fatalf("Close of x: errors %v", codes)
	}
	prepareTwin(t, e, r, "x", 5)
}

// Regression: DEALLOCATE in a Query whose earlier statement failed, or in
// an Execute skipped after an error, dropped the record of a statement the
// server kept (08P01 at its next Bind).
func TestDeallocateThatDidNotRunKeepsTheStatement(t *testing.T) {
	e, r := newNamedParseEnv(t)
	r.prepare("z", pairsInsert)
	for i, send := range []func() []string{
		func() []string { return r.sendRaw(1, &pgproto3.Query{String: "SELECT 1/0; DEALLOCATE z"}) },
		func() []string { return r.sendRaw(1, &pgproto3.Query{String: "SELECT 1/0; DEALLOCATE ALL"}) },
		func() []string {
			return r.sendRaw(3, &pgproto3.Query{String: "BEGIN; SELECT 1/0"}, &pgproto3.Query{String: "DISCARD ALL"},
				&pgproto3.Query{String: "ROLLBACK"})
		},
		func() []string {
			return r.sendRaw(1, badParse, &pgproto3.Parse{Query: "DEALLOCATE z"}, &pgproto3.Bind{},
				&pgproto3.Execute{}, &pgproto3.Sync{})
		},
	} {
		codes := send()
		if len(codes) == 0 {
			t.Fatalf("case %d: no error", i)
		}
		r.mustExec("z", "10", strconv.Itoa(10+i))
		if pairsRow(t, e, 10, 10+i) != 1 {
			t.Fatalf("case %d: z's execution stored no (10, %d)", i, 10+i)
		}
	}
}

// A DEALLOCATE that ran in a Query that failed afterwards dropped the
// statement (prepared statements are not transactional). Regression
// (found by FuzzPipelineMatchesServer): the proxy kept its record, and an
// execution that left its ID to the server ran through the fallback
// statement, which the server still had, instead of failing with 26000.
func TestDeallocateBeforeAnErrorFreesTheName(t *testing.T) {
	e, r := newNamedParseEnv(t)
	e.execDirect(t, "CREATE SEQUENCE other") // for beginLeftToTheShim
	r.prepare("w", pairsInsert)
	r.run(beginLeftToTheShim)
	r.mustExec("w", "1", "2") // prepares its fallback statement
	r.run("COMMIT")
	if codes := r.sendRaw(1, &pgproto3.Query{String: "DEALLOCATE w; SELECT 1/0"}); !slices.Equal(codes, []string{"22012"}) {
		t.Fatalf("errors %v, want [22012]", codes)
	}
	r.run(beginLeftToTheShim)
	_, err := r.exec("w", "3", "4")
	r.run("ROLLBACK")
	if code := sqlState(err); code != "26000" {
		t.Fatalf("w executed after its DEALLOCATE, left to the server: %v, want 26000", err)
	}
	if _, err := r.exec("w", "5", "6"); sqlState(err) != "26000" {
		t.Fatalf("w executed after its DEALLOCATE: %v, want 26000", err)
	}
	prepareTwin(t, e, r, "w", 20)
}

// Regression: a Parse of the unnamed statement skipped after an error
// replaced the proxy's record while the server kept its statement: the
// next Bind of it got the refused text's two IDs (08P01). One the server
// ran and refused drops the unnamed statement, as PostgreSQL does first.
func TestSkippedUnnamedParseKeepsTheStatement(t *testing.T) {
	e, r := newNamedParseEnv(t)
	bindPairs := func(a, b string) []string {
		return r.sendRaw(1, &pgproto3.Bind{Parameters: [][]byte{[]byte(a), []byte(b)}}, &pgproto3.Execute{}, &pgproto3.Sync{})
	}
	if codes := r.sendRaw(1, &pgproto3.Parse{Query: pairsInsert}, &pgproto3.Sync{}); len(codes) != 0 {
		t.Fatalf("Parse: errors %v", codes)
	}
	if codes := r.sendRaw(1, badParse, &pgproto3.Parse{Query: twinInsert}, &pgproto3.Sync{}); !slices.Equal(codes, []string{"42601"}) {
		t.Fatalf("skipped Parse: errors %v, want [42601]", codes)
	}
	if codes := bindPairs("30", "31"); len(codes) != 0 {
		t.Fatalf("Bind after the skipped Parse: errors %v", codes)
	}
	if codes := r.sendRaw(1, badParse, &pgproto3.Close{ObjectType: 'S'}, &pgproto3.Sync{}); !slices.Equal(codes, []string{"42601"}) {
		t.Fatalf("skipped Close: errors %v, want [42601]", codes)
	}
	if codes := bindPairs("32", "33"); len(codes) != 0 {
		t.Fatalf("Bind after the skipped Close: errors %v", codes)
	}
	if pairsRow(t, e, 30, 31) != 1 || pairsRow(t, e, 32, 33) != 1 {
		t.Fatal("the unnamed statement's executions did not store their rows")
	}
	// Run and refused: the server has no unnamed statement left.
	if codes := r.sendRaw(1, &pgproto3.Parse{Query: "SELEC 2"}, &pgproto3.Sync{}); !slices.Equal(codes, []string{"42601"}) {
		t.Fatalf("refused Parse: errors %v, want [42601]", codes)
	}
	if codes := bindPairs("34", "35"); !slices.Equal(codes, []string{"26000"}) {
		t.Fatalf("Bind after the refused unnamed Parse: errors %v, want [26000]", codes)
	}
}

// Regression (found by FuzzPipelineMatchesServer): in an aborted
// transaction a Bind with the wrong number of parameters got 25P02, from
// the fallback statement's Parse the proxy sent first, where the server
// alone answers 08P01.
func TestBindInAnAbortedTransactionAnswersAsTheServer(t *testing.T) {
	_, r := newNamedParseEnv(t)
	r.prepare("a", pairsInsert)
	r.mustExec("a", "1", "2")
	if codes := r.sendRaw(1, &pgproto3.Query{String: "BEGIN; SELECT 1/0"}); !slices.Equal(codes, []string{"22012"}) {
		t.Fatalf("errors %v, want [22012]", codes)
	}
	if _, err := r.exec("a", "3"); sqlState(err) != "08P01" {
		t.Fatalf("Bind of one parameter in the aborted transaction: %v, want 08P01", err)
	}
	if _, err := r.exec("a", "3", "4"); sqlState(err) != "25P02" {
		t.Fatalf("Bind in the aborted transaction: %v, want 25P02", err)
	}
	r.run("ROLLBACK")
	r.mustExec("a", "5", "6")
}

// Regression (found in review): a statement closed or deallocated, whose
// name the client never used again (pgjdbc's S_1, S_2...), kept its
// record and its fallback statement's name for the life of the session,
// and each new statement prepared another fallback statement on the
// server.
func TestClosedStatementsGiveBackTheirFallbackStatement(t *testing.T) {
	_, conn := newFallbackEnv(t)
	r := newRawSession(t, conn)
	for i := range 6 {
		name := "s_" + strconv.Itoa(i)
		r.prepare(name, looseInsert)
		r.run(beginLeftToTheShim)
		r.mustExec(name, "payload "+name)
		r.run("COMMIT")
		if i%2 == 0 {
			if codes := r.sendRaw(1, &pgproto3.Close{ObjectType: 'S', Name: name}, &pgproto3.Sync{}); len(codes) != 0 {
				t.Fatalf("Close %s: errors %v", name, codes)
			}
		} else {
			r.run("DEALLOCATE " + name)
		}
	}
	if _, fallback := preparedTexts(t, conn); len(fallback) != 1 {
		t.Fatalf("%d fallback statements after 6 statements closed in turn, want 1", len(fallback))
	}
}

// A Query sent after an error and before Sync is skipped by the server
// with the rest (no answer at all, not even ReadyForQuery). The proxy
// took the Sync's ReadyForQuery for the Query's, so the answers of every
// later message were matched to the messages before them (command tags,
// errors, hidden responses).
func TestQuerySkippedBeforeSync(t *testing.T) {
	e, r := newNamedParseEnv(t)
	r.prepare("a", pairsInsert)
	r.sendRaw(1, &pgproto3.Parse{Query: twinInsert}, &pgproto3.Sync{})
	direct := directSession(t, e)
	direct.prepare("a", pairsInsert)
	direct.sendRaw(1, &pgproto3.Parse{Query: twinInsert}, &pgproto3.Sync{})
	pipeline := []pgproto3.FrontendMessage{badParse, &pgproto3.Query{String: "DEALLOCATE a"}, &pgproto3.Sync{}}
	sameAnswers(t, "the skipped Query", r.pc, direct.pc, [][]pgproto3.FrontendMessage{pipeline})
	after := [][]pgproto3.FrontendMessage{
		{&pgproto3.Query{String: "SET snowflake.node = 3"}}, // renamed from DO
		{&pgproto3.Bind{PreparedStatement: "a", Parameters: [][]byte{[]byte("1"), []byte("2")}}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		{&pgproto3.Bind{Parameters: [][]byte{[]byte("3")}}, &pgproto3.Execute{}, &pgproto3.Sync{}},
	}
	sameAnswers(t, "after the skipped Query", r.pc, direct.pc, after)
}

// A Query the proxy answers itself destroys, for the client, the unnamed
// statement and portal, which the server still has. Regression: a later
// Bind of the unnamed statement (with no record of the proxy's: a
// statement passed as it is) or Execute of the unnamed portal ran the
// server's, where PostgreSQL answers 26000 or 34000.
func TestLocalAnswerLeavesNoUnnamedStatement(t *testing.T) {
	e, r := newNamedParseEnv(t)
	direct := directSession(t, e)
	local := &pgproto3.Query{String: "SELECT snowflake.nextval() AS id"}
	for _, c := range []struct {
		name      string
		before    []pgproto3.FrontendMessage
		afterward []pgproto3.FrontendMessage
	}{
		{"statement", []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "INSERT INTO pairs (a) VALUES ($1::int) RETURNING a"}, &pgproto3.Sync{}},
			[]pgproto3.FrontendMessage{&pgproto3.Bind{Parameters: [][]byte{[]byte("41")}}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
		{"portal", []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}, &pgproto3.Parse{Query: "SELECT generate_series(1, 3)"},
			&pgproto3.Bind{}, &pgproto3.Execute{MaxRows: 1}, &pgproto3.Sync{}},
			[]pgproto3.FrontendMessage{&pgproto3.Execute{}, &pgproto3.Sync{}, &pgproto3.Query{String: "ROLLBACK"}}},
	} {
		sameAnswers(t, c.name, r.pc, direct.pc, [][]pgproto3.FrontendMessage{c.before, {local}, c.afterward})
	}
	if n := mustInt64(t, e.connectDirect(t), "SELECT count(*) FROM pairs WHERE a = 41"); n != 0 {
		t.Fatalf("%d rows from a Bind of a statement the client no longer had", n)
	}
}

// Regressions (found in review of the skip to Sync): a client's INSERT
// Query the proxy sends prepared (Parse, Bind, Execute, Sync) whose Bind
// fails made the proxy skip the answers owed for the messages behind it
// too; and a Query skipped after an error let the next Query be answered
// by the proxy over the unnamed statement the server still had.
func TestSkipToSyncStopsAtTheRightSync(t *testing.T) {
	e, r := newNamedParseEnv(t)
	direct := directSession(t, e)
	badInsert := &pgproto3.Query{String: "INSERT INTO pairs (a) VALUES ('x'::int)"}
	for _, c := range []struct {
		name   string
		groups [][]pgproto3.FrontendMessage
	}{
		{"prepared INSERT", [][]pgproto3.FrontendMessage{
			{badInsert},
			{badInsert, &pgproto3.Query{String: "SET snowflake.node = 3"}},
			{&pgproto3.Parse{Name: "p", Query: pairsInsert}, &pgproto3.Sync{}},
			{&pgproto3.Bind{PreparedStatement: "p", Parameters: [][]byte{[]byte("1"), []byte("2")}}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		}},
		{"skipped Query", [][]pgproto3.FrontendMessage{
			{&pgproto3.Parse{Query: "SELECT $1::int"}, &pgproto3.Sync{}},
			{badParse, &pgproto3.Query{String: "SELECT 1"}, &pgproto3.Sync{}},
			{&pgproto3.Query{String: "SELECT snowflake.nextval() AS id"}},
			{&pgproto3.Bind{Parameters: [][]byte{[]byte("41")}}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		}},
	} {
		sameAnswers(t, c.name, r.pc, direct.pc, c.groups)
	}
}

// Regression (review): in a transaction block the proxy answered a Bind,
// Describe, Execute, Sync of a locally answered statement itself, which
// leaves the client a finished unnamed portal the server never had. A
// later Describe or Execute of it got 34000 and aborted the transaction,
// where PostgreSQL describes it and answers SELECT 0.
func TestLocalAnswerInATransactionLeavesThePortal(t *testing.T) {
	e, r := newNamedParseEnv(t)
	direct := directSession(t, e)
	run := []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "n"}, &pgproto3.Describe{ObjectType: 'P'},
		&pgproto3.Execute{}, &pgproto3.Sync{}}
	sameAnswers(t, "finished portal", r.pc, direct.pc, [][]pgproto3.FrontendMessage{
		{&pgproto3.Parse{Name: "n", Query: "SELECT snowflake.nextval() AS id"}, &pgproto3.Describe{ObjectType: 'S', Name: "n"}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: "BEGIN"}},
		run, run,
		{&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: "COMMIT"}},
	})
}

// Regression (left in the notes of the records' rework): a Bind or
// Describe sent behind the Sync of a change the server then refused or
// skipped, before its answer reached the proxy, was rendered for the
// change: a refused Parse of a name the server had made the proxy bind
// IDs for another table's statement, and a skipped Close or a DEALLOCATE
// that did not run made it leave out the statement's ID (08P01). The
// proxy now waits for the answer to such a change.
func TestPipelinedBindAfterARefusedChange(t *testing.T) {
	e, r := newNamedParseEnv(t)
	direct := directSession(t, e)
	bind := func(name string, params ...string) []pgproto3.FrontendMessage {
		b := &pgproto3.Bind{PreparedStatement: name}
		for _, v := range params {
			b.Parameters = append(b.Parameters, []byte(v))
		}
		return []pgproto3.FrontendMessage{b, &pgproto3.Execute{}, &pgproto3.Sync{}}
	}
	parse := func(name, sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Name: name, Query: sql}, &pgproto3.Sync{}}
	}
	for _, c := range []struct {
		name   string
		groups [][]pgproto3.FrontendMessage
	}{
		{"Parse of a name the server has", [][]pgproto3.FrontendMessage{
			parse("r1", pairsInsert), parse("r1", twinInsert), bind("r1", "11"), bind("r1", "12", "13"),
			{&pgproto3.Describe{ObjectType: 'S', Name: "r1"}, &pgproto3.Sync{}}}},
		{"skipped Close", [][]pgproto3.FrontendMessage{
			parse("r2", pairsInsert), {badParse, &pgproto3.Close{ObjectType: 'S', Name: "r2"}, &pgproto3.Sync{}},
			bind("r2", "21", "22")}},
		{"DEALLOCATE behind an error", [][]pgproto3.FrontendMessage{
			parse("r3", pairsInsert), {&pgproto3.Query{String: "SELECT 1/0; DEALLOCATE r3"}}, bind("r3", "31", "32")}},
		// No wait here: the server skips the Query with its group, and
		// answers nothing before the Sync that follows the Bind.
		{"DEALLOCATE skipped with its group", [][]pgproto3.FrontendMessage{
			parse("r5", pairsInsert), append([]pgproto3.FrontendMessage{badParse, &pgproto3.Query{String: "DEALLOCATE r5"}},
				bind("r5", "51", "52")...), bind("r5", "53", "54")}},
		{"skipped Parse of the unnamed statement", [][]pgproto3.FrontendMessage{
			parse("", pairsInsert), {badParse, &pgproto3.Parse{Query: twinInsert}, &pgproto3.Sync{}},
			bind("", "41", "42"), bind("", "43")}},
	} {
		t.Run(c.name, func(t *testing.T) { sameAnswersSent(t, c.name, r.pc, direct.pc, c.groups, true) })
	}
	// Both sessions write to the same tables.
	for _, ab := range [][2]int{{12, 13}, {21, 22}, {31, 32}, {53, 54}, {41, 42}} {
		if n := pairsRow(t, e, ab[0], ab[1]); n != 2 {
			t.Errorf("%d rows (%d, %d) in pairs, want one from each session", n, ab[0], ab[1])
		}
	}
	if n := mustInt64(t, e.connectDirect(t), "SELECT count(*) FROM twin WHERE a IS NOT NULL"); n != 0 {
		t.Errorf("%d rows in twin, whose statements the server refused", n)
	}
}

// Regression (review of the wait above): a Bind group the proxy answered
// itself took its Sync without counting it, so the Query after it was
// counted in that group and a Bind behind the Query's DEALLOCATE that
// did not run was rendered without the statement's ID again.
func TestPipelinedBindAfterALocalAnswer(t *testing.T) {
	e, r := newNamedParseEnv(t)
	direct := directSession(t, e)
	local := []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "n"}, &pgproto3.Execute{}, &pgproto3.Sync{}}
	sameAnswers(t, "setup", r.pc, direct.pc, [][]pgproto3.FrontendMessage{
		{&pgproto3.Parse{Name: "r7", Query: pairsInsert}, &pgproto3.Sync{}},
		{&pgproto3.Parse{Name: "n", Query: "SELECT snowflake.nextval() AS id"}, &pgproto3.Sync{}},
		local, local,
	})
	bindBehindADeallocateThatFails(t, e, r, direct, "r7", 71, 72)
}

// Regression (review): an extended message followed by a Query without a
// Sync left the session counted as in an extended group for good: no
// later Query ended a group, and a Bind behind a DEALLOCATE that did not
// run was rendered without the statement's ID again.
func TestPipelinedBindAfterAQueryWithoutSync(t *testing.T) {
	e, r := newNamedParseEnv(t)
	direct := directSession(t, e)
	sameAnswers(t, "setup", r.pc, direct.pc, [][]pgproto3.FrontendMessage{
		{&pgproto3.Parse{Name: "r8", Query: pairsInsert}, &pgproto3.Sync{}},
		{&pgproto3.Parse{Name: "x", Query: "SELECT 1"}, &pgproto3.Query{String: "SELECT 2"}},
	})
	bindBehindADeallocateThatFails(t, e, r, direct, "r8", 81, 82)
}

// bindBehindADeallocateThatFails sends, through the proxy (r) and to the
// server alone, a Query whose DEALLOCATE of name does not run and, behind
// it before its answer, a Bind of name with (a, b): the same answers and
// a row from each session.
func bindBehindADeallocateThatFails(t *testing.T, e *testEnv, r, direct *rawSession, name string, a, b int) {
	t.Helper()
	sameAnswersSent(t, "DEALLOCATE that fails, then a Bind", r.pc, direct.pc, [][]pgproto3.FrontendMessage{
		{&pgproto3.Query{String: "SELECT 1/0; DEALLOCATE " + name}},
		{&pgproto3.Bind{PreparedStatement: name, Parameters: [][]byte{[]byte(strconv.Itoa(a)), []byte(strconv.Itoa(b))}},
			&pgproto3.Execute{}, &pgproto3.Sync{}},
	}, true)
	if n := pairsRow(t, e, a, b); n != 2 {
		t.Errorf("%d rows (%d, %d) in pairs, want one from each session", n, a, b)
	}
}
