package guc

import "testing"

// The expectations follow PostgreSQL's parse_int for an integer setting
// without unit (SET snowflake.node = ... with the extension loaded).
func TestParseInt(t *testing.T) {
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
		v, hint, ok := ParseInt(c.in)
		if ok != c.ok || ok && v != c.want || (hint != "") != c.hint {
			t.Errorf("ParseInt(%q) = %d, %q, %v; want %d, hint %v, %v", c.in, v, hint, ok, c.want, c.hint, c.ok)
		}
	}
}

func TestCheckInt(t *testing.T) {
	for _, c := range []struct {
		name, value string
		want        int32
		msg, hint   string
	}{
		{"snowflake.node", "7", 7, "", ""},
		{"snowflake.node", "0", 0, "", ""},
		{"snowflake.node", "1023", 1023, "", ""},
		{"snowflake.node", "0x10", 16, "", ""},
		{"snowflake.node", "5000", 0, `5000 is outside the valid range for parameter "snowflake.node" (0 .. 1023)`, ""},
		{"Snowflake.Node", "1023.5", 0, `1024 is outside the valid range for parameter "Snowflake.Node" (0 .. 1023)`, ""},
		{"snowflake.node", "-1", 0, `-1 is outside the valid range for parameter "snowflake.node" (0 .. 1023)`, ""},
		{"snowflake.node", "abc", 0, `invalid value for parameter "snowflake.node": "abc"`, ""},
		{"snowflake.node", "", 0, `invalid value for parameter "snowflake.node": ""`, ""},
		{"snowflake.node", "99999999999", 0, `invalid value for parameter "snowflake.node": "99999999999"`, "Value exceeds integer range."},
	} {
		n, err := CheckInt(c.name, c.value, 0, 1023)
		switch {
		case c.msg == "" && (err != nil || n != c.want):
			t.Errorf("CheckInt(%q) = %d, %v; want %d", c.value, n, err, c.want)
		case c.msg != "" && (err == nil || err.Message != c.msg || err.Hint != c.hint):
			t.Errorf("CheckInt(%q) = %v; want %q (hint %q)", c.value, err, c.msg, c.hint)
		}
	}
}
