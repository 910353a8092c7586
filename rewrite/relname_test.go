package rewrite

import "testing"

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
