-- Sequences with INCREMENT 100, 4096 and 9999 (Hibernate-style allocation)
-- follow the pgEdge rule on both paths. Exact values: after setval to a
-- fixed snowflake in the future (2030-01-01, count 0, node 5) the next IDs
-- stay in that millisecond as long as the count fits, so they are known in
-- advance. Relative checks: counts and ms differences between consecutive
-- IDs, never absolute times.
\set VERBOSITY verbose
\set SHOW_CONTEXT never
-- 2030-01-01 00:00:00 UTC is 220924800000 ms after the snowflake epoch
\set future '((220924800000::int8 << 22) | (5 << 12))'
CREATE SEQUENCE s1;
CREATE SEQUENCE s100 INCREMENT 100;
CREATE SEQUENCE s100_mixed INCREMENT 100;
CREATE SEQUENCE s100_end INCREMENT 100;
CREATE SEQUENCE s100_end2 INCREMENT 100;
CREATE SEQUENCE s100_table INCREMENT 100;
CREATE SEQUENCE s4096 INCREMENT 4096;
CREATE SEQUENCE s9999 INCREMENT 9999;
-- exact: the count advances by the increment inside one millisecond,
-- the node bits are this session's node, not those of last_value
SELECT setval('s1', :future) = :future AS set;
SELECT snowflake.nextval('s1'), snowflake.nextval('s1');
SELECT snowflake.format(snowflake.nextval('s1'));
SELECT setval('s100', :future) = :future AS set;
SELECT snowflake.nextval('s100');
SELECT snowflake.nextval('s100');
SELECT snowflake.format(snowflake.nextval('s100'));
SELECT snowflake.currval('s100');
-- once per statement, then per row (the shim), then once per statement
SELECT setval('s100_mixed', :future) = :future AS set;
SELECT snowflake.nextval('s100_mixed');
SELECT snowflake.nextval('s100_mixed') FROM generate_series(1, 3);
SELECT snowflake.currval('s100_mixed');
SELECT snowflake.nextval('s100_mixed');
-- near the end of the millisecond: 4000 + 100 > 4095 moves to the next ms
SELECT setval('s100_end', :future | 4000) > 0 AS set;
SELECT snowflake.format(snowflake.nextval('s100_end'));
SELECT snowflake.format(snowflake.nextval('s100_end'));
SELECT snowflake.nextval('s100_end') FROM generate_series(1, 2);
-- 2971 + 100 = 3071 still fits the millisecond (the proxy's fast path
-- keeps to counts below 3072, where the extension goes on to 4095: README,
-- "Differences"). A fresh sequence: a setval below IDs already issued is
-- followed by the extension, while the proxy's fast path never issues
-- below its own earlier IDs.
SELECT setval('s100_end2', :future | 2971) > 0 AS set;
SELECT snowflake.format(snowflake.nextval('s100_end2'));
-- INCREMENT 4096 and 9999: count 0 each time, ms + 1 each call
SELECT setval('s4096', :future) = :future AS set;
SELECT snowflake.nextval('s4096');
SELECT snowflake.nextval('s4096');
SELECT snowflake.format(snowflake.nextval('s4096')), snowflake.format(snowflake.nextval('s4096'));
SELECT setval('s9999', :future) = :future AS set;
SELECT snowflake.format(snowflake.nextval('s9999'));
SELECT snowflake.format(snowflake.nextval('s9999'));
-- the default sequence in the same way
SELECT setval('snowflake.id_seq', :future | 4095) > 0 AS set;
SELECT snowflake.format(snowflake.nextval());
SELECT snowflake.format(snowflake.nextval());
-- as column defaults, one row and many rows
CREATE TABLE inc (id bigint PRIMARY KEY DEFAULT snowflake.nextval('s100_table'), ord serial, v text);
SELECT setval('s100_table', :future) > 0 AS set;
INSERT INTO inc (v) VALUES ('a') RETURNING id, snowflake.format(id);
INSERT INTO inc (v) VALUES ('b'), ('c'), ('d') RETURNING id, snowflake.format(id);
INSERT INTO inc (v) SELECT 'sel' || g FROM generate_series(1, 2) g RETURNING id, snowflake.format(id);
INSERT INTO inc DEFAULT VALUES RETURNING id;
SELECT snowflake.currval('s100_table');
-- relative checks at the present time: fresh sequences, many IDs. The
-- per-row calls use sequences of their own: while the fast path holds a
-- lease on a sequence, the shim keeps to the counts from 3072 up, and
-- where the two paths meet only order is owed (docs/state-model.md).
CREATE SEQUENCE r100 INCREMENT 100;
CREATE SEQUENCE r4096 INCREMENT 4096;
CREATE SEQUENCE r9999 INCREMENT 9999;
CREATE SEQUENCE r100_rows INCREMENT 100;
CREATE SEQUENCE r4096_rows INCREMENT 4096;
CREATE SEQUENCE r9999_rows INCREMENT 9999;
CREATE TABLE ids (seq text, n int, id bigint);
SELECT snowflake.nextval('r100') AS v \gset
INSERT INTO ids VALUES ('r100', 1, :v);
SELECT snowflake.nextval('r100') AS v \gset
INSERT INTO ids VALUES ('r100', 2, :v);
SELECT snowflake.nextval('r100') AS v \gset
INSERT INTO ids VALUES ('r100', 3, :v);
INSERT INTO ids SELECT 'r100_rows', g, snowflake.nextval('r100_rows') FROM generate_series(1, 50) g;
SELECT snowflake.nextval('r4096') AS v \gset
INSERT INTO ids VALUES ('r4096', 1, :v);
SELECT snowflake.nextval('r4096') AS v \gset
INSERT INTO ids VALUES ('r4096', 2, :v);
INSERT INTO ids SELECT 'r4096_rows', g, snowflake.nextval('r4096_rows') FROM generate_series(1, 50) g;
SELECT snowflake.nextval('r9999') AS v \gset
INSERT INTO ids VALUES ('r9999', 1, :v);
SELECT snowflake.nextval('r9999') AS v \gset
INSERT INTO ids VALUES ('r9999', 2, :v);
INSERT INTO ids SELECT 'r9999_rows', g, snowflake.nextval('r9999_rows') FROM generate_series(1, 50) g;
-- for consecutive IDs a, b of one sequence: either the same ms and
-- count(b) = count(a) + increment, or a later ms and count(b) = 0
SELECT seq, count(*) AS ids,
       count(*) FILTER (WHERE snowflake.get_node(id) <> 1) AS wrong_node,
       count(*) FILTER (WHERE snowflake.get_count(id) % CASE WHEN seq LIKE 'r100%' THEN 100 ELSE 4096 END <> 0) AS count_not_multiple,
       count(*) FILTER (WHERE prev IS NOT NULL AND NOT (
         ((id >> 22) = (prev >> 22) AND snowflake.get_count(id) = snowflake.get_count(prev) + CASE WHEN seq LIKE 'r100%' THEN 100 ELSE 4096 END)
         OR ((id >> 22) > (prev >> 22) AND snowflake.get_count(id) = 0))) AS rule_broken,
       count(*) FILTER (WHERE prev IS NOT NULL AND id <= prev) AS not_increasing
  FROM (SELECT seq, id, lag(id) OVER (PARTITION BY seq ORDER BY n) AS prev FROM ids) s
 GROUP BY seq ORDER BY seq;
