package main

import (
	"log/slog"
	"sort"

	"github.com/snowflake-proxy/snowflake-proxy/internal/app"
)

// reloader applies a SIGHUP: the settings are read again exactly as at
// start (command line over SNOWFLAKE_PROXY_* over the config file), what
// can change live is applied, and what cannot is named in the log.
type reloader struct {
	m       *Main
	args    []string
	current *options
	app     *app.App
	level   *slog.LevelVar
	log     *slog.Logger
}

func (r *reloader) reload() {
	next, err := r.m.parseFlags(r.args)
	var level slog.Level
	if err == nil {
		level, err = parseLevel(next.logLevel)
	}
	if err != nil {
		r.log.Error("reload failed; the previous configuration stays in force", "err", err)
		return
	}
	var restart []string
	for name, v := range next.values {
		if v != r.current.values[name] && !liveSettings[name] {
			restart = append(restart, name)
		}
	}
	sort.Strings(restart)
	if err := r.app.ReloadTLS(next.tlsCert, next.tlsKey, next.tlsClientCA); err != nil {
		r.log.Error("reload failed; the previous configuration stays in force", "err", err)
		return
	}
	if next.maxClients != r.current.maxClients || next.idleTimeout != r.current.idleTimeout {
		r.app.SetLimits(next.maxClients, next.idleTimeout)
		r.log.Info("session limits changed", "max_clients", next.maxClients, "idle_client_timeout", next.idleTimeout.String())
	}
	if next.logLevel != r.current.logLevel {
		r.level.Set(level)
		r.log.Info("log level changed", "level", next.logLevel)
	}
	if len(restart) > 0 {
		r.log.Warn("settings changed that need a restart; still using the old values", "settings", restart)
	}
	// Settings that need a restart keep their old values, so that the
	// next SIGHUP compares with what is really in force.
	for _, name := range restart {
		next.values[name] = r.current.values[name]
	}
	r.current = next
}
