package app

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snowflake-proxy/snowflake-proxy/internal/admin"
)

// errShuttingDown is /readyz's reason once Close has begun: load
// balancers should stop sending clients during the grace period.
var errShuttingDown = errors.New("shutting down")

// startAdmin serves the admin listener bound in Start, with a pool of one
// control connection for the readiness check (connected on first use).
func (a *App) startAdmin(ln net.Listener, controlURL string) error {
	cfg, err := pgxpool.ParseConfig(controlURL)
	if err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	cfg.MaxConns, cfg.MinConns = 1, 0
	cfg.ConnConfig.RuntimeParams["application_name"] = "snowflake-proxy readiness"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	a.probePool = pool
	a.admin = admin.Serve(ln, admin.Config{
		Stats:          a.server.Stats,
		Claims:         a.services.Claims,
		Leases:         a.services.LeaseStats,
		CatalogWatches: a.services.CatalogWatches,
		Dials:          a.dials,
		Serving:        a.serving,
		PingUpstream:   pool.Ping,
		Node:           a.cfg.Node,
		NodeSource:     a.cfg.NodeSource,
		NodeCheck:      a.nodeCheck(),
		Logger:         a.cfg.Logger,
	})
	return nil
}

// nodeCheck is the claim check of NodeAuto, nil without it.
func (a *App) nodeCheck() func() error {
	if a.autoNode == nil {
		return nil
	}
	return a.autoNode.Check
}

// serving is nil while the proxy accepts clients.
func (a *App) serving() error {
	if a.closing.Load() {
		return errShuttingDown
	}
	select {
	case <-a.done:
		if err := a.serveErr; err != nil {
			return err
		}
		return errors.New("stopped")
	default:
		return nil
	}
}

// AdminAddr is the address of the admin listener; empty when it is off.
func (a *App) AdminAddr() string {
	if a.admin == nil {
		return ""
	}
	return a.admin.Addr()
}

// closeAdmin stops the admin listener and its pool.
func (a *App) closeAdmin() {
	if a.admin != nil {
		if err := a.admin.Close(); err != nil {
			a.log.Warn("closing the admin listener", "err", err)
		}
	}
	if a.probePool != nil {
		a.probePool.Close()
	}
}
