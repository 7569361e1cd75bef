'use strict';
// The example's job handlers, run by the package's worker (the running side of the job that
// POST /signup stages):
//
//   OJS_URL=http://127.0.0.1:8080 DATABASE_FILE=app.db npx ojs-worker --handlers ./jobs.js --queue default
//
// A handler gets the job's args and a context (id, attempt, traceparent, signal, ...); what it
// returns is the job's result, what it throws fails the attempt (the job's retry policy
// decides what follows).

const knexLib = require('knex');

const knex = knexLib({
  client: 'better-sqlite3',
  connection: { filename: process.env.DATABASE_FILE || 'app.db' },
  useNullAsDefault: true,
});

module.exports = {
  'email.welcome': async ([userId], ctx) => {
    const user = await knex('users').where({ id: userId }).first();
    if (!user) throw Object.assign(new Error(`no user ${userId}`), { code: 'USER_NOT_FOUND' });
    // A real app would call its mail service here (passing ctx.signal to abort on timeout).
    console.log(`welcome email sent to ${user.email} (user ${userId}, job ${ctx.id})`);
    return { sentTo: user.email };
  },
};
