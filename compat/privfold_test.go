package compat

import (
	"fmt"
	"strings"
	"testing"
)

// The planner drops a call's privilege test only while PUBLIC may use the
// sequence (docs/state-model.md, "The privilege test"): a plan cached
// without it, a generic prepared statement's and a PL/pgSQL function's,
// is made again after a REVOKE, so that a role without privileges gets
// the extension's error and no ID; and again after the GRANT that gives
// the privilege back.
func TestPrivilegeTestFoldedOnlyWhilePublicMayUse(t *testing.T) {
	t.Parallel()
	url, c, _, oid := shimDB(t)
	mustExec(t, c, "SELECT snowflake._blocks('s', 4)")
	mustExec(t, c, "SET snowflake.node = 4")
	const call = "SELECT snowflake.nextval('s')"
	if plan := explainVerbose(t, c, call); !strings.Contains(plan, "has_sequence_privilege") {
		t.Fatalf("the plan of a sequence PUBLIC may not use has no privilege test:\n%s", plan)
	}
	mustExec(t, c, "GRANT USAGE ON SEQUENCE s TO PUBLIC")
	if plan := explainVerbose(t, c, call); strings.Contains(plan, "has_sequence_privilege") || !strings.Contains(plan, "_blk_") {
		t.Fatalf("the plan of a sequence PUBLIC may use keeps the privilege test or has no block:\n%s", plan)
	}
	mustExec(t, c, `CREATE FUNCTION draw(n integer) RETURNS bigint LANGUAGE plpgsql AS $$
		DECLARE v bigint;
		BEGIN
			FOR i IN 1..n LOOP
				v := snowflake.nextval('s');
			END LOOP;
			RETURN v;
		END $$`)

	user, userURL := testRole(t, c, url, "pubuser")
	uc := connect(t, userURL)
	mustExec(t, uc, "SET snowflake.node = 4")
	mustExec(t, uc, "SET plan_cache_mode = force_generic_plan")
	mustExec(t, uc, "PREPARE p AS SELECT max(snowflake.nextval('s')) FROM generate_series(1, 100)")
	if plan := explainVerbose(t, uc, "EXECUTE p"); strings.Contains(plan, "has_sequence_privilege") {
		t.Fatalf("%s's generic plan keeps the privilege test:\n%s", user, plan)
	}
	ids, slow := perRow(t, uc, "s", 2000)
	increasing(t, user, ids, 4)
	if slow*4 > int64(len(ids)) {
		t.Fatalf("%s: %d of 2000 calls through PUBLIC's privilege ran the slow path", user, slow)
	}
	last := queryInt(t, uc, "EXECUTE p")
	if got := queryInt(t, uc, "SELECT draw(100)"); got <= last {
		t.Fatalf("draw: %d after %d", got, last)
	}

	// Refused before drawing: B stays where it was. A plan that kept no
	// test would draw from B first, then fail in the slow path or take
	// the ID.
	mustExec(t, c, "REVOKE USAGE ON SEQUENCE s FROM PUBLIC")
	bLast := fmt.Sprintf("SELECT pg_sequence_last_value('snowflake._blk_%d_4')", oid)
	before := queryInt(t, c, bLast)
	for i := 0; i < 2; i++ {
		wantErr(t, pgErr(t, uc, "EXECUTE p"), "42501", "permission denied for sequence s")
		wantErr(t, pgErr(t, uc, "SELECT draw(100)"), "42501", "permission denied for sequence s")
	}
	if after := queryInt(t, c, bLast); after != before {
		t.Fatalf("B moved from %d to %d under calls without the privilege", before, after)
	}
	if plan := explainVerbose(t, uc, "EXECUTE p"); !strings.Contains(plan, "has_sequence_privilege") {
		t.Fatalf("%s's generic plan after the REVOKE has no privilege test:\n%s", user, plan)
	}
	// SELECT is no privilege to draw: the test stays.
	mustExec(t, c, "GRANT SELECT ON SEQUENCE s TO PUBLIC")
	wantErr(t, pgErr(t, uc, "EXECUTE p"), "42501", "permission denied for sequence s")

	// UPDATE is, as for the built-in nextval.
	mustExec(t, c, "GRANT UPDATE ON SEQUENCE s TO PUBLIC")
	if got := queryInt(t, uc, "EXECUTE p"); got <= last {
		t.Fatalf("after the GRANT: %d after %d", got, last)
	}
	if plan := explainVerbose(t, uc, "EXECUTE p"); strings.Contains(plan, "has_sequence_privilege") {
		t.Fatalf("%s's generic plan after the GRANT keeps the privilege test:\n%s", user, plan)
	}
	ids, slow = perRow(t, uc, "s", 2000)
	increasing(t, user, ids, 4)
	if slow*4 > int64(len(ids)) {
		t.Fatalf("%s: %d of 2000 calls through PUBLIC's UPDATE ran the slow path", user, slow)
	}

	// A relation that is no sequence: the extension's error, at the call,
	// not from the planner.
	mustExec(t, c, "CREATE TABLE notseq (x int)")
	wantErr(t, pgErr(t, uc, "SELECT snowflake.nextval('notseq')"), "42809", `"notseq" is not a sequence`)
	if n := queryInt(t, uc, "SELECT count(*) FROM (SELECT snowflake.nextval('notseq') FROM generate_series(1, 0)) x"); n != 0 {
		t.Fatalf("%d rows", n)
	}
}
