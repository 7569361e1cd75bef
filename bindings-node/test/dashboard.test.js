'use strict';
// The dashboard (issue 29) in a real headless browser: Debian's Chromium driven by
// playwright-core, against `ojs.router()` in a real Express server, a real outbox on SQLite and
// PostgreSQL and the devserver. The operator sees the backlog and the dead letters, replays
// one from the page (with the confirmation) and sees it delivered in the live feed; a tenant
// sees only its own rows; a read-only caller gets no write buttons; a viewer that may not
// decode sees encrypted args as "encrypted". No page error, no CSP violation.
// With OJS_SCREENSHOT_DIR set, the SQLite run saves the screenshots docs/operations.md shows.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const express = require('express');
const { chromium } = require('playwright-core');
const { ojsPackage, scratchDir, startDevserver, sqliteKnex, postgresKnex, waitFor, WAIT_MS } = require('./support');

const { createOjs } = ojsPackage;
const CHROMIUM = process.env.OJS_CHROMIUM || '/usr/bin/chromium';
const KEY = Buffer.alloc(32, 7).toString('base64');

let backend;
let browser;
before(async () => {
  backend = await startDevserver();
  // Root in CI containers: Chromium's sandbox needs user namespaces it may not have.
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});
after(async () => {
  await browser?.close();
  await backend.stop();
});

/** Who calls, from the `who` cookie the browser context carries (the app's own session). */
function authorize(req) {
  const who = /(?:^|;\s*)who=([^;]*)/.exec(req.get('cookie') || '')?.[1] || '';
  if (who === 'operator') return true;
  if (who === 'viewer') return { read_only: true };
  if (who.startsWith('tenant-')) return { tenant: who.slice('tenant-'.length) };
  return false;
}

async function serve(ojs) {
  const app = express();
  app.use('/ojs', ojs.router({ authorize }));
  const server = await new Promise((resolve) => {
    const listening = app.listen(0, '127.0.0.1', () => resolve(listening));
  });
  return { base: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
}

/** A page for `who`, failing the test on any page error or CSP violation. */
async function pageFor(base, who, problems) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.addCookies([{ name: 'who', value: who, url: base }]);
  const page = await context.newPage();
  page.on('pageerror', (error) => problems.push(`${who}: ${error.message}`));
  // A refused probe of the test's own is expected; any other failed request is a problem.
  const probes = new Set();
  page.on('console', (message) => {
    if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) {
      problems.push(`${who}: console: ${message.text()}`);
    }
  });
  page.on('response', (response) => {
    if (response.status() >= 400 && !probes.has(new URL(response.url()).pathname)) {
      problems.push(`${who}: ${response.status()} ${response.url()}`);
    }
  });
  return { page, probes, close: () => context.close() };
}

async function stage(ojs, type, args, tenant) {
  return ojs.withContext({ tenant_id: tenant }, () =>
    ojs.transaction(async (trx) => ojs.enqueueAfterCommit(trx, type, args)),
  );
}

for (const database of ['sqlite', 'postgres']) {
  test(`${database}: the dashboard in a real browser: see, replay from the page, live feed, tenants, read-only`, async () => {
    await backend.reset();
    await backend.call('DELETE', '/_dev/faults');
    const knex = database === 'sqlite' ? sqliteKnex(path.join(scratchDir(`dashboard-${database}`), 'app.db')) : postgresKnex();
    const table = `node_dashboard_${database}`;
    await knex.schema.dropTableIfExists(table);
    const ojs = createOjs({
      url: backend.url,
      knex,
      outbox: { tableName: table },
      encryption: { key_id: 'k1', keys: { k1: KEY } },
      handleSignals: false,
    });
    await ojs.migrate();
    await ojs.ready;
    const server = await serve(ojs);
    const problems = [];
    const screenshots = database === 'sqlite' ? process.env.OJS_SCREENSHOT_DIR : undefined;
    try {
      await backend.call('POST', '/_dev/faults', { status: 400, match_type: 'poison.job' });
      const good = await stage(ojs, 'email.welcome', ['ada@example.com'], 'acme');
      const acmeDead = await stage(ojs, 'poison.job', [1], 'acme');
      const globexDead = await stage(ojs, 'poison.job', [2], 'globex');
      const dead = () => knex(table).where({ status: 'dead' }).count({ n: '*' }).first();
      await waitFor(async () => Number((await dead()).n) === 2, WAIT_MS, 'two dead rows');
      await waitFor(async () => (await backend.received()).jobs.some((j) => j.id === good), WAIT_MS, 'the good job sent');

      // The operator: counts, the dead letters of every tenant, a job's detail.
      const operator = await pageFor(server.base, 'operator', problems);
      const { page } = operator;
      const response = await page.goto(`${server.base}/ojs/dashboard`);
      assert.equal(response.status(), 200);
      assert.equal(new URL(page.url()).pathname, '/ojs/dashboard/', 'redirected to the slash');
      assert.match(response.headers()['content-security-policy'], /script-src 'self'/);
      await page.locator('#count-dead', { hasText: '2' }).waitFor();
      await page.locator('#health .ok').waitFor();
      // The relay of this app lists itself, with a fresh heartbeat.
      // (PostgreSQL only: on SQLite a relay writes no heartbeat.)
      if (database === 'postgres') await page.locator('#relays tbody tr td.ok').first().waitFor();
      if (screenshots) await page.screenshot({ path: path.join(screenshots, 'dashboard-overview.png'), fullPage: true });

      await page.click('nav button[data-tab="jobs"]');
      await page.fill('#jobs-filter input[name="job_id"]', good);
      await page.click('#jobs-filter button[type="submit"]');
      await page.click(`#rows button[data-job-id="${good}"]`);
      await page.locator('#detail-status', { hasText: 'sent' }).waitFor();
      // Encrypted args are "encrypted" until the operator decodes them through the Codec Server.
      assert.equal(await page.textContent('#detail-args'), 'encrypted');
      await page.click('#decode');
      await page.locator('#detail-args', { hasText: 'ada@example.com' }).waitFor();
      if (screenshots) await page.screenshot({ path: path.join(screenshots, 'dashboard-job.png'), fullPage: true });

      // Follow the live feed first, then replay acme's dead letter from the page.
      await page.click('nav button[data-tab="live"]');
      await page.locator('#live-state', { hasText: 'connected' }).waitFor();
      await page.click('nav button[data-tab="dead"]');
      await page.locator(`#dead-rows tr[data-job-id="${globexDead}"]`).waitFor();
      assert.equal(await page.locator('#dead-rows tbody tr').count(), 2);
      if (screenshots) await page.screenshot({ path: path.join(screenshots, 'dashboard-dead.png'), fullPage: true });
      await backend.call('DELETE', '/_dev/faults');
      await page.check(`#dead-rows tr[data-job-id="${acmeDead}"] input`);
      await page.click('#replay');
      assert.match(await page.textContent('#confirm-text'), /Replay 1 dead row/);
      await page.click('#confirm-ok');
      await page.locator('#dead-result', { hasText: 'replayed 1' }).waitFor();
      await page.click('nav button[data-tab="live"]');
      await page.locator(`#feed li[data-type="job.enqueued"][data-job-id="${acmeDead}"]`).waitFor();
      if (screenshots) await page.screenshot({ path: path.join(screenshots, 'dashboard-live.png'), fullPage: true });
      assert.ok((await backend.received()).jobs.some((j) => j.id === acmeDead), 'the replayed job reached the backend');
      await operator.close();

      // A tenant sees only its own rows, and may not decode.
      const globex = await pageFor(server.base, 'tenant-globex', problems);
      await globex.page.goto(`${server.base}/ojs/dashboard/`);
      await globex.page.locator('#scope', { hasText: 'tenant globex' }).waitFor();
      await globex.page.click('nav button[data-tab="dead"]');
      await globex.page.locator(`#dead-rows tr[data-job-id="${globexDead}"]`).waitFor();
      assert.equal(await globex.page.locator('#dead-rows tbody tr').count(), 1);
      await globex.page.click('nav button[data-tab="jobs"]');
      await globex.page.fill('#jobs-filter input[name="job_id"]', good);
      await globex.page.click('#jobs-filter button[type="submit"]');
      await globex.page.locator('#rows tbody').waitFor({ state: 'attached' });
      await waitFor(async () => (await globex.page.locator('#rows tbody tr').count()) === 0, WAIT_MS, 'no acme row for globex');
      globex.probes.add(`/ojs/dashboard/api/rows/${good}`);
      const foreign = await globex.page.evaluate(async (id) => (await fetch(`api/rows/${id}`)).status, good);
      assert.equal(foreign, 404, "another tenant's row does not exist for this tenant");
      await globex.close();

      // A read-only caller: every row, no write buttons, and the server refuses a write anyway.
      const viewer = await pageFor(server.base, 'viewer', problems);
      await viewer.page.goto(`${server.base}/ojs/dashboard/`);
      await viewer.page.locator('#scope', { hasText: 'read-only' }).waitFor();
      await viewer.page.click('nav button[data-tab="dead"]');
      await viewer.page.locator(`#dead-rows tr[data-job-id="${globexDead}"]`).waitFor();
      assert.equal(await viewer.page.isVisible('#replay'), false);
      assert.equal(await viewer.page.isVisible('#purge'), false);
      viewer.probes.add('/ojs/dashboard/api/dead/purge');
      const refused = await viewer.page.evaluate(async (id) => {
        const answer = await fetch(`api/dead/purge?job_id=${id}`, { method: 'POST', headers: { 'X-OJS-Dashboard': '1' } });
        return answer.status;
      }, globexDead);
      assert.equal(refused, 403);
      await viewer.close();

      // Nobody: the page is not served.
      const nobody = await pageFor(server.base, 'nobody', []); // its 403 is the point
      const closed = await nobody.page.goto(`${server.base}/ojs/dashboard/`);
      assert.equal(closed.status(), 403);
      await nobody.close();
      assert.deepEqual(problems, [], 'no page error, console error or CSP violation');
    } finally {
      await server.close();
      await ojs.close();
      await knex.destroy();
    }
  });
}
