// Package wire is the proxy's PostgreSQL protocol layer: it accepts client
// connections, relays each one to the upstream server, and changes the
// traffic only where the snowflake API needs it. It parses no SQL itself:
// it asks a Rewriter (services.go) for a plan.Plan and fills the plan's
// slots with values from Snowflakes.
//
// # Layers
//
//   - server.go: Config, Server, Close, Stats; accept.go: the accept loop
//     (Serve) and its retries.
//   - lifecycle.go: how sessions end on the proxy's initiative (end of
//     Close's grace, IdleClientTimeout) and the cancel of a statement a
//     client leaves running; cancel.go: CancelRequests (sendCancel is the
//     one place that dials the upstream for a cancel).
//   - session.go: one session per client connection; its goroutine runs
//     startup, then the two pumps, and waits for both; shared.go: the
//     state both pumps and the session touch, under its locks. Who owns
//     what, the lock order and the event loop's states:
//     docs/session.md.
//   - startup.go, tls.go, cancel.go, auth.go: the startup phase;
//     startupnode.go: snowflake.node set by the client's startup packet;
//     upstream.go: dialing the server, with TLS as its sslmode says.
//   - client.go (client → server) and relay.go (server → client): the pumps.
//   - frame.go: length-prefixed messages read with a bounded, reusable
//     buffer; pass-through messages are copied raw, never decoded. The
//     messages the handlers inspect or change are read and written through
//     package pgmsg's views, which do not allocate; a malformed one is
//     passed on unchanged, for the server to report as without the proxy.
//   - loop.go: the session's side of the event loops: the steps the
//     loops and the pumps' polls drive (netloop.Steps), when a session
//     returns to its loop, and the Server's loops. The I/O machinery
//     itself, epoll loops, raw non-blocking socket calls, parking and
//     hand-off, is package netloop: a session is relayed by a loop thread
//     as long as no step has to wait; the session then continues on its
//     pumps, and returns to the loop when both pumps wait for input.
//   - position.go: error cursors in rewritten text mapped back to the
//     client's text; errcontext.go: the shim's CONTEXT lines removed from
//     errors and notices.
//   - simple.go, extended.go: the two query protocols; fallbackstmt.go:
//     the statements a client's prepared statement falls back to when the
//     proxy leaves an ID to the server; namedparse.go: records of
//     statements changed (Parse, Close, DEALLOCATE) only as the server
//     answers, kept when it skips or refuses the change; queue.go: the FIFO
//     of responses owed to the client; ids.go, mirror.go: generated values
//     and the session state they depend on; local.go, extlocal.go: answers
//     the proxy gives without the server; errors.go: typed errors and SQLSTATEs;
//     fallback.go: why IDs went to the shim instead (Stats.Fallbacks);
//     outcome.go: how sessions end, logged and counted (Stats.Ended);
//     copyin.go: COPY ... FROM STDIN whose rows get the proxy's IDs, the
//     rows themselves rewritten by package pgcopy; copyopts.go: how its
//     rows are read; copyerr.go: its errors as the client's own data
//     would have made them.
//
// # Session lifecycle
//
//  1. Accept (accept.go). Serve accepts a connection and starts a session
//     goroutine (session.run). Accept errors that may pass (EMFILE, ENFILE,
//     ENOBUFS, ENOMEM, ECONNABORTED, EINTR, EPROTO, timeouts...) are
//     retried after 5 ms, doubling to 1 s, with one WARN line per 10 s;
//     any other ends Serve with the error (logged at ERROR).
//  2. Startup negotiation (startup.go, tls.go, cancel.go). Packets are read
//     unbuffered, at most 10000 bytes, under HandshakeTimeout. SSLRequest is
//     answered 'S' plus a TLS handshake when Config.TLSConfig is set, 'N'
//     otherwise; GSSENCRequest 'N'. A CancelRequest is forwarded to the
//     server as is (clients hold the server's own BackendKeyData) and the
//     connection closed. Protocol major versions other than 3 are refused
//     with 0A000, as PostgreSQL does. A StartupMessage beyond
//     Config.MaxClients sessions is refused with FATAL 53300 (cancel
//     requests are not counted).
//  3. Connection and authentication (auth.go). The proxy dials the
//     upstream (DialTimeout; failure: 08001 to the client), sends the
//     startup packet with snowflake.node added when Config.Node is set and
//     the client did not set it, and relays the authentication exchange
//     message by message in both directions (trust, password, md5,
//     SCRAM-SHA-256): the proxy holds no credentials and admits nobody the
//     server refuses. ParameterStatus values are remembered; BackendKeyData
//     is relayed verbatim, and its process id and key (4 bytes, or up to
//     256 with protocol 3.2) kept for phase 7. The phase ends at the first
//     ReadyForQuery, unless the client set snowflake.node at startup in a
//     way the extension refuses (startupnode.go): then that FATAL replaces
//     it.
//  4. Event loop (loop.go, netloop). A session is relayed by an event loop
//     first, TLS on either side included (its tls.Conn is a
//     netloop.TLSConn: the loop reads and writes its records;
//     docs/tls-loop.md): the steps of 5 and 6 below run on the loop's thread, one
//     read per readiness event, as long as no step has to wait; then the
//     session's goroutine starts the two pumps, which give it back to the
//     loop when both wait for input.
//  5. Client pump (client.go). Each client message is bounded by
//     MaxMessageSize (08P01 and the end of the session otherwise). Without a
//     Rewriter every message is copied raw. With one, Query goes to
//     simple.go, Parse/Bind/Describe/Execute/Close/Sync to extended.go; each
//     message the server will answer first gets an entry in the owed queue
//     (queue.go), which tells the server pump how to treat its response.
//     Writes to the server are flushed only when no more client input is
//     buffered: a pipeline costs one write.
//  6. Server pump (relay.go). Server messages are copied raw except those
//     the proxy must see or change: ReadyForQuery (transaction status, end
//     of a response, safe point), ErrorResponse (the server skips to Sync:
//     owed entries up to it are dropped), ParameterStatus, CommandComplete
//     (renamed per plan.Statement.Tag), ParameterDescription (injected
//     parameters stripped). Writes to the client are batched the same way.
//  7. End. The first pump to stop half-closes the other direction: after
//     the client's Terminate or disappearance the server connection is
//     closed for writing (the backend exits, the server pump sees EOF);
//     after the server's disappearance the client gets 08006 unless the
//     server already sent a FATAL error. When the client ends (EOF, error,
//     Terminate) while a statement is outstanding on the server (something
//     forwarded whose ReadyForQuery was not relayed), the proxy sends the
//     server a CancelRequest with the session's key and closes the server
//     connection at once, so that the backend does not run the statement
//     to its end holding its locks. The session waits for both pumps,
//     closes both connections and logs one line with its duration and its
//     outcome (outcome.go).
//  8. Ends on the proxy's initiative (lifecycle.go). When Close's context
//     ends before a session does, the session is cut: its relay stops at a
//     message boundary (the server pump starts no new batch; reads are
//     woken by deadlines, or by shutdown(SHUT_RD) in an event loop), then
//     its own goroutine writes FATAL 57P01 under a 1 s write deadline,
//     cancels a statement still running, and closes; Close logs at WARN
//     how many sessions it cut, and each logs its end with outcome
//     shutdown_cut and the SQLSTATE. With Config.IdleClientTimeout, a reaper goroutine
//     cuts sessions idle that long (no client message and no statement
//     outstanding) with 57P05, or 25P03 inside a transaction; it reads no
//     clock on the relay path, only each session's message counter once
//     per tick.
//
// # Simple protocol (simple.go, local.go)
//
// Pass-through text is forwarded raw. A plan with slots is rendered with
// plan.Template.RenderLiteral: generated IDs as literals, extension
// statements as the SQL Snowflakes.ExtensionSQL gives. A plan.Local
// statement is answered by the proxy itself (RowDescription, DataRow,
// CommandComplete, ReadyForQuery, identical to the server's) when the
// session is at a safe point, not in a failed or read-only transaction, and
// every value was generated.
//
// # Extended protocol (extended.go)
//
// A Parse whose plan has ID slots is rendered with each slot as an extra
// int8 parameter after the client's own: the parameter alone
// (plan.BoundParams) when the session reaches its server directly, the
// parameter with the shim's call as its fallback (plan.Params) behind a
// pooler. Every Bind of such a statement appends freshly generated values
// in the client's format; one that leaves a slot to the server (a NULL)
// binds, in the first case, to the statement's fallback statement, the
// plan.Params rendering under a name of the proxy's (fallbackstmt.go). A
// Describe of the statement hides the extra parameters from the
// ParameterDescription. Records of statements and portals (named and
// unnamed) follow Parse, Bind, Close, DEALLOCATE and DISCARD ALL as the
// server answers them: a Parse, Close or DEALLOCATE the server refuses or
// skips (a named Parse of a name it has, 42P05; anything after an earlier
// error until Sync; a DEALLOCATE behind a failed statement of its Query)
// leaves the statement's record as it was (namedparse.go).
//
// A Bind of a plan.Local statement whose Parse the server confirmed is
// answered by the proxy (extlocal.go) together with the Describe (portal),
// Execute and Sync buffered right after it: BindComplete, RowDescription,
// DataRow (text or binary int8), CommandComplete and ReadyForQuery, as the
// server would send them, under the conditions of the simple protocol plus
// the unnamed portal, no parameters, and a row limit that ends the portal.
// Parse and Describe of statements stay with the server.
//
// # Generated values and the mirror (ids.go, mirror.go)
//
// An ID is generated by the proxy only when the session's own server state
// allows it: node 1..1023, a transaction that is neither failed nor
// read-only, a sequence name that resolves (with the session's search_path)
// to a sequence the role may use, and the shim installed. That state is
// read by hidden queries the session runs on its own server connection at
// a safe point (after ReadyForQuery with nothing forwarded since), through
// a named statement and portal closed at once so that the client's unnamed
// ones survive, and whose responses the server pump consumes without
// showing them. When the state is not known, the value is left invalid and
// the rendered SQL calls the server's shim instead: correct first, fast
// where possible. The mirror also holds each sequence's INCREMENT as the
// session sees it, its own uncommitted ALTER SEQUENCE included, as the
// extension reads it on every call. The fast-path IDs of one execution are
// issued together (Snowflakes.NextvalBatch): at one clock reading, so that
// they are the IDs one C-extension node gives for calls at one instant,
// and all or none on the event loop's thread. Inside a transaction block
// that ran DDL or setval they are left to the shim: a lease, taken on
// another connection, would wait for that transaction's locks.
//
// # Column defaults (defaults.go, reprepare.go)
//
// A plan with Inserts (INSERT ... VALUES, also in WITH) is completed by the
// session: a hidden query tells which columns of each target default to a
// plain snowflake.nextval call, and the template gets a Nextval slot for
// each omitted or DEFAULT item of such a column, filled like an explicit
// call (an unfilled one renders as DEFAULT, or in the extended protocol
// as COALESCE($n, snowflake.nextval(<that default's sequence>)), in the
// statement or its fallback statement). The
// session caches what it learned until its search_path, role or catalog
// may have changed, or an epoch of Snowflakes.CatalogEpochs moves (DDL or
// a role's privileges changed elsewhere); with catalog epoch 0 defaults
// stay with the server. A named prepared INSERT whose
// defaults changed is prepared again, transparently, at its next Bind.
//
// # COPY FROM STDIN (copyin.go, copyopts.go, copyerr.go, pgcopy)
//
// A simple-protocol Query that is one COPY table (columns) FROM STDIN (or
// the Parse of such an unnamed statement, completed when its portal runs),
// whose list omits bigint columns with a snowflake default, is sent with
// those columns appended to the list when the checks of an INSERT default
// pass (the same catalog cache, sequence privileges, node, transaction
// state and fence; INSERT on the column; an encoding whose characters hold
// no ASCII bytes). Until the client's CopyDone or CopyFail, its CopyData
// goes through a pgcopy.Rewriter, which appends one ID per added column to
// every row with at least as many fields as the client's list; the IDs are
// issued in batches before the data that needs them, so a loop thread that
// would wait hands the message over untouched. The CopyInResponse hides
// the added columns; the server's errors lose them too (the expected field
// count, the IDs at the end of a quoted line). When the server refuses the
// COPY the rest of the data
// passes unchanged; when the generator fails mid-COPY the proxy sends the
// server a CopyFail (57014 for the client) and the session goes on.
// Afterwards currval is the last row's ID, as after the shim's calls. A
// named prepared COPY (it may run long after the catalog was read), and
// any COPY the checks refuse, keep the shim.
//
// # Simple-protocol INSERTs (simpleprep.go)
//
// A Query that is one INSERT ... VALUES with a built template, seen before
// in the session, is sent at a safe point as Parse (once) and Bind, Execute
// and Sync of a statement named by the proxy; the server pump swallows
// ParseComplete and BindComplete (owedHiddenParse, owedHiddenBind), so the
// client gets the Query's response. The server then plans the INSERT once
// per session instead of once per execution. Every ID is bound (the path
// is taken only when the proxy generated them all), so the text has the
// parameters alone (plan.BoundParams), not the fallback call a client's
// Parse gets. Not behind a connection pooler, which may run the next
// transaction on another server connection: a session is behind one when
// pg_backend_pid(), read by the mirror query, is not the pid of its
// BackendKeyData.
//
// # Debugging
//
// Each session logs with a "session" attribute, and its end with its
// outcome (client_closed, client_disconnected, drained, login_refused,
// shutdown_cut, upstream_terminated, upstream_lost...: outcome.go), the
// SQLSTATE the client was told or the server ended it with, the server's
// message, and the error when there is one: INFO for the ends that are
// part of a client's life, WARN for refusals and failures. Stats counts
// sessions, their ends by outcome, errors by kind (too_many_clients,
// idle_timeout and shutdown among them),
// retried accepts, cancels (forwarded, and sent for statements left
// running), local answers, hidden queries, fast-path IDs (LocalIDs: those
// sent in local answers) and fallbacks to the shim by reason, counted once
// per Query or Bind where the session decides (simple.go, extended.go).
// Config.ObserveDial times each connection attempt to the upstream.
// internal/admin serves them as Prometheus metrics.
package wire
