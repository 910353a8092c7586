-- convert_column_to_int8: returns how many columns it altered, recursing
-- into the foreign keys that reference the column, with a NOTICE for each
-- ALTER TABLE it runs.
\set VERBOSITY verbose
\set SHOW_CONTEXT never
CREATE TABLE parent (id integer PRIMARY KEY, v text);
CREATE TABLE child (id integer PRIMARY KEY, parent_id integer REFERENCES parent (id), v text);
CREATE TABLE grandchild (id smallint PRIMARY KEY, child_id integer REFERENCES child (id));
CREATE TABLE big (id bigint PRIMARY KEY);
INSERT INTO parent VALUES (1, 'p');
INSERT INTO child VALUES (10, 1, 'c');
SELECT snowflake.convert_column_to_int8('parent'::regclass, 1::smallint);
SELECT table_name, column_name, data_type FROM information_schema.columns
 WHERE table_schema = 'public' AND column_name IN ('id', 'parent_id', 'child_id') ORDER BY 1, 2;
-- a column that already is int8: nothing to do
SELECT snowflake.convert_column_to_int8('big', 1::smallint);
SELECT snowflake.convert_column_to_int8('parent', 1::smallint);
-- a referencing column on its own
SELECT snowflake.convert_column_to_int8('grandchild', 2::smallint);
SELECT snowflake.convert_column_to_int8('child', 1::smallint);
SELECT table_name, column_name, data_type FROM information_schema.columns
 WHERE table_schema = 'public' AND column_name IN ('id', 'parent_id', 'child_id') ORDER BY 1, 2;
-- the data survived
SELECT * FROM parent JOIN child ON child.parent_id = parent.id;
-- a table in another schema, a column that is not the first
CREATE SCHEMA cc;
CREATE TABLE cc.t (a text, n integer);
SELECT snowflake.convert_column_to_int8('cc.t', 2::smallint);
\d cc.t
-- errors: a column that does not exist, a relation that does not exist
SELECT snowflake.convert_column_to_int8('parent', 9::smallint);
SELECT snowflake.convert_column_to_int8('no_such_table', 1::smallint);
