package pgtest

import (
	"strings"
	"testing"
)

// Packages are installed only as root on Debian or Ubuntu with apt-get;
// anywhere else the reason is given.
func TestCanApt(t *testing.T) {
	for _, c := range []struct {
		euid   int
		debian bool
		apt    string
		ok     bool
		why    string
	}{
		{0, true, "/usr/bin/apt-get", true, ""},
		{1000, true, "/usr/bin/apt-get", false, "not root"},
		{0, false, "/usr/bin/apt-get", false, "not Debian or Ubuntu"},
		{0, true, "", false, "no apt-get"},
	} {
		ok, why := canApt(c.euid, c.debian, c.apt)
		if ok != c.ok || !strings.Contains(why, c.why) {
			t.Errorf("canApt(%d, %v, %q) = %v, %q; want %v, %q", c.euid, c.debian, c.apt, ok, why, c.ok, c.why)
		}
	}
}

// Every program the tests run is found on this machine, or installed, or
// the test cannot run (CannotRun).
func TestTools(t *testing.T) {
	for name, pkg := range toolPackages {
		if pkg == "" {
			t.Errorf("%s: no package named", name)
		}
		want := "/" + name
		if f, ok := toolFiles[name]; ok {
			want = f.path
		}
		if p := Tool(t, name); !strings.HasSuffix(p, want) {
			t.Errorf("Tool(%s) = %q", name, p)
		}
	}
}
