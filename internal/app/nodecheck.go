package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/guc"
)

// warnServerNode logs a warning when the server configures a
// snowflake.node other than --node. The proxy passes --node to the server
// as a startup parameter of every session, which takes precedence over
// postgresql.conf, ALTER SYSTEM and ALTER DATABASE or ALTER ROLE settings:
// sessions through the proxy then issue IDs with another node than direct
// connections to the same server. The check reads the setting on a fresh
// control connection (without the proxy's parameter), so it sees the
// server's configuration and the settings of the control connection's
// database and role; other databases' and roles' settings are not looked
// at. Failing to check is not an error: checkUpstream has already vouched
// for the server.
func warnServerNode(ctx context.Context, up upstream, node int, timeout time.Duration, log *slog.Logger) {
	if node == 0 {
		return // sessions get the server's own setting
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := pgx.Connect(ctx, up.controlURL)
	if err != nil {
		log.Debug("cannot read the server's snowflake.node", "err", oneLine(err))
		return
	}
	defer c.Close(ctx)
	var v *string
	if err := c.QueryRow(ctx, "SELECT pg_catalog.current_setting('snowflake.node', true)").Scan(&v); err != nil {
		log.Debug("cannot read the server's snowflake.node", "err", err)
		return
	}
	if v == nil || *v == "" {
		return
	}
	if n, err := guc.CheckInt("snowflake.node", *v, 0, 1023); err == nil && (n == 0 || int(n) == node) {
		return
	}
	log.Warn("the server configures another snowflake.node than --node: sessions through the proxy use --node "+
		"(the proxy passes it at connection, which overrides postgresql.conf, ALTER SYSTEM and ALTER DATABASE/ROLE), "+
		"direct connections the server's",
		"node", node, "server_node", *v, "upstream", up.display)
}
