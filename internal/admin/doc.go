// Package admin serves the proxy's admin HTTP listener (--admin-listen):
// Prometheus metrics, liveness and readiness. It is off unless an address
// is given, and never shares the clients' listener. internal/app binds it
// (Listen) before anything else starts, and serves it once the proxy runs.
// Its tests are internal/app's TestAdmin*: they need a running proxy.
//
// The metrics read the counters wire, compat and the generator already
// keep, at scrape time, through a private prometheus.Registry: serving them
// adds no cost on the relay path. The one histogram, upstream dial times
// (Dials), is observed per connection attempt, never per message.
//
// Files:
//
//   - server.go: Config, Listen, Serve (the HTTP server and its routes),
//     Close.
//   - metrics.go: the collector over wire.Server.Stats, the lease
//     counters, the node claims and the catalog watches; Dials.
//   - ready.go: /readyz, its checks and the cached upstream check.
package admin
