'use strict';
// Example Express + knex app: POST /signup creates a user and stages the welcome email in the
// same transaction; the job reaches the OJS backend only if the transaction commits.
//
//   OJS_URL=http://127.0.0.1:8080 DATABASE_FILE=app.db node app.js
//   curl -XPOST localhost:3000/signup -H 'content-type: application/json' -d '{"email":"ada@example.com"}'
//   (a body with "plan": "declined" fails after staging: the transaction rolls back, nothing is sent)
//
// The job's handler is in jobs.js, run by the package's worker:
//   OJS_URL=http://127.0.0.1:8080 DATABASE_FILE=app.db npx ojs-worker --handlers ./jobs.js --queue default

const express = require('express');
const knexLib = require('knex');
const { createOjs, ojsMiddleware, OJSError } = require('ojs-adapter-express');

const knex = knexLib({
  client: 'better-sqlite3',
  connection: { filename: process.env.DATABASE_FILE || 'app.db' },
  useNullAsDefault: true,
});
// The relay's database URL is derived from the knex settings (sqlite://<absolute path>).
const ojs = createOjs({ url: process.env.OJS_URL || 'http://127.0.0.1:8080', knex });

const app = express();
app.use(express.json());
app.use(ojsMiddleware(ojs));

app.post('/signup', async (req, res) => {
  const { email, plan } = req.body || {};
  try {
    const user = await ojs.transaction(async (trx) => {
      const [row] = await trx('users').insert({ email }).returning('id');
      const jobId = await req.ojs.enqueueAfterCommit('email.welcome', [row.id]);
      if (plan === 'declined') throw new Error('payment declined');
      return { id: row.id, jobId };
    });
    res.status(201).json(user);
  } catch (error) {
    // An OJSError (bad job input) carries its code; the app's own errors roll back as 422.
    if (error instanceof OJSError) res.status(400).json({ error: error.message, code: error.code });
    else res.status(422).json({ error: error.message });
  }
});

async function main() {
  if (!(await knex.schema.hasTable('users'))) {
    await knex.schema.createTable('users', (table) => {
      table.increments('id');
      table.string('email').notNullable();
    });
  }
  await ojs.ready;
  const server = app.listen(Number(process.env.PORT || 3000), '127.0.0.1', () => {
    console.log(`example app listening on http://127.0.0.1:${server.address().port}`);
  });
  // createOjs flushes the relay on SIGTERM/SIGINT by itself; with a listener of our own, we
  // decide when to exit: here by letting the event loop empty.
  process.once('SIGTERM', async () => {
    server.close();
    await ojs.close();
    await knex.destroy();
  });
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
