package compat

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/generator"
	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

// future is an ms far enough ahead that "now" is behind it for the test.
func future() int64 { return time.Now().UnixMilli() - generator.EpochUnixMs + 3_600_000 }

func TestNextvalRule(t *testing.T) {
	c := connect(t, newDB(t))
	install(t, c)
	mustExec(t, c, "SET snowflake.node = 7")

	// Now is ahead of the last ID: (now, 0) with our node.
	before := time.Now().UnixMilli() - generator.EpochUnixMs
	id := queryInt(t, c, "SELECT snowflake.nextval()")
	after := time.Now().UnixMilli() - generator.EpochUnixMs
	ms, node, count := generator.Decompose(id)
	if ms < before || ms > after || node != 7 || count != 0 {
		t.Fatalf("first id %d = (%d, %d, %d), want ms in [%d, %d], node 7, count 0", id, ms, node, count, before, after)
	}

	cases := []struct {
		inc   int64
		start int // count of the stored last ID
		want  func(ms int64) []int64
	}{
		{1, 5, func(ms int64) []int64 { return []int64{compose(ms, 7, 6), compose(ms, 7, 7)} }},
		{100, 5, func(ms int64) []int64 { return []int64{compose(ms, 7, 105), compose(ms, 7, 205)} }},
		{1, 4094, func(ms int64) []int64 { return []int64{compose(ms, 7, 4095), compose(ms+1, 7, 0), compose(ms+1, 7, 1)} }},
		{4096, 0, func(ms int64) []int64 { return []int64{compose(ms+1, 7, 0), compose(ms+2, 7, 0)} }},
		{9999, 17, func(ms int64) []int64 { return []int64{compose(ms+1, 7, 0), compose(ms+2, 7, 0)} }},
	}
	for i, tc := range cases {
		seq := fmt.Sprintf("s%d", i)
		// MAXVALUE is not enforced by the rule: a small one on a bigint
		// sequence is fine as long as setval can store the ID.
		mustExec(t, c, fmt.Sprintf("CREATE SEQUENCE %s INCREMENT %d", seq, tc.inc))
		f := future()
		// The stored ID may carry another node's bits: only ms and count matter.
		mustExec(t, c, "SELECT setval($1::regclass, $2)", seq, compose(f, 3, tc.start))
		for j, w := range tc.want(f) {
			got := queryInt(t, c, "SELECT snowflake.nextval($1::regclass)", seq)
			if got != w {
				gm, gn, gc := generator.Decompose(got)
				wm, wn, wc := generator.Decompose(w)
				t.Fatalf("inc %d call %d: got (%d,%d,%d) want (%d,%d,%d)", tc.inc, j, gm-f, gn, gc, wm-f, wn, wc)
			}
			if lv := queryInt(t, c, "SELECT last_value FROM "+seq); lv != got {
				t.Fatalf("last_value %d, want %d", lv, got)
			}
		}
	}

	// 4096 IDs per ms and per sequence, then the ms runs ahead; strictly
	// increasing throughout.
	mustExec(t, c, "CREATE SEQUENCE burst")
	f := future()
	mustExec(t, c, "SELECT setval('burst', $1)", compose(f, 7, 0))
	rows, err := c.Query(ctxT(t), "SELECT snowflake.nextval('burst') FROM generate_series(1, 8192)")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var v int64
		rows.Scan(&v)
		ids = append(ids, v)
	}
	rows.Close()
	for i, v := range ids {
		n := int64(i + 1)
		if want := compose(f+n/4096, 7, int(n%4096)); v != want {
			t.Fatalf("burst %d: got %d want %d", i, v, want)
		}
	}
}

func TestDecoding(t *testing.T) {
	c := connect(t, newDB(t))
	install(t, c)
	// 2024-01-11 18:08:59.845 UTC = Unix ms 1704996539845.
	id := compose(1704996539845-generator.EpochUnixMs, 7, 5)
	var epoch, format string
	var node, count int32
	mustExec(t, c, "SET TimeZone = 'UTC'")
	err := c.QueryRow(ctxT(t), "SELECT snowflake.get_epoch($1)::text, snowflake.get_node($1), snowflake.get_count($1), snowflake.format($1)::text", id).
		Scan(&epoch, &node, &count, &format)
	if err != nil {
		t.Fatal(err)
	}
	if epoch != "1704996539.845" || node != 7 || count != 5 || format != `{"id": 7, "ts": "2024-01-11 18:08:59.845+00", "count": 5}` {
		t.Fatalf("got %s %d %d %s", epoch, node, count, format)
	}
	// ts follows TimeZone and DateStyle; a whole second keeps 3 decimals.
	mustExec(t, c, "SET TimeZone = 'America/New_York'")
	mustExec(t, c, "SET DateStyle = 'SQL, DMY'")
	id2 := compose(1704996539000-generator.EpochUnixMs, 1, 0)
	c.QueryRow(ctxT(t), "SELECT snowflake.format($1)::text, snowflake.get_epoch($2)::text", id, id2).Scan(&format, &epoch)
	if format != `{"id": 7, "ts": "11/01/2024 13:08:59.845 EST", "count": 5}` || epoch != "1704996539.000" {
		t.Fatalf("got %s %s", format, epoch)
	}
	var ts string
	c.QueryRow(ctxT(t), "SELECT to_timestamp(snowflake.get_epoch($1))::text", id).Scan(&ts)
	if ts != "11/01/2024 13:08:59.845 EST" {
		t.Fatalf("to_timestamp: %s", ts)
	}
}

func TestCurrval(t *testing.T) {
	c := connect(t, newDB(t))
	install(t, c)
	mustExec(t, c, "SET snowflake.node = 4")
	mustExec(t, c, "CREATE SEQUENCE s")
	wantErr(t, pgErr(t, c, "SELECT snowflake.currval()"), "55000", `currval of sequence "id_seq" is not yet defined in this session`)
	wantErr(t, pgErr(t, c, "SELECT snowflake.currval('s')"), "55000", `currval of sequence "s" is not yet defined in this session`)
	wantErr(t, pgErr(t, c, "SELECT snowflake._currval('s', NULL)"), "55000", `currval of sequence "s" is not yet defined in this session`)
	if v := queryInt(t, c, "SELECT snowflake._currval('s', 42)"); v != 42 {
		t.Fatalf("_currval hint: %d", v)
	}
	id := queryInt(t, c, "SELECT snowflake.nextval('s')")
	if v := queryInt(t, c, "SELECT snowflake.currval('s')"); v != id {
		t.Fatalf("currval %d want %d", v, id)
	}
	if v := queryInt(t, c, "SELECT snowflake._currval('s', NULL)"); v != id {
		t.Fatalf("_currval %d want %d", v, id)
	}
	if v := queryInt(t, c, "SELECT snowflake._currval('s', $1)", id+1); v != id+1 {
		t.Fatalf("_currval with a later hint %d", v)
	}
	if v := queryInt(t, c, "SELECT snowflake._currval('s', 1)"); v != id {
		t.Fatalf("_currval with an older hint %d", v)
	}
	// Other sequences are independent.
	wantErr(t, pgErr(t, c, "SELECT snowflake.currval()"), "55000", `currval of sequence "id_seq" is not yet defined in this session`)
	// Another session has none.
	c2 := connect(t, c.Config().ConnString())
	wantErr(t, pgErr(t, c2, "SELECT snowflake.currval('s')"), "55000", `currval of sequence "s" is not yet defined in this session`)
}

func TestNextvalErrors(t *testing.T) {
	url := newDB(t)
	c := connect(t, url)
	install(t, c)
	mustExec(t, c, "CREATE TABLE tab (x int)")
	mustExec(t, c, "CREATE SEQUENCE secret")
	mustExec(t, c, "CREATE SEQUENCE usable")
	mustExec(t, c, "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sf_nobody') THEN CREATE ROLE sf_nobody LOGIN; END IF; END$$")
	mustExec(t, c, "GRANT USAGE ON SEQUENCE usable TO sf_nobody")

	wantErr(t, pgErr(t, c, "SELECT snowflake.nextval('tab')"), "42809", `"tab" is not a sequence`)
	wantErr(t, pgErr(t, c, "SELECT snowflake.currval('tab')"), "42809", `"tab" is not a sequence`)
	mustExec(t, c, "RESET snowflake.node")
	wantErr(t, pgErr(t, c, "SELECT snowflake.nextval()"), "F0000", "value for snowflake.node is not set")
	mustExec(t, c, "SET snowflake.node = 0")
	wantErr(t, pgErr(t, c, "SELECT snowflake.nextval()"), "F0000", "value for snowflake.node is not set")
	mustExec(t, c, "SET snowflake.node = 9")

	mustExec(t, c, "BEGIN READ ONLY")
	wantErr(t, pgErr(t, c, "SELECT snowflake.nextval()"), "25006", "cannot execute nextval() in a read-only transaction")
	mustExec(t, c, "ROLLBACK")

	mustExec(t, c, "SET ROLE sf_nobody")
	wantErr(t, pgErr(t, c, "SELECT snowflake.nextval('secret')"), "42501", "permission denied for sequence secret")
	wantErr(t, pgErr(t, c, "SELECT snowflake.currval('secret')"), "42501", "permission denied for sequence secret")
	// Privilege before read-only, as the built-in nextval.
	mustExec(t, c, "BEGIN READ ONLY")
	wantErr(t, pgErr(t, c, "SELECT snowflake.nextval('secret')"), "42501", "permission denied for sequence secret")
	mustExec(t, c, "ROLLBACK")
	// USAGE is enough, as with the built-in nextval, though writing the
	// state needs more: the SECURITY DEFINER half does that.
	id := queryInt(t, c, "SELECT snowflake.nextval('usable')")
	if v := queryInt(t, c, "SELECT snowflake.currval('usable')"); v != id {
		t.Fatalf("currval %d want %d", v, id)
	}
	mustExec(t, c, "RESET ROLE")

	// The internal functions grant nothing by themselves to a session that
	// logged in without the privilege.
	cfg := c.Config().Copy()
	cfg.User = "sf_nobody"
	nb := connectConfig(t, cfg)
	mustExec(t, nb, "SET snowflake.node = 9")
	wantErr(t, pgErr(t, nb, "SELECT snowflake._issue('secret', 'postgres')"), "42501", "permission denied for sequence secret")
	wantErr(t, pgErr(t, nb, "SELECT * FROM snowflake._lease('secret', 1, 0, 0, 0)"), "42501", "permission denied for function _lease")
	queryInt(t, nb, "SELECT snowflake.nextval('usable')")
}

func TestShimConcurrency(t *testing.T) {
	url := newDB(t)
	c := connect(t, url)
	install(t, c)
	mustExec(t, c, "CREATE SEQUENCE s")
	const workers, per = 8, 2000
	results := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wc := connect(t, url)
		mustExec(t, wc, "SET snowflake.node = 11")
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				var v int64
				if err := wc.QueryRow(context.Background(), "SELECT snowflake.nextval('s')").Scan(&v); err != nil {
					t.Error(err)
					return
				}
				results[w] = append(results[w], v)
			}
		}(w)
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, r := range results {
		for i, v := range r {
			if seen[v] {
				t.Fatalf("duplicate %d", v)
			}
			seen[v] = true
			if i > 0 && v <= r[i-1] {
				t.Fatalf("not increasing in one session: %d after %d", v, r[i-1])
			}
		}
	}
	if len(seen) != workers*per {
		t.Fatalf("%d ids", len(seen))
	}
	if locks := queryInt(t, c, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"); locks != 0 {
		t.Fatalf("%d advisory locks left", locks)
	}
}

// A statement timeout or a cancel must never leave the shim's lock behind:
// the next nextval of any session, and every lease, would wait for it.
// The lock's subtransaction is rolled back wherever the call stops.
func TestNoLockLeftOnCancel(t *testing.T) {
	for _, window := range []bool{false, true} {
		t.Run(fmt.Sprintf("window=%v", window), func(t *testing.T) {
			t.Parallel()
			url, c, db, oid := shimDB(t)
			if window {
				// As after an update from the advisory lock's shim.
				mustExec(t, c, "SELECT setval('snowflake._lock_window_open', 1)")
			} else {
				closeLockWindow(t, c)
			}
			mustExec(t, c, "SET snowflake.node = 1")
			victim := connect(t, url)
			mustExec(t, victim, "SET snowflake.node = 1")
			vpid := queryInt(t, victim, "SELECT pg_backend_pid()")
			st := leaseStore(t, url)
			// Nothing left: another session's call and a lease go through,
			// and the victim holds no lock.
			free := func(what string) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				var id int64
				if err := c.QueryRow(ctx, "SELECT snowflake.nextval('s')").Scan(&id); err != nil {
					t.Fatalf("%s: nextval of another session: %v", what, err)
				}
				if _, err := st.Lease(ctx, generator.Key{Database: db, Seq: oid, Node: 1}, 0, 1, 0); err != nil {
					t.Fatalf("%s: lease: %v", what, err)
				}
				if n := queryInt(t, c, "SELECT count(*) FROM pg_locks WHERE pid = $1", vpid); n != 0 {
					t.Fatalf("%s: the victim holds %d locks", what, n)
				}
			}

			// 1. Cancelled while waiting for the lock.
			end := holdSlot(t, url, oid)
			mustExec(t, victim, "SET statement_timeout = '100ms'")
			wantErr(t, pgErr(t, victim, "SELECT snowflake.nextval('s')"), "57014", "canceling statement due to statement timeout")
			end(false)
			free("cancelled while waiting")

			// 2. Cancelled at arbitrary points of a long run of calls, many
			// times.
			for i := 0; i < 20; i++ {
				mustExec(t, victim, fmt.Sprintf("SET statement_timeout = '%dms'", 20+i*7))
				pe := pgErr(t, victim, "SELECT count(snowflake.nextval('s')) FROM generate_series(1, 10000000)")
				if pe.Code != "57014" {
					t.Fatalf("got %s %s", pe.Code, pe.Message)
				}
				free(fmt.Sprintf("run %d", i))
			}
			mustExec(t, victim, "RESET statement_timeout")
			queryInt(t, victim, "SELECT snowflake.nextval('s')")
		})
	}
}

// The default sequence's privileges are the extension's: PUBLIC may use
// snowflake.id_seq (nextval, currval), not read or write it. The shim used
// to grant PUBLIC UPDATE and SELECT on it too, so that any role could
// setval it into the past, or call _release for it and take a node's lease
// top back while that node's proxy still issued from the lease: shim IDs
// inside the proxy's lease, issued twice (regression). An update takes the
// old grants back.
func TestDefaultSequenceOnlyUsableByPublic(t *testing.T) {
	t.Parallel()
	url, c, _, _ := shimDB(t)
	role, roleURL := testRole(t, c, url, "idseq")
	r := connect(t, roleURL)
	mustExec(t, r, "SET snowflake.node = 3")
	id := queryInt(t, r, "SELECT snowflake.nextval()")
	if cur := queryInt(t, r, "SELECT snowflake.currval()"); cur != id {
		t.Fatalf("currval %d, want %d", cur, id)
	}
	// The per-row path (blocks of id_seq) serves the role as well.
	if n := queryInt(t, r, "SELECT count(DISTINCT snowflake.nextval()) FROM generate_series(1, 3000)"); n != 3000 {
		t.Fatalf("%d distinct IDs of 3000", n)
	}
	checkDenied := func() {
		t.Helper()
		wantErr(t, pgErr(t, r, "SELECT setval('snowflake.id_seq', 1)"), "42501", "permission denied for sequence id_seq")
		wantErr(t, pgErr(t, r, "SELECT last_value FROM snowflake.id_seq"), "42501", "permission denied for sequence id_seq")
		wantErr(t, pgErr(t, r, "SELECT * FROM snowflake._lease('snowflake.id_seq', 3, 0, 0, 0)"), "42501", "permission denied for function _lease")
		wantErr(t, pgErr(t, r, "SELECT snowflake._release('snowflake.id_seq', 3, 1, 0)"), "42501", "permission denied for function _release")
		for _, priv := range []string{"SELECT", "UPDATE"} {
			if queryInt(t, c, "SELECT has_sequence_privilege($1, 'snowflake.id_seq', $2)::int", role, priv) != 0 {
				t.Fatalf("%s holds %s on snowflake.id_seq", role, priv)
			}
		}
	}
	checkDenied()

	// Leases are for the roles of proxies (the installer, or a control
	// role granted EXECUTE), and even for those they need what setval
	// needs, UPDATE, on the sequence: USAGE let a role that may only draw
	// from a sequence lease it far ahead and date every later ID of the
	// node there (regression).
	mustExec(t, c, "CREATE SEQUENCE usable")
	mustExec(t, c, "CREATE SEQUENCE writable")
	mustExec(t, c, "GRANT USAGE ON SEQUENCE usable TO "+role)
	mustExec(t, c, "GRANT UPDATE ON SEQUENCE writable TO "+role)
	far := (future() + 864_000_000) << 12
	wantErr(t, pgErr(t, r, "SELECT hi_pos FROM snowflake._lease('writable', 3, 0, 0, 0)"), "42501", "permission denied for function _lease")
	wantErr(t, pgErr(t, r, "SELECT snowflake._blocks('writable', 3)"), "42501", "permission denied for function _blocks")
	if n := queryInt(t, r, "SELECT snowflake._blocks_all(3)"); n != 0 {
		t.Fatalf("_blocks_all made %d blocks for a role without EXECUTE on _blocks", n)
	}
	mustExec(t, c, "GRANT EXECUTE ON FUNCTION snowflake._lease(regclass, integer, bigint, bigint, bigint), snowflake._release(regclass, integer, bigint, bigint) TO "+role)
	wantErr(t, pgErr(t, r, "SELECT * FROM snowflake._lease('usable', 3, 0, $1, 0)", far), "42501", "permission denied for sequence usable")
	wantErr(t, pgErr(t, r, "SELECT snowflake._release('usable', 3, 1, 0)"), "42501", "permission denied for sequence usable")
	queryInt(t, r, "SELECT snowflake.nextval('usable')")
	if hi := queryInt(t, r, "SELECT hi_pos FROM snowflake._lease('writable', 3, 0, 0, 0)"); hi <= 0 {
		t.Fatalf("lease of writable: hi_pos %d", hi)
	}
	mustExec(t, c, "REVOKE EXECUTE ON FUNCTION snowflake._lease(regclass, integer, bigint, bigint, bigint), snowflake._release(regclass, integer, bigint, bigint) FROM "+role)

	// An update from a shim that granted them takes them back.
	mustExec(t, c, "GRANT SELECT, UPDATE ON SEQUENCE snowflake.id_seq TO PUBLIC")
	mustExec(t, c, extSQL(t, plan.AlterExtension, nil))
	checkDenied()
	if next := queryInt(t, r, "SELECT snowflake.nextval()"); next <= id {
		t.Fatalf("nextval after the update %d <= %d", next, id)
	}
}
