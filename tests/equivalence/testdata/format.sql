-- format, get_epoch, get_node, get_count, to_timestamp(get_epoch(...)):
-- fixed IDs (from 2024, compared exactly) and fresh ones (masked), under
-- several TimeZones and DateStyles.
\set VERBOSITY verbose
\set SHOW_CONTEXT never
-- 136169504773263367 = 2024-01-11 18:08:59.845 UTC, node 5, count 7
SELECT snowflake.get_epoch(136169504773263367), snowflake.get_node(136169504773263367), snowflake.get_count(136169504773263367);
SELECT pg_typeof(snowflake.get_epoch(1)) AS epoch_type, pg_typeof(snowflake.get_node(1)) AS node_type,
       pg_typeof(snowflake.get_count(1)) AS count_type, pg_typeof(snowflake.format(1)) AS format_type;
-- 136169501233250303 = 2024-01-11 18:08:59.000 UTC, node 1023, count 4095
SELECT snowflake.get_epoch(136169501233250303), snowflake.get_node(136169501233250303), snowflake.get_count(136169501233250303);
-- 199098578218520576 = 2024-07-03 09:46:40.120 UTC (summer time), node 1, count 0
SELECT snowflake.get_epoch(199098578218520576), snowflake.get_node(199098578218520576), snowflake.get_count(199098578218520576);
SELECT snowflake.get_epoch(0), snowflake.get_node(0), snowflake.get_count(0), snowflake.format(0);
SELECT snowflake.get_node(NULL), snowflake.format(NULL);
SHOW TimeZone;
SHOW DateStyle;
SELECT snowflake.format(136169504773263367);
SELECT to_timestamp(snowflake.get_epoch(136169504773263367)) AS ts;
SELECT id, snowflake.format(id) FROM (VALUES (136169504773263367), (136169501233250303), (199098578218520576)) v(id);
SET TimeZone = 'Asia/Kolkata';
SELECT snowflake.format(136169504773263367);
SELECT snowflake.format(199098578218520576), to_timestamp(snowflake.get_epoch(199098578218520576)) AS ts;
SET TimeZone = 'America/New_York';
SELECT snowflake.format(136169504773263367), snowflake.format(199098578218520576);
SET DateStyle = 'SQL, DMY';
SELECT snowflake.format(136169504773263367), snowflake.format(199098578218520576);
SELECT to_timestamp(snowflake.get_epoch(136169504773263367)) AS ts;
SET DateStyle = 'Postgres, MDY';
SELECT snowflake.format(136169504773263367);
SET DateStyle = 'German';
SELECT snowflake.format(136169504773263367);
SET TimeZone = 'UTC';
SELECT snowflake.format(136169504773263367);
RESET DateStyle;
RESET TimeZone;
SELECT snowflake.format(136169504773263367);
-- SET LOCAL TimeZone applies inside the transaction only
BEGIN;
SET LOCAL TimeZone = 'Asia/Kolkata';
SELECT snowflake.format(136169504773263367);
COMMIT;
SELECT snowflake.format(136169504773263367);
-- fresh IDs: the format follows the session's settings as well (the count
-- of a fresh ID depends on timing: it is removed from what is shown)
SELECT snowflake.nextval() AS id \gset
SELECT snowflake.format(:id) - 'count';
SELECT snowflake.format(:id) = jsonb_build_object('id', 1, 'ts', to_timestamp(snowflake.get_epoch(:id))::text, 'count', snowflake.get_count(:id)) AS format_matches;
SELECT snowflake.get_epoch(:id), snowflake.get_node(:id);
SELECT to_timestamp(snowflake.get_epoch(:id)) AS ts;
SELECT snowflake.get_epoch(:id) = round(snowflake.get_epoch(:id), 3) AS three_decimals,
       snowflake.get_epoch(:id) = ((:id >> 22) + 1672531200000) / 1000.0 AS epoch_rule;
SET TimeZone = 'Asia/Kolkata';
SET DateStyle = 'SQL, DMY';
SELECT snowflake.format(:id) - 'count';
SELECT to_timestamp(snowflake.get_epoch(:id)) AS ts;
SET DateStyle = 'Postgres, DMY';
SELECT snowflake.format(:id) - 'count';
SET DateStyle = 'German';
SELECT snowflake.format(:id) - 'count';
-- in one statement with nextval
SET DateStyle = 'ISO, MDY';
SELECT snowflake.format(snowflake.nextval()) - 'count';
SELECT snowflake.get_node(snowflake.nextval()), snowflake.get_count(snowflake.nextval('snowflake.id_seq')) < 4096 AS count_ok;
SELECT (snowflake.format(snowflake.nextval()))->>'id' AS node;
SET TimeZone = 'UTC';
SELECT snowflake.format(snowflake.nextval()) - 'count';
SELECT to_timestamp(snowflake.get_epoch(snowflake.nextval())) AS ts;
-- as rows of a table
CREATE TABLE f (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), v text);
INSERT INTO f (v) VALUES ('a'), ('b');
SELECT id, snowflake.format(id) - 'count', v FROM f ORDER BY id;
SELECT snowflake.get_node(id), snowflake.get_count(id) < 4096 AS count_ok, to_timestamp(snowflake.get_epoch(id)) <= now() + interval '1 hour' AS not_in_future FROM f ORDER BY id;
