package compat

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Privilege epochs: how sessions learn that a role lost the right to use a
// sequence when nothing announces it.
//
// Sessions cache, per sequence name, whether their role may use it
// (wire/mirror.go). GRANT and REVOKE on a sequence are DDL, which the
// event triggers announce (catalog epochs), but a role's memberships and
// superuser status are not objects of the database: REVOKE grp FROM alice
// and ALTER ROLE ... NOSUPERUSER fire no event trigger. In a database
// whose shim was installed without the triggers, nothing is announced at
// all. So the watch also reads a fingerprint of the privileges every
// epochPrivilegePoll (roles; without the triggers, the sequences' and
// schemas' grants too) and moves the database's privilege epoch when it
// changes; every move of the catalog epoch moves it too. A session whose
// caches were built at another privilege epoch drops them.
//
// The privilege epoch is 0 while the watch is not connected (changes
// cannot be seen); sessions then keep what they cached.

// epochPrivilegePoll is how often the watch reads the fingerprint: how
// long a revoked privilege may still be taken from a session's cache.
const epochPrivilegePoll = 250 * time.Millisecond

// rolesSQL is a fingerprint of what privileges follow from besides grants
// on objects: role memberships (with their options, which PostgreSQL 16
// added) and the superuser and inherit flags. Both catalogs are readable
// by every role.
const rolesSQL = `SELECT pg_catalog.md5(
	coalesce((SELECT pg_catalog.string_agg(m::pg_catalog.text, ',' ORDER BY m::pg_catalog.text)
		FROM pg_catalog.pg_auth_members m), '') || '/' ||
	coalesce((SELECT pg_catalog.string_agg(r.oid::pg_catalog.text || r.rolsuper::pg_catalog.text
		|| r.rolinherit::pg_catalog.text, ',' ORDER BY r.oid) FROM pg_catalog.pg_roles r), ''))`

// grantsSQL is a fingerprint of the sequences (which exist, their owners,
// grants and increments) and of the schemas' grants, for a database whose
// DDL is not announced. A sum of hashes: no sort of the whole catalog.
const grantsSQL = `SELECT (SELECT pg_catalog.count(*)::pg_catalog.text || '/' || coalesce(pg_catalog.sum(pg_catalog.hashtext(
		c.oid::pg_catalog.text || ':' || c.relowner::pg_catalog.text || ':' || coalesce(c.relacl::pg_catalog.text, '')
		|| ':' || s.seqincrement::pg_catalog.text))::pg_catalog.text, '')
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_sequence s ON s.seqrelid = c.oid)
	|| '/' || (SELECT coalesce(pg_catalog.sum(pg_catalog.hashtext(n.oid::pg_catalog.text || ':'
		|| n.nspowner::pg_catalog.text || ':' || coalesce(n.nspacl::pg_catalog.text, '')))::pg_catalog.text, '')
	FROM pg_catalog.pg_namespace n)`

// PrivilegeEpoch implements wire.Snowflakes: the privilege epoch of
// database, 0 when changes cannot be seen there (see above). The first
// call for a database starts its watch and returns 0. It does not block:
// one map lookup and one atomic load.
func (s *Service) PrivilegeEpoch(database string) uint64 {
	if v, ok := s.watches.Load(database); ok {
		return v.(*catalogWatch).privs.Load()
	}
	s.startWatch(database)
	return 0
}

// waitPolling waits for up to d as wait does (an unarmed watch also for a
// nudge), reading the privileges' fingerprint every epochPrivilegePoll
// meanwhile and moving the privilege epoch when it changed. It returns
// early after a notification (which moved the epochs when armed; unarmed,
// the caller looks for the event triggers again) or a nudge.
func (w *catalogWatch) waitPolling(conn *pgx.Conn, d time.Duration, armed bool) error {
	end := time.Now().Add(d)
	poll := time.Now().Add(epochPrivilegePoll)
	for {
		ev, err := w.wait(conn, min(time.Until(end), time.Until(poll)), !armed)
		if err != nil {
			return err
		}
		if ev != waitTimeout || !time.Now().Before(end) {
			return nil
		}
		if time.Now().Before(poll) {
			continue
		}
		changed, err := w.privilegesChanged(conn, armed)
		if err != nil {
			return err
		}
		if changed {
			w.privs.Store(w.last.Add(1))
		}
		poll = time.Now().Add(epochPrivilegePoll)
	}
}

// privilegesChanged reads the privileges' fingerprint (the roles'; without
// the event triggers, the grants' too) and reports whether it differs from
// the one read before (the first read reports no change).
func (w *catalogWatch) privilegesChanged(conn *pgx.Conn, armed bool) (bool, error) {
	ctx, cancel := context.WithTimeout(w.s.ctx, epochQueryTimeout)
	defer cancel()
	var roles, grants string
	if err := conn.QueryRow(ctx, rolesSQL).Scan(&roles); err != nil {
		return false, fmt.Errorf("compat: catalog watch on %q: roles: %w", w.db, err)
	}
	if !armed {
		if err := conn.QueryRow(ctx, grantsSQL).Scan(&grants); err != nil {
			return false, fmt.Errorf("compat: catalog watch on %q: grants: %w", w.db, err)
		}
	}
	fp := roles + "/" + grants
	changed := w.fingerprint != "" && fp != w.fingerprint
	w.fingerprint = fp
	return changed, nil
}
