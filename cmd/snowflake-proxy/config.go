package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// configFlag names the flag (and SNOWFLAKE_PROXY_CONFIG) that points at a
// TOML file whose keys are the flags' names: `node = 7`,
// `upstream = "postgres://..."`, `grace = "10s"`. Precedence, highest
// first: the command line, SNOWFLAKE_PROXY_*, the file.
const configFlag = "config"

// liveSettings can change while the proxy runs: SIGHUP applies them from
// the file (reload.go). Others changed in the file need a restart.
var liveSettings = map[string]bool{
	"log-level": true, "tls-cert": true, "tls-key": true, "tls-client-ca": true,
	"max-clients": true, "idle-client-timeout": true,
}

// configPath returns the config file named on the command line (the last
// --config wins, as for any flag) or in the environment.
func configPath(args []string, getenv func(string) string) string {
	path := getenv("SNOWFLAKE_PROXY_CONFIG")
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != configFlag {
			continue
		}
		if !hasValue && i+1 < len(args) {
			i++
			value = args[i]
		}
		path = value
	}
	return path
}

// applyConfigFile sets the flags of fs from the file at path and returns
// the names it set.
func applyConfigFile(fs *flag.FlagSet, path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var raw map[string]any
	if _, err := toml.Decode(string(b), &raw); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	set := map[string]bool{}
	for key, v := range raw {
		f := fs.Lookup(key)
		if f == nil || key == configFlag {
			return nil, fmt.Errorf("config file %s: unknown setting %q (the keys are the flags' names)", path, key)
		}
		s, err := tomlScalar(v)
		if err != nil {
			return nil, fmt.Errorf("config file %s: %s: %w", path, key, err)
		}
		if err := f.Value.Set(s); err != nil {
			return nil, fmt.Errorf("config file %s: invalid %s = %q: %w", path, key, s, err)
		}
		set[key] = true
	}
	return set, nil
}

// tomlScalar turns a decoded TOML value into the text a flag parses.
func tomlScalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		if x != math.Trunc(x) {
			return "", errors.New("want a whole number")
		}
		return strconv.FormatInt(int64(x), 10), nil
	}
	return "", fmt.Errorf("want a string, number or boolean, not %T", v)
}
