package main

import (
	"runtime/debug"
	"strings"
)

// version, when set at build time (-ldflags "-X main.version=v1.2.3"),
// wins over the module version of the build information.
var version = ""

// versionLine describes the binary from its build information: the
// module version (set by `go install ...@v1.2.3`; "(devel)" for a build
// from a checkout), the VCS revision and time with a "+dirty" mark for a
// build of a modified tree, and the Go version.
func versionLine(info *debug.BuildInfo, ok bool) string {
	if !ok {
		v := version
		if v == "" {
			v = "(unknown)"
		}
		return "snowflake-proxy " + v
	}
	v := version
	if v == "" {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	parts := []string{"snowflake-proxy", v}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if settings["vcs.modified"] == "true" {
			rev += "+dirty"
		}
		parts = append(parts, "commit "+rev)
		if t := settings["vcs.time"]; t != "" {
			parts = append(parts, t)
		}
	}
	parts = append(parts, info.GoVersion)
	return strings.Join(parts, " ")
}
