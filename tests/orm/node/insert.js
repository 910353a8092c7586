// node-postgres through snowflake-proxy: inserts rows without ids and reads
// the ids back with RETURNING, over the simple protocol (a query without
// values), the extended protocol (values: an unnamed statement) and a named
// prepared statement executed several times. Prints one JSON object on
// stdout; tests/orm/node_test.go checks it.
//
// Environment: PGURL, a postgres:// URL of the proxy and a database where
// CREATE EXTENSION snowflake was run.
'use strict';

const { Client } = require('pg');

async function main() {
  const url = process.env.PGURL;
  if (!url) {
    throw new Error('PGURL is not set');
  }
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(
      'CREATE TABLE items (id bigint PRIMARY KEY DEFAULT snowflake.nextval(), name text NOT NULL, via text NOT NULL)');
    const out = { simple: [], param: [], prepared: [], many: [], readBack: [] };

    // Simple protocol: no values.
    let r = await client.query("INSERT INTO items (name, via) VALUES ('s1', 'simple') RETURNING id");
    out.simple.push(...r.rows.map((row) => row.id));
    r = await client.query("INSERT INTO items (name, via) VALUES ('s2', 'simple'), ('s3', 'simple') RETURNING id, name");
    out.simple.push(...r.rows.map((row) => row.id));

    // Extended protocol, unnamed statement.
    for (const name of ['p1', 'p2']) {
      r = await client.query('INSERT INTO items (name, via) VALUES ($1, $2) RETURNING id', [name, 'param']);
      out.param.push(...r.rows.map((row) => row.id));
    }

    // A named prepared statement: parsed once, then bound and executed
    // again; every execution must get a fresh id.
    for (const name of ['n1', 'n2', 'n3']) {
      r = await client.query({
        name: 'ins',
        text: 'INSERT INTO items (name, via) VALUES ($1, $2) RETURNING id',
        values: [name, 'prepared'],
      });
      out.prepared.push(...r.rows.map((row) => row.id));
    }

    // Several rows in one parameterised statement, DEFAULT keyword included.
    r = await client.query({
      name: 'ins_many',
      text: 'INSERT INTO items (id, name, via) VALUES (DEFAULT, $1, $3), (DEFAULT, $2, $3) RETURNING id',
      values: ['m1', 'm2', 'many'],
    });
    out.many.push(...r.rows.map((row) => row.id));

    r = await client.query('SELECT id, name, via, snowflake.get_node(id) AS node FROM items ORDER BY id');
    out.readBack = r.rows;
    process.stdout.write(JSON.stringify(out) + '\n');
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  process.stderr.write(`error: ${err.stack || err}\n`);
  process.exit(1);
});
