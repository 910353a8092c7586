-- IDs are not given back: a transaction that rolls back keeps the sequence
-- advanced. (currval after a rollback differs between the shim and the
-- extension, and the proxy's fast path and the shim: README, "Differences".)
\set VERBOSITY verbose
\set SHOW_CONTEXT never
CREATE SEQUENCE rs;
CREATE TABLE rt (id bigint PRIMARY KEY DEFAULT snowflake.nextval('rs'), v text);
BEGIN;
SELECT snowflake.nextval('rs') AS in_tx \gset
INSERT INTO rt (v) VALUES ('rolled back') RETURNING id AS in_tx_row \gset
ROLLBACK;
SELECT count(*) FROM rt;
SELECT snowflake.nextval('rs') > :in_tx_row AS next_is_larger;
-- built-in sequences, for comparison
CREATE SEQUENCE plain;
BEGIN;
SELECT nextval('plain');
ROLLBACK;
SELECT currval('plain'), nextval('plain');
-- a savepoint rolled back
BEGIN;
INSERT INTO rt (v) VALUES ('kept 1');
SAVEPOINT sp;
INSERT INTO rt (v) VALUES ('undone') RETURNING id AS undone \gset
ROLLBACK TO SAVEPOINT sp;
INSERT INTO rt (v) VALUES ('kept 2') RETURNING id > :undone AS larger_than_undone;
COMMIT;
SELECT v FROM rt ORDER BY id;
-- a failed statement: the ID it took is not reused
BEGIN;
INSERT INTO rt (v) VALUES ('fails'), (NULL::text || 1/0);
ROLLBACK;
INSERT INTO rt (v) VALUES ('after failure') RETURNING id > :undone AS larger;
-- a duplicate key aborts the transaction, the ID is gone
CREATE TABLE ru (id bigint PRIMARY KEY DEFAULT snowflake.nextval('rs'), k int UNIQUE);
INSERT INTO ru (k) VALUES (1);
BEGIN;
INSERT INTO ru (k) VALUES (2);
INSERT INTO ru (k) VALUES (1);
INSERT INTO ru (k) VALUES (3);
COMMIT;
SELECT k FROM ru ORDER BY id;
SELECT count(DISTINCT id) AS distinct_ids, count(*) FROM (SELECT id FROM rt UNION ALL SELECT id FROM ru) s;
-- DDL rolled back: the table does not exist afterwards
BEGIN;
CREATE TABLE gone (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), v text);
INSERT INTO gone (v) VALUES ('x') RETURNING v;
ROLLBACK;
INSERT INTO gone (v) VALUES ('y');
CREATE TABLE gone (id bigint PRIMARY KEY DEFAULT 5, v text);
INSERT INTO gone (v) VALUES ('z') RETURNING id, v;
