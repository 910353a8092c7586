package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pendingFlags are flags the deploy files may use before they exist
// (none now), so that such a file and its flag can land apart.
var pendingFlags = map[string]bool{}

// The flags, SNOWFLAKE_PROXY_* variables and config keys that the files
// under deploy/ use are the proxy's, and the image's environment over the
// Kubernetes ConfigMap gives a configuration the proxy accepts.
func TestDeployFilesNameRealFlags(t *testing.T) {
	defined := map[string]bool{}
	(&Main{Stderr: os.Stderr}).flagSet(&options{}).VisitAll(func(f *flag.Flag) { defined[f.Name] = true })
	for name := range pendingFlags {
		if defined[name] {
			t.Errorf("--%s exists now: remove it from pendingFlags", name)
		}
	}
	known := func(name string) bool { return defined[name] || pendingFlags[name] }

	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	dockerfile, unit, k8s := read("Dockerfile"), read("snowflake-proxy.service"), read("kubernetes.yaml")

	envNames := regexp.MustCompile(`SNOWFLAKE_PROXY_[A-Z_]+`)
	for _, text := range []string{dockerfile, unit, k8s} {
		for _, v := range envNames.FindAllString(text, -1) {
			if name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(v, "SNOWFLAKE_PROXY_"), "_", "-")); !known(name) {
				t.Errorf("%s names no flag", v)
			}
		}
	}
	// Flags on the unit's ExecStart and in the manifest's args (comments
	// hold kubectl's own flags).
	flagWords := regexp.MustCompile(`(?:^|[\s=])--([a-z][a-z-]*)`)
	seen := 0
	for _, text := range []string{unit, k8s} {
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			for _, m := range flagWords.FindAllStringSubmatch(line, -1) {
				seen++
				if !known(m[1]) {
					t.Errorf("--%s in %q is no flag", m[1], strings.TrimSpace(line))
				}
			}
		}
	}
	if seen < 4 {
		t.Fatalf("%d flags found in the unit and the manifest: the matching is broken", seen)
	}

	// The ConfigMap's TOML, with the image's environment over it and the
	// container's args, as a pod starts the proxy.
	toml := configMapTOML(t, k8s)
	path := filepath.Join(t.TempDir(), "snowflake-proxy.toml")
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, m := range regexp.MustCompile(`(SNOWFLAKE_PROXY_[A-Z_]+)=(\S+)`).FindAllStringSubmatch(dockerfile, -1) {
		env[m[1]] = m[2]
	}
	args := containerArgs(t, k8s)
	for i, a := range args {
		if a == "/etc/snowflake-proxy/snowflake-proxy.toml" {
			args[i] = path
		}
	}
	m := &Main{Stderr: os.Stderr, Getenv: func(k string) string { return env[k] }}
	o, err := m.parseFlags(args)
	if err != nil {
		t.Fatalf("the pod's configuration %q is refused: %v", args, err)
	}
	if o.listen != "0.0.0.0:6432" || !o.nodeAuto || o.nodeMin != 1 || o.nodeMax != 1023 || o.logFormat != "json" || !strings.HasPrefix(o.upstream, "postgres://") ||
		o.passwordFile != "/etc/snowflake-proxy-secret/password" {
		t.Fatalf("listen %q node auto %v range %d-%d log-format %q upstream %q password file %q: want the image's listen and log format, "+
			"--node auto, the ConfigMap's upstream and range, the Secret's password", o.listen, o.nodeAuto, o.nodeMin, o.nodeMax, o.logFormat, o.upstream, o.passwordFile)
	}
}

// containerArgs is the list under the container's `args:` in the manifest.
func containerArgs(t *testing.T, k8s string) []string {
	t.Helper()
	lines := strings.Split(k8s, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "args:" {
			continue
		}
		var args []string
		for _, l := range lines[i+1:] {
			item, ok := strings.CutPrefix(strings.TrimSpace(l), "- ")
			if !ok || strings.HasPrefix(strings.TrimSpace(l), "#") {
				break
			}
			args = append(args, item)
		}
		return args
	}
	t.Fatal("no args in the manifest")
	return nil
}

// configMapTOML is the literal block under `snowflake-proxy.toml: |` in
// the manifest, without its indentation.
func configMapTOML(t *testing.T, k8s string) string {
	t.Helper()
	lines := strings.Split(k8s, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "snowflake-proxy.toml: |" {
			continue
		}
		outer := len(l) - len(strings.TrimLeft(l, " "))
		var b strings.Builder
		cut := -1
		for _, l := range lines[i+1:] {
			in := len(l) - len(strings.TrimLeft(l, " "))
			if strings.TrimSpace(l) != "" && in <= outer {
				break
			}
			if cut < 0 && strings.TrimSpace(l) != "" {
				cut = in
			}
			if cut >= 0 && len(l) >= cut {
				l = l[cut:]
			}
			b.WriteString(l + "\n")
		}
		return b.String()
	}
	t.Fatal("no snowflake-proxy.toml in the manifest's ConfigMap")
	return ""
}
