'use strict';
// The npm bin `ojs-relay` is the core's relay command line (issue 26): the options are parsed
// by the core (clap), so an unknown flag is refused naming the accepted ones (exit 2) and
// `run --help` lists the same options as the Rust `ojs-relay run --help`; `run` is the
// standalone relay (no hot path, so no `relay.skip_recent`) with the core's `--listen` surface
// and its token rule. Real processes, a real SQLite file, the real ojs-devserver.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn, spawnSync } = require('node:child_process');
const net = require('node:net');
const path = require('node:path');
const { ojsPackage, PACKAGE_DIR, REPO, WAIT_MS, scratchDir, startDevserver, sqliteKnex, waitFor } = require('./support');

const { createOjs } = ojsPackage;
const BIN = path.join(PACKAGE_DIR, '..', '.bin', 'ojs-relay');
/** The Rust binary, built by pack.sh: the reference option list. */
const RUST_BIN = path.join(REPO, 'target', 'debug', 'ojs-relay');

/** An environment without the relay's variables, so only the flags count. */
function cleanEnv() {
  const env = { ...process.env };
  for (const name of ['OJS_URL', 'OJS_DATABASE_URL', 'OJS_RELAY_TOKEN']) delete env[name];
  return env;
}

/** The `--long` option names of a clap help text's "Options:" section. */
function longOptions(help) {
  const start = help.indexOf('\nOptions:\n');
  assert.ok(start >= 0, `no Options: section in\n${help}`);
  const section = help.slice(start + 10).split('\n\n')[0];
  return [...section.matchAll(/(?:^|[ ,])(--[a-z][a-z-]*)/gm)].map((m) => m[1]).sort();
}

let backend;
before(async () => {
  backend = await startDevserver();
});
after(async () => {
  await backend.stop();
});

test('an unknown flag is refused with exit 2, naming the accepted options', () => {
  for (const args of [['--bogus-flag'], ['run', '--bogus-flag'], ['--database-url', 'sqlite:///x.db', 'run', '--bogus-flag']]) {
    const done = spawnSync(BIN, args, { env: cleanEnv(), encoding: 'utf8', timeout: WAIT_MS });
    assert.equal(done.status, 2, `${args.join(' ')}: ${done.stdout}${done.stderr}`);
    assert.match(done.stderr, /unexpected argument '--bogus-flag'/);
    assert.match(done.stderr, /accepted options: .*--database-url/);
    if (args.includes('run')) assert.match(done.stderr, /accepted options: .*--listen.*--token/);
  }
});

test('run --help lists the options of the Rust ojs-relay run --help', () => {
  const node = spawnSync(BIN, ['run', '--help'], { env: cleanEnv(), encoding: 'utf8', timeout: WAIT_MS });
  assert.equal(node.status, 0, node.stderr);
  const rust = spawnSync(RUST_BIN, ['run', '--help'], { env: cleanEnv(), encoding: 'utf8', timeout: WAIT_MS });
  assert.equal(rust.status, 0, rust.stderr);
  const options = longOptions(node.stdout);
  assert.ok(options.includes('--listen') && options.includes('--token') && options.includes('--no-auth'), options.join(' '));
  assert.deepEqual(options, longOptions(rust.stdout));
});

/** A free TCP port on 127.0.0.1. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Spawns the bin; `stderr()` is what it wrote so far, `exited` resolves with {code, signal}. */
function startBin(args, env) {
  const child = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
  let stderr = '';
  child.stdout.on('data', (chunk) => (stderr += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  return { child, exited, stderr: () => stderr };
}

test('run --listen with a token serves /metrics, and the standalone relay skips no recent row', async () => {
  await backend.reset();
  const dir = scratchDir('relay-command');
  const file = path.join(dir, 'app.db');
  const knex = sqliteKnex(file);
  const table = 'node_relay_command';
  const ojs = createOjs({ url: backend.url, knex, outbox: { tableName: table }, relay: 'external', relayProcess: false, autoStart: false, handleSignals: false });
  let proc;
  try {
    await ojs.migrate();
    // A relay with the 1 s skip_recent of an in-process relay would skip a row younger than
    // 1 s in every round: the one a commit's wake-up starts and its re-checks (1, 4, 16 ms)
    // alike, and with a 30 s poll interval the next round comes 30 s after the start. So: start
    // the relay, wait until its watch of the database is in place (the core says so once the
    // watch is added), commit one row, and see it delivered well before that next round. What
    // this compares is a wake-up round against a poll 30 s away, not how fast the machine is.
    const port = await freePort();
    proc = startBin(
      ['--database-url', `sqlite://${file}`, '--table', table, 'run', '--ojs-url', backend.url, '--poll-interval', 'PT30S', '--listen', `127.0.0.1:${port}`, '--token', 'T0ken'],
      cleanEnv(),
    );
    await waitFor(() => {
      if (proc.child.exitCode !== null) throw new Error(`ojs-relay exited early:\n${proc.stderr()}`);
      return proc.stderr().includes('ojs-relay: relaying table node_relay_command') && proc.stderr().includes('woken by commits in other processes');
    }, WAIT_MS, 'the relaying line and the watch\'s');
    const jobId = await ojs.enqueueAfterCommit(knex, 'email.welcome', [1]);
    await waitFor(async () => (await backend.received()).jobs.some((job) => job.id === jobId), 20_000, `job ${jobId} delivered by its commit's wake-up, not by the poll 30 s after the start\n${proc.stderr()}`);

    const metrics = `http://127.0.0.1:${port}/metrics`;
    const refused = await fetch(metrics);
    assert.equal(refused.status, 401);
    const wrong = await fetch(metrics, { headers: { authorization: 'Bearer nope' } });
    assert.equal(wrong.status, 401);
    const served = await fetch(metrics, { headers: { authorization: 'Bearer T0ken' } });
    assert.equal(served.status, 200);
    assert.match(await served.text(), /ojs_relay_jobs_sent_total/);
    const health = await fetch(`http://127.0.0.1:${port}/healthz`);
    assert.equal(health.status, 200);
    // The core's line, through the relay's log feed (drained every 250 ms).
    await waitFor(() => proc.stderr().includes(`ojs-relay: INFO serving the event stream, /metrics, /healthz and /readyz on http://127.0.0.1:${port}`), WAIT_MS, `the serving line\n${proc.stderr()}`);

    proc.child.kill('SIGTERM');
    const { code, signal } = await proc.exited;
    assert.equal(signal, null, proc.stderr());
    assert.equal(code, 0, proc.stderr());
    assert.match(proc.stderr(), /ojs-relay: stopped/);
  } finally {
    if (proc && proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
    await ojs.close();
    await knex.destroy();
  }
});

test('run --listen without a token, a tenant token or --no-auth is refused, naming --listen', () => {
  const done = spawnSync(BIN, ['--database-url', 'sqlite:///nonexistent/x.db', 'run', '--ojs-url', 'http://127.0.0.1:9', '--listen', '127.0.0.1:0'], {
    env: cleanEnv(),
    encoding: 'utf8',
    timeout: WAIT_MS,
  });
  assert.equal(done.status, 2, done.stderr);
  assert.match(done.stderr, /error \[INVALID_CONFIG\]: --listen: /);
});
