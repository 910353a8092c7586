package rewrite

import "testing"

// The expectations follow PostgreSQL's parse_int for an integer setting
// without unit (SET snowflake.node = ... with the extension loaded).
func TestParseGUCInt(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int32
		ok   bool
		hint bool
	}{
		{"5", 5, true, false},
		{" 5 ", 5, true, false},
		{"+7", 7, true, false},
		{"-1", -1, true, false},
		{"0x10", 16, true, false},
		{"0X1f", 31, true, false},
		{"017", 15, true, false},
		{"08", 0, false, false},
		{"1.5", 2, true, false},
		{"2.5", 2, true, false},
		{"-2.5", -2, true, false},
		{".5", 0, true, false},
		{"1e3", 1000, true, false},
		{"1E2", 100, true, false},
		{"1e", 0, false, false},
		{"0x1.8", 2, true, false},
		{"0x", 0, false, false},
		{"", 0, false, false},
		{" ", 0, false, false},
		{"abc", 0, false, false},
		{"5abc", 0, false, false},
		{"inf", 0, false, false},
		{"nan", 0, false, false},
		{"99999999999", 0, false, true},
		{"99999999999999999999999", 0, false, true},
		{"1e10", 0, false, true},
		{"1e400", 0, false, false},
		{"1e-400", 0, false, false},
		{"2147483647", 2147483647, true, false},
		{"-2147483648", -2147483648, true, false},
		{"2147483648", 0, false, true},
	} {
		v, hint, ok := parseGUCInt(c.in)
		if ok != c.ok || ok && v != c.want || (hint != "") != c.hint {
			t.Errorf("parseGUCInt(%q) = %d, %q, %v; want %d, hint %v, %v", c.in, v, hint, ok, c.want, c.hint, c.ok)
		}
	}
}

func TestValidRelName(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"s", true}, {"public.s", true}, {" s ", true},
		// to_regclass raises for database.schema.name: left to the server.
		{"db.public.s", false},
		{`"My Seq"`, true}, {`"a""b"`, true}, {`app . "x"`, true}, {"_x$1", true},
		{"", false}, {" ", false}, {`""`, false}, {`"a`, false}, {"a.b.c.d", false},
		{"a..b", false}, {"a.", false}, {".a", false}, {"1a", false}, {"bad name", false},
		{"a;b", false}, {"a'b", false}, {"é", false}, {"$a", false},
	} {
		if got := validRelName(c.in); got != c.ok {
			t.Errorf("validRelName(%q) = %v, want %v", c.in, got, c.ok)
		}
	}
}
