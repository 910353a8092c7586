// Package admin serves the proxy's admin HTTP listener (--admin-listen):
// Prometheus metrics, liveness and readiness. It is off unless an address
// is given, and never shares the clients' listener.
//
// The metrics read the counters wire and compat already keep, at scrape
// time, through a private prometheus.Registry: serving them adds no cost
// on the relay path.
//
// Files:
//
//   - server.go: Config, Start, the HTTP server and its routes, Close.
//   - metrics.go: the collector over wire.Server.Stats and the node claims.
//   - ready.go: /readyz, its checks and the cached upstream check.
package admin
