// node-postgres with pg-copy-streams through snowflake-proxy: COPY ...
// FROM STDIN in text and csv into a table whose id defaults to
// snowflake.nextval(), the rows written in many small chunks, then read
// back in row order. Prints one JSON object on stdout;
// tests/orm/node_test.go checks it.
//
// Environment: PGURL, a postgres:// URL of the proxy and a database where
// CREATE EXTENSION snowflake was run and copy_items exists.
'use strict';

const { Client } = require('pg');
const { from: copyFrom } = require('pg-copy-streams');
const { pipeline } = require('node:stream/promises');
const { Readable } = require('node:stream');

const ROWS = 2000;

async function load(client, sql, lines) {
  // Chunks of 7 bytes: rows split across CopyData messages everywhere.
  const data = Buffer.from(lines.join(''));
  const chunks = [];
  for (let i = 0; i < data.length; i += 7) {
    chunks.push(data.subarray(i, i + 7));
  }
  const stream = client.query(copyFrom(sql));
  await pipeline(Readable.from(chunks), stream);
  return stream.rowCount;
}

async function main() {
  const url = process.env.PGURL;
  if (!url) {
    throw new Error('PGURL is not set');
  }
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    const out = { text: 0, csv: 0, rows: [] };
    const text = [];
    const csv = [];
    for (let i = 0; i < ROWS; i++) {
      text.push(`text ${i}\t${i}\n`);
      csv.push(`"csv, ${i}\n(two lines)",${i}\n`);
    }
    out.text = await load(client, 'COPY copy_items (v, w) FROM STDIN', text);
    out.csv = await load(client, 'COPY copy_items (v, w) FROM STDIN WITH (FORMAT csv)', csv);
    const r = await client.query('SELECT id, v, w FROM copy_items ORDER BY n');
    out.rows = r.rows;
    process.stdout.write(JSON.stringify(out));
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + '\n');
  process.exit(1);
});
