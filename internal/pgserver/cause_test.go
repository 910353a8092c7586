package pgserver

import (
	"strings"
	"testing"
)

// causeIn picks the line that says why a start failed, and knownCause
// names the usual causes, so that the error is one short line.
func TestCauseIn(t *testing.T) {
	for _, c := range []struct{ name, log, want string }{
		{"lock file with its hint",
			"2026-01-01 00:00:00.000 UTC [12] LOG:  starting PostgreSQL 15\n" +
				"2026-01-01 00:00:00.001 UTC [12] FATAL:  lock file \"postmaster.pid\" already exists\n" +
				"2026-01-01 00:00:00.001 UTC [12] HINT:  Is another postmaster (PID 7) running in data directory \"/d\"?\n" +
				"2026-01-01 00:00:00.002 UTC [12] LOG:  database system is shut down\n",
			`FATAL: lock file "postmaster.pid" already exists HINT: Is another postmaster (PID 7) running in data directory "/d"?`},
		{"last FATAL wins",
			"x FATAL:  first\ny FATAL:  second\n", "FATAL: second"},
		{"no severity: last line", "postgres: superuser_reserved_connections (3) must be less than max_connections (1)\n\n",
			"postgres: superuser_reserved_connections (3) must be less than max_connections (1)"},
		{"empty", "", ""},
		{"bounded", "FATAL: " + strings.Repeat("x", 1000), "FATAL: " + strings.Repeat("x", 233) + "..."},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := causeIn(c.log); got != c.want {
				t.Fatalf("causeIn = %q, want %q", got, c.want)
			}
		})
	}
	if h := knownCause(`FATAL: lock file "postmaster.pid" already exists`); !strings.Contains(h, "another PostgreSQL") {
		t.Fatalf("knownCause(lock file) = %q", h)
	}
}

// Passwords and user names with ':' or '\' survive the .pgpass escaping.
func TestPassFileFields(t *testing.T) {
	for _, pw := range []string{"plain", `a:b\c`, `\:`, "::", `ends\`} {
		line := "*:*:*:" + passEscape("us:er") + ":" + passEscape(pw)
		f := passFields(line)
		if len(f) != 5 || f[3] != "us:er" || f[4] != pw {
			t.Fatalf("%q: fields %q", pw, f)
		}
	}
}
