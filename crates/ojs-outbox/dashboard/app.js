// The OJS outbox dashboard: plain DOM, no framework, no build step. Every URL is relative to
// the page (…/dashboard/), so the dashboard works under whatever prefix the app mounts it.
// The server decides what this caller may see and do; the page only hides what it may not.
'use strict';

const $ = (selector) => document.querySelector(selector);
const WRITE_HEADER = { 'X-OJS-Dashboard': '1' };
let viewer = { tenant: null, writes: false, decodes: false };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === 'text') node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function problem(message) {
  const p = $('#problem');
  p.textContent = message || '';
  p.hidden = !message;
}

async function api(path, options = {}) {
  const response = await fetch(path, { credentials: 'same-origin', ...options });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (body.error && body.error.message) || response.statusText;
    throw new Error(`${response.status}: ${message}`);
  }
  return body;
}

function query(form) {
  const params = new URLSearchParams();
  for (const [name, value] of new FormData(form)) if (value) params.set(name, value);
  return params.toString();
}

const when = (ms) => (ms == null ? '–' : new Date(ms).toISOString().replace('T', ' ').slice(0, 19));

function age(ms) {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3600000) return `${(ms / 60000).toFixed(1)} min`;
  return `${(ms / 3600000).toFixed(1)} h`;
}

function showViewer(v) {
  viewer = v;
  const parts = [v.tenant ? `tenant ${v.tenant}` : 'all tenants'];
  if (!v.writes) parts.push('read-only');
  $('#scope').textContent = parts.join(' · ');
  for (const button of document.querySelectorAll('.write')) button.hidden = !v.writes;
}

// --- Overview -------------------------------------------------------------------------------

function chart(svg, minutes, key) {
  svg.replaceChildren();
  const now = Math.floor(Date.now() / 60000) * 60000;
  const slots = new Map(minutes.map((m) => [m.at_ms, m[key]]));
  const values = [];
  for (let i = 59; i >= 0; i -= 1) values.push(slots.get(now - i * 60000) || 0);
  const top = Math.max(1, ...values);
  const ns = 'http://www.w3.org/2000/svg';
  values.forEach((value, i) => {
    const height = Math.round((value / top) * 100);
    const bar = document.createElementNS(ns, 'rect');
    bar.setAttribute('x', String(i * 10 + 1));
    bar.setAttribute('y', String(110 - height));
    bar.setAttribute('width', '8');
    bar.setAttribute('height', String(height));
    const title = document.createElementNS(ns, 'title');
    title.textContent = `${when(now - (59 - i) * 60000).slice(11, 16)}: ${value}`;
    bar.append(title);
    svg.append(bar);
  });
  const label = document.createElementNS(ns, 'text');
  label.setAttribute('x', '4');
  label.setAttribute('y', '12');
  label.textContent = `max ${top}`;
  svg.append(label);
}

async function overview() {
  const data = await api('api/overview');
  showViewer(data.viewer);
  const c = data.counts;
  $('#count-backlog').textContent = String(c.pending + c.failed);
  $('#count-dead').textContent = String(c.dead);
  $('#count-sent').textContent = String(c.sent);
  $('#oldest').textContent = age(data.oldest_pending_age_ms);
  chart($('#chart-sent'), data.minutes, 'sent');
  chart($('#chart-lag'), data.minutes, 'lag_ms');
  const health = $('#health');
  health.hidden = !data.health;
  if (data.health) {
    health.replaceChildren(
      el('span', { class: data.health.ready ? 'ok' : 'bad', text: data.health.ready ? 'ready' : 'not ready' }),
      el('span', { text: `database: ${data.health.database}` }),
      el('span', { text: `backend: ${data.health.backend}` }),
    );
  }
  $('#relays-box').hidden = !data.relays;
  if (data.relays) {
    // A relay heartbeats every 5 s: one silent for 30 s is probably gone.
    $('#relays tbody').replaceChildren(...data.relays.map((r) => el('tr', { 'data-relay-id': r.relay_id },
      el('td', { text: r.host }), el('td', { text: String(r.pid) }), el('td', { text: when(r.started_ms) }),
      el('td', { class: r.heartbeat_age_ms > 30000 ? 'bad' : 'ok', text: `${age(r.heartbeat_age_ms)} ago` }),
      el('td', { text: String(r.sent) }))));
  }
  $('#groups tbody').replaceChildren(...data.groups.map((g) => el('tr', {},
    el('td', { text: g.job_type }), el('td', { text: g.queue }), el('td', { text: g.tenant_id || '–' }),
    el('td', { text: g.status }), el('td', { text: String(g.rows) }))));
}

// --- Jobs -----------------------------------------------------------------------------------

function rowCells(row) {
  return [el('td', { text: row.job_type }), el('td', { text: row.queue }),
    el('td', { text: row.tenant_id || '–' }), el('td', { text: row.status }),
    el('td', { text: String(row.attempts) }), el('td', { text: when(row.created_at_ms) }),
    el('td', { class: 'error', text: row.error || '' })];
}

async function jobs() {
  const data = await api(`api/rows?${query($('#jobs-filter'))}`);
  $('#rows tbody').replaceChildren(...data.rows.map((row) => {
    const link = el('button', { type: 'button', class: 'link', 'data-job-id': row.job_id, text: row.job_id });
    link.addEventListener('click', () => detail(row.job_id).catch((e) => problem(e.message)));
    return el('tr', { 'data-job-id': row.job_id }, el('td', {}, link), ...rowCells(row));
  }));
}

async function detail(jobId) {
  const { row } = await api(`api/rows/${encodeURIComponent(jobId)}`);
  const s = row.summary;
  const box = $('#detail');
  const args = el('pre', { id: 'detail-args', text: row.encrypted ? 'encrypted' : JSON.stringify(row.args, null, 2) });
  box.replaceChildren(
    el('h2', { text: `${s.job_type} · ${s.job_id}` }),
    el('dl', {},
      el('dt', { text: 'Status' }), el('dd', { id: 'detail-status', text: s.status }),
      el('dt', { text: 'Attempts' }), el('dd', { text: String(s.attempts) }),
      el('dt', { text: 'Last error' }), el('dd', { class: 'error', text: s.error || '–' }),
      el('dt', { text: 'Queue' }), el('dd', { text: s.queue }),
      el('dt', { text: 'Tenant' }), el('dd', { text: s.tenant_id || '–' }),
      el('dt', { text: 'Ordering key' }), el('dd', { text: row.order_key || '–' }),
      el('dt', { text: 'Created' }), el('dd', { text: when(s.created_at_ms) }),
      el('dt', { text: 'Next try' }), el('dd', { text: when(row.available_at_ms) }),
      el('dt', { text: 'Sent' }), el('dd', { text: when(s.sent_at_ms) })),
    el('h3', { text: 'Args' }), args,
    el('h3', { text: 'Options' }), el('pre', { text: JSON.stringify(row.options, null, 2) }),
    el('h3', { text: 'Meta' }), el('pre', { text: JSON.stringify(row.meta, null, 2) }));
  if (row.encrypted && row.codec_request) {
    const decode = el('button', { type: 'button', id: 'decode', text: 'Decode through the Codec Server' });
    decode.addEventListener('click', async () => {
      try {
        const answer = await api('../codec/decode', {
          method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(row.codec_request),
        });
        const text = atob(answer.payloads[0].data);
        args.textContent = JSON.stringify(JSON.parse(text), null, 2);
        decode.remove();
      } catch (error) { problem(error.message); }
    });
    args.after(decode);
  }
  box.hidden = false;
}

// --- Dead letters ---------------------------------------------------------------------------

function selected() {
  return [...document.querySelectorAll('#dead-rows tbody input:checked')].map((box) => box.value);
}

function refreshButtons() {
  const none = selected().length === 0;
  $('#replay').disabled = none;
  $('#purge').disabled = none;
}

async function dead() {
  const params = new URLSearchParams(query($('#dead-filter')));
  params.set('status', 'dead');
  const data = await api(`api/rows?${params}`);
  showViewer(data.viewer);
  $('#dead-all').checked = false;
  $('#dead-rows tbody').replaceChildren(...data.rows.map((row) => {
    const box = el('input', { type: 'checkbox', value: row.job_id, 'aria-label': `select ${row.job_id}` });
    box.addEventListener('change', refreshButtons);
    const cells = rowCells(row);
    return el('tr', { 'data-job-id': row.job_id }, el('td', {}, box), el('td', { text: row.job_id }),
      cells[0], cells[2], cells[4], cells[5], cells[6]);
  }));
  refreshButtons();
}

function confirmed(text) {
  const dialog = $('#confirm');
  $('#confirm-text').textContent = text;
  return new Promise((resolve) => {
    const done = (answer) => () => { dialog.close(); resolve(answer); };
    $('#confirm-ok').onclick = done(true);
    $('#confirm-cancel').onclick = done(false);
    dialog.showModal();
  });
}

async function deadAction(action) {
  const ids = selected();
  const verb = action === 'replay' ? 'Replay' : 'Purge (delete for good)';
  if (!(await confirmed(`${verb} ${ids.length} dead row(s)?`))) return;
  const params = new URLSearchParams(ids.map((id) => ['job_id', id]));
  const answer = await api(`api/dead/${action}?${params}`, { method: 'POST', headers: WRITE_HEADER });
  $('#dead-result').textContent = action === 'replay' ? `replayed ${answer.replayed}` : `purged ${answer.purged}`;
  await dead();
}

// --- Live feed ------------------------------------------------------------------------------

let source = null;
// The relay's event names (docs/events.md): an SSE frame with an `event:` line reaches only a
// listener for that name.
const EVENT_TYPES = ['job.enqueued', 'job.retrying', 'job.dead_lettered', 'job.unique_rejected',
  'job.started', 'job.completed', 'job.failed', 'job.discarded',
  'ojs.outbox.dead_replayed', 'ojs.outbox.dead_purged'];

function follow() {
  if (source) source.close();
  const types = new FormData($('#live-filter')).get('types');
  source = new EventSource(`../v1/events/stream${types ? `?types=${encodeURIComponent(types)}` : ''}`);
  source.onopen = () => { $('#live-state').textContent = 'connected'; };
  source.onerror = () => { $('#live-state').textContent = 'reconnecting…'; };
  source.onmessage = (message) => show(message);
  for (const kind of EVENT_TYPES) source.addEventListener(kind, show);
}

function show(message) {
  let event = {};
  try { event = JSON.parse(message.data); } catch { return; }
  const data = event.data || {};
  const item = el('li', { 'data-type': event.type || message.type, 'data-job-id': data.job_id || event.subject || '' },
    el('time', { text: (event.time || '').replace('T', ' ').slice(0, 19) }),
    el('strong', { text: event.type || message.type }),
    el('span', { text: [data.job_type || data.type, data.job_id || event.subject].filter(Boolean).join(' · ') }));
  const feed = $('#feed');
  feed.prepend(item);
  while (feed.children.length > 200) feed.lastChild.remove();
}

// --- Wiring ---------------------------------------------------------------------------------

const loaders = { overview, jobs, dead, live: async () => { if (!source) follow(); } };

function open(tab) {
  for (const button of document.querySelectorAll('nav button')) {
    button.classList.toggle('active', button.dataset.tab === tab);
  }
  for (const section of document.querySelectorAll('main section')) section.hidden = section.id !== tab;
  problem('');
  loaders[tab]().catch((error) => problem(error.message));
}

document.addEventListener('DOMContentLoaded', () => {
  for (const button of document.querySelectorAll('nav button')) {
    button.addEventListener('click', () => open(button.dataset.tab));
  }
  const onSubmit = (form, run) => form.addEventListener('submit', (event) => {
    event.preventDefault();
    run().catch((error) => problem(error.message));
  });
  onSubmit($('#jobs-filter'), jobs);
  onSubmit($('#dead-filter'), dead);
  onSubmit($('#live-filter'), async () => follow());
  $('#dead-all').addEventListener('change', (event) => {
    for (const box of document.querySelectorAll('#dead-rows tbody input')) box.checked = event.target.checked;
    refreshButtons();
  });
  $('#replay').addEventListener('click', () => deadAction('replay').catch((e) => problem(e.message)));
  $('#purge').addEventListener('click', () => deadAction('purge').catch((e) => problem(e.message)));
  open('overview');
});
