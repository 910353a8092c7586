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
// superuser status are not objects of the database (REVOKE grp FROM alice
// and ALTER ROLE ... NOSUPERUSER fire no event trigger), nor is REASSIGN
// OWNED announced, and in a database whose shim was installed without the
// triggers nothing is. So the watch also reads a fingerprint of the
// privileges (privilegesSQL) every epochPrivilegePoll and moves the
// database's privilege epoch when it changes; every move of the catalog
// epoch moves it too. A session whose caches were built at another
// privilege epoch drops them.
//
// The privilege epoch is 0 while the watch is not connected (changes
// cannot be seen); sessions then keep what they cached.

// epochPrivilegePoll is how often the watch reads the fingerprint: how
// long a revoked privilege may still be taken from a session's cache.
const epochPrivilegePoll = 250 * time.Millisecond

// privilegesSQL is a fingerprint of what decides whether a role may use a
// sequence: role memberships (whole rows: PostgreSQL 16 added options),
// the roles that are superusers or do not inherit (a role created or
// dropped plainly changes nobody's privileges, and roles are the whole
// server's: every database's sessions would drop their caches), the
// sequences (which exist, their owners, grants and increments) and the
// schemas' owners and grants. Sums of hashes: no sort of the catalog, and
// no md5, which a server in FIPS mode refuses. The sequences' part hashes
// numbers and ACL arrays as they are, with pg_sequence read apart: on a
// catalog of many sequences the text of every ACL, joined, cost three
// times as much (bench/README.md), four times a second. Every catalog
// read is readable by every role.
const privilegesSQL = `SELECT
	(SELECT pg_catalog.count(*)::pg_catalog.text || ':' || coalesce(pg_catalog.sum(
		pg_catalog.hashtext(m::pg_catalog.text))::pg_catalog.text, '')
	FROM pg_catalog.pg_auth_members m)
	|| '/' || (SELECT coalesce(pg_catalog.sum(pg_catalog.hashtext(r.oid::pg_catalog.text || ':'
		|| r.rolsuper::pg_catalog.text || r.rolinherit::pg_catalog.text))::pg_catalog.text, '')
	FROM pg_catalog.pg_roles r WHERE r.rolsuper OR NOT r.rolinherit)
	|| '/' || (SELECT pg_catalog.count(*)::pg_catalog.text || ':' || coalesce(pg_catalog.sum(
		pg_catalog.hashint8(c.oid::pg_catalog.int8 OPERATOR(pg_catalog.#) (c.relowner::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32))::pg_catalog.int8
		OPERATOR(pg_catalog.+) coalesce(pg_catalog.hash_array(c.relacl), 0))::pg_catalog.text, '')
	FROM pg_catalog.pg_class c WHERE c.relkind OPERATOR(pg_catalog.=) 'S')
	|| '/' || (SELECT coalesce(pg_catalog.sum(pg_catalog.hashint8(s.seqrelid::pg_catalog.int8
		OPERATOR(pg_catalog.#) (s.seqincrement OPERATOR(pg_catalog.<<) 32)))::pg_catalog.text, '')
	FROM pg_catalog.pg_sequence s)
	|| '/' || (SELECT coalesce(pg_catalog.sum(pg_catalog.hashtext(n.oid::pg_catalog.text || ':'
		|| n.nspowner::pg_catalog.text || ':' || coalesce(n.nspacl::pg_catalog.text, '')))::pg_catalog.text, '')
	FROM pg_catalog.pg_namespace n)`

// waitPolling waits for up to d as wait does (an unarmed watch also for a
// nudge), reading the privileges' fingerprint whenever epochPrivilegePoll
// has passed since the last reading, and moving the privilege epoch when
// it changed. It returns early after a notification (which moved the
// epochs when armed; unarmed, the caller looks for the event triggers
// again) or a nudge. The time of the next reading is the watch's, not the
// call's: sessions nudge an unarmed watch at every INSERT, and any role
// may notify, and a reading put off at every return would never come
// (regression). It returns errWatchIdle once no session has asked for the
// epochs for DatabaseIdle.
func (w *catalogWatch) waitPolling(conn *pgx.Conn, d time.Duration, armed bool) error {
	end := time.Now().Add(d)
	for {
		if w.idle(time.Now()) {
			return errWatchIdle
		}
		if !time.Now().Before(w.nextPoll) {
			changed, err := w.privilegesChanged(conn)
			if err != nil {
				return err
			}
			if changed {
				w.movePrivs()
			}
		}
		ev, err := w.wait(conn, min(time.Until(end), time.Until(w.nextPoll)), !armed)
		if err != nil {
			return err
		}
		if ev != waitTimeout || !time.Now().Before(end) {
			return nil
		}
	}
}

// privilegesChanged reads the privileges' fingerprint and reports whether
// it differs from the one read before (the first read reports no change).
func (w *catalogWatch) privilegesChanged(conn *pgx.Conn) (bool, error) {
	ctx, cancel := context.WithTimeout(w.s.ctx, epochQueryTimeout)
	defer cancel()
	var fp string
	if err := conn.QueryRow(ctx, privilegesSQL).Scan(&fp); err != nil {
		return false, fmt.Errorf("compat: catalog watch on %q: privileges: %w", w.db, err)
	}
	changed := w.fingerprint != "" && fp != w.fingerprint
	w.fingerprint = fp
	w.nextPoll = time.Now().Add(epochPrivilegePoll)
	return changed, nil
}

// movePrivs moves the privilege epoch.
func (w *catalogWatch) movePrivs() { w.privs.Store(w.s.privEpochs.Add(1)) }
