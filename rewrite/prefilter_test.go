package rewrite

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

func TestNeedsParse(t *testing.T) {
	for _, c := range []struct {
		sql  string
		want bool
	}{
		{"SELECT 1", false},
		{"select * from orders where id = $1", false},
		{"INSERT INTO t VALUES (1)", true}, // its defaults may be snowflakes
		{" with x as (select 1) select * from x", true},
		{"UPDATE t SET a = 1", false},
		{"SELECT 1;", false},
		{"SELECT 1; -- done", false},
		{"SELECT 1; /* a /* nested */ comment */ \n", false},
		{"SELECT 1; SELECT 2", true},
		{"SELECT 'a;b'", true}, // false positive: costs a parse
		{"SELECT SnowFlake.nextval()", true},
		{"select x from snowflakes", true},
		{"SELECT SET_CONFIG('search_path', 'x', false)", true},
		{"SET search_path = x", true},
		{"  -- comment\n/* c */ ( reset all", true},
		{"set", true},
		{"DISCARD ALL", true},
		{"deallocate x", true},
		{"BEGIN", true},
		{"start transaction", true},
		{"create table t()", true},
		{"Alter table t add c int", true},
		{"drop table t", true},
		{"grant select on t to u", true},
		{"revoke select on t from u", true},
		{"comment on table t is 'x'", true},
		{"truncate t", true},
		{"security label on table t is 'x'", true},
		{"reassign owned by a to b", true},
		{"import foreign schema s from server x into y", true},
		{"refresh materialized view v", true},
		{"DO $$BEGIN END$$", true},
		{"settings", false},
		{"SELECT 1 -- ; SET x = 1\n", true}, // false positive: the prefilter does not lex
		{"SELECT ';/*'; SET search_path = x; --*/", true},
		{"", false},
		{";", false},
		{"/* unterminated ; SET x", true},
	} {
		if got := NeedsParse(c.sql); got != c.want {
			t.Errorf("NeedsParse(%q) = %v, want %v", c.sql, got, c.want)
		}
	}
}

func TestPlanPassthroughIsShared(t *testing.T) {
	r := New(Config{})
	for _, sql := range []string{"SELECT 1", "SELECT snowflake.get_node(id) FROM t", "SHOW search_path"} {
		if p := r.Plan(sql); p != plan.Passthrough {
			t.Errorf("Plan(%q) = %+v, want plan.Passthrough", sql, p)
		}
	}
}

// TestPlanUnparsedAssumesEveryEffect: text the proxy must read and cannot
// (an error, or PostgreSQL 18 syntax) is forwarded as written, and the
// session must assume it changed state, DDL included, and issued IDs in
// the shim (regression: it got plan.Passthrough, no effects at all).
func TestPlanUnparsedAssumesEveryEffect(t *testing.T) {
	r := New(Config{})
	for _, sql := range []string{
		"SELECT snowflake.nextval(",
		"INSERT INTO t (id) VALUES (snowflake.nextval()) RETURNING WITH (NEW AS n) n.id",
		"ALTER TABLE t ALTER COLUMN id SET DEFAULT 0, ADD COLUMN d int GENERATED ALWAYS AS (1) VIRTUAL",
	} {
		p := r.Plan(sql)
		if p != plan.Unparsed {
			t.Errorf("Plan(%q) = %+v, want plan.Unparsed", sql, p)
		}
	}
	want := plan.TouchNode | plan.TouchSearchPath | plan.TouchReadOnly | plan.TouchRole | plan.TouchCatalog | plan.TouchShim | plan.TouchSequence
	if got := plan.Unparsed.Touches; got != want || plan.Unparsed.Template != nil {
		t.Errorf("plan.Unparsed: touches %b, template %v; want touches %b and no template", got, plan.Unparsed.Template, want)
	}
}

func TestNeedsParseAllocs(t *testing.T) {
	sqls := []string{"SELECT * FROM orders WHERE id = $1", "SELECT snowflake.nextval()", "SELECT 1; SELECT 2"}
	if n := testing.AllocsPerRun(100, func() {
		for _, s := range sqls {
			NeedsParse(s)
		}
	}); n != 0 {
		t.Errorf("NeedsParse allocates %v times", n)
	}
}

// TestContainsKeyText compares the vectorised search with a plain one.
func TestContainsKeyText(t *testing.T) {
	naive := func(s string) bool {
		l := strings.ToLower(s)
		return strings.Contains(l, "snowflake") || strings.Contains(l, "set_config")
	}
	alphabet := "sSnNoOwWfFlLaAkKeE_tTcCgGiI ;"
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range []string{"SNOWFLAKE", "xsNoWfLaKe", "snowflak", "nowflake", "SET_CONFIGx", "set_confi", "w", "_"} {
		if containsKeyText(s) != naive(s) {
			t.Errorf("containsKeyText(%q) = %v", s, !naive(s))
		}
	}
	for i := 0; i < 200000; i++ {
		b := make([]byte, rng.IntN(24))
		for j := range b {
			b[j] = alphabet[rng.IntN(len(alphabet))]
		}
		if i%7 == 0 && len(b) > 12 {
			copy(b[rng.IntN(len(b)-10):], []string{"SnowFlake", "SET_config", "snowFLAKE"}[i%3])
		}
		if s := string(b); containsKeyText(s) != naive(s) {
			t.Fatalf("containsKeyText(%q) = %v", s, !naive(s))
		}
	}
}
