'use strict';
// The relay host: on SQLite, the core's database I/O (relay, admin calls, immediate enqueue)
// runs in a child process instead of this one.
//
// Why: better-sqlite3 carries its own copy of SQLite, and the core (sqlx) another. SQLite
// locks a database file with POSIX advisory locks, which never conflict inside one process and
// are all dropped when any file descriptor of the file is closed; one copy of SQLite tracks
// this for its own connections, two copies cannot (sqlite.org/howtocorrupt.html, §2.2). With
// both in one process, relay writes and application writes are not mutually excluded: rows go
// missing from reads, are sent twice, and the file can be corrupted. In a child process the
// locks work as between any two processes. PostgreSQL needs none of this.
//
// The application process keeps the cheap calls (stage, DDL); the wake-up goes over the IPC
// channel without waiting, and bounded: `child.send` has no backpressure (a message the host
// does not read waits in this process's memory, without limit), so at most one wake-up
// message is being written at a time. Ids committed meanwhile are coalesced into the next
// message, at most `capacity` of them (the core's `relay.hot_queue_capacity`, the size of the
// hot queue they are headed for); ids beyond that are dropped and counted (`dropped`), as the
// core counts `hot_dropped`. A wake-up is only a hint: the relay's poller finds every row.

const { fork } = require('node:child_process');
const path = require('node:path');
const { fromNative, errorFor } = require('./errors');
const { startFeed } = require('./log');

const BIN = path.join(__dirname, '..', 'bin', 'ojs-relay.js');

class RelayHost {
  /** `capacity`: the most wake-up ids held in this process while a message is being written. */
  constructor(config, capacity, host) {
    this.config = config;
    this.hostOptions = host;
    this.child = null;
    this.pending = new Map();
    this.nextId = 1;
    /**
     * The wake-up state: `ids` waiting for the message being written (`sending`) to finish,
     * at most `capacity`; `sent` ids handed to the channel, `dropped` ids given up.
     */
    this.wakeups = { capacity, ids: [], sending: null, sent: 0, dropped: 0 };
    /** Receives the relay's log records the host process sends (lib/log.js). */
    this.onLog = () => {};
  }

  _spawn() {
    if (this.child) return this.child;
    const child = fork(BIN, ['_host'], {
      env: {
        ...process.env,
        OJS_HOST_CONFIG: JSON.stringify(this.config),
        OJS_HOST_OPTIONS: JSON.stringify(this.hostOptions || {}),
      },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    child.on('message', (message) => {
      if (message.log) {
        this.onLog(message.log);
        return;
      }
      const call = this.pending.get(message.id);
      if (!call) return;
      this.pending.delete(message.id);
      this._refresh();
      if (message.error !== undefined) call.reject(fromNative(new Error(message.error)));
      else call.resolve(message.result);
    });
    child.on('exit', (code, signal) => {
      if (this.child === child) this.child = null;
      const wakeups = this.wakeups;
      if (wakeups.sending === child) {
        wakeups.sending = null;
        wakeups.dropped += wakeups.ids.length;
        wakeups.ids = [];
      }
      for (const call of this.pending.values()) call.reject(new Error(`the relay host process ended (${signal || code})`));
      this.pending.clear();
    });
    // The host process must not keep the application alive on its own.
    child.unref();
    this.child = child;
    this._refresh();
    return child;
  }

  /** The IPC channel keeps the event loop alive only while a call waits for its answer. */
  _refresh() {
    const channel = this.child && this.child.channel;
    if (!channel) return;
    if (this.pending.size) channel.ref();
    else channel.unref();
  }

  /** Calls `method` of the core bridge (`NativeBridge`) in the host process. */
  call(method, ...args) {
    const child = this._spawn();
    if (!child.connected) {
      return Promise.reject(errorFor('RELAY_SHUT_DOWN', `the relay host process is closing: ${method} not run`));
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this._refresh();
      // A channel that closes meanwhile fails this send here (not as an 'error' event).
      child.send({ id, method, args }, (error) => {
        if (error && this.pending.delete(id)) {
          this._refresh();
          reject(errorFor('RELAY_SHUT_DOWN', `the relay host process is closing: ${method} not run (${error.message})`));
        }
      });
    });
  }

  /**
   * Opens an event stream in the host process (`kind` "relay": `relayEvents`; "feed":
   * `subscribeEvents`) and resolves with `{ next(timeoutMs), close() }` reading it over IPC.
   */
  async openStream(kind, json) {
    return this._stream(await this.call('_openStream', kind, json));
  }

  /**
   * `Bridge::surface` in the host process (`ojs.router()`'s requests): the answer, its event
   * stream (if any) read over IPC as `openStream`'s.
   */
  async surface(json) {
    const answer = await this.call('_surface', json);
    return { ...answer, stream: answer.stream === null ? null : this._stream(answer.stream) };
  }

  /** The stream `id` of the host process as `{ next(timeoutMs), close() }`. */
  _stream(id) {
    const host = this.child;
    // The stream lives in that host process: once it is gone, the stream has ended (never
    // spawn a new host for it).
    const alive = () => this.child === host && host !== null && host.connected;
    return {
      next: (timeoutMs) => (alive() ? this.call('_streamNext', id, timeoutMs) : Promise.resolve(null)),
      close: () => {
        if (alive()) this.call('_closeStream', id).catch(() => {});
      },
    };
  }

  /**
   * The wake-up, never waited for: sent at once when no wake-up message is being written,
   * else coalesced into the next one (at most `capacity` ids wait; the rest are dropped and
   * counted). Without a host process there is no relay to wake.
   */
  notifyCommitted(jobIds) {
    const child = this.child;
    if (!child || !child.connected) return;
    const wakeups = this.wakeups;
    const waiting = wakeups.ids;
    const room = (wakeups.sending === null ? wakeups.capacity : wakeups.capacity - waiting.length);
    const taken = jobIds.length <= room ? jobIds.length : Math.max(room, 0);
    wakeups.dropped += jobIds.length - taken;
    if (wakeups.sending === null) {
      if (taken > 0) this._sendWakeup(child, taken === jobIds.length ? jobIds : jobIds.slice(0, taken));
      return;
    }
    for (let index = 0; index < taken; index += 1) waiting.push(jobIds[index]);
  }

  /** Writes one wake-up message; when it is written, the ids that waited meanwhile follow. */
  _sendWakeup(child, jobIds) {
    const wakeups = this.wakeups;
    wakeups.sending = child;
    wakeups.sent += jobIds.length;
    child.send({ method: 'notifyCommitted', args: [jobIds] }, () => {
      if (wakeups.sending !== child) return;
      wakeups.sending = null;
      if (wakeups.ids.length === 0) return;
      const next = wakeups.ids;
      wakeups.ids = [];
      if (this.child === child && child.connected) this._sendWakeup(child, next);
      else wakeups.dropped += next.length;
    });
  }

  /** Stops the relay gracefully and ends the host process. */
  async close() {
    if (!this.child) return;
    const child = this.child;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    // Until it has exited, the closing host keeps the event loop alive: an application whose
    // last handle it is (better-sqlite3 holds none) would otherwise end inside `await close()`.
    child.ref();
    await this.call('close').catch(() => {});
    if (child.connected) child.disconnect();
    await exited;
  }

  /** Test seam: the host process dies at once (SIGKILL), as a crash would. */
  kill() {
    if (this.child) this.child.kill('SIGKILL');
  }
}

/**
 * The child side, run by `ojs-relay _host`: serves calls on the core adapter until told to
 * close. `stopRequested` resolves on SIGINT/SIGTERM (taken by bin/ojs-relay.js before anything
 * else): the host then flushes the relay and exits 0.
 */
function serveHost(NativeBridge, stopRequested) {
  const adapter = new NativeBridge(process.env.OJS_HOST_CONFIG, JSON.parse(process.env.OJS_HOST_OPTIONS || '{}'));
  // The relay's log records go to the application process, which logs them (lib/log.js).
  const feed = startFeed(
    (records) =>
      new Promise((resolve) => {
        if (!process.connected) return resolve();
        process.send({ log: records }, () => resolve());
      }),
  );
  /** The event streams the application opened here (`openStream`), by id. */
  const streams = new Map();
  let nextStream = 1;
  let closing = null;
  const close = () => {
    for (const stream of streams.values()) stream.close();
    streams.clear();
    closing ||= adapter
      .close()
      .catch(() => {})
      .then(() => feed.stop());
    return closing;
  };
  const streamCalls = {
    async _openStream(kind, json) {
      const stream = await (kind === 'relay' ? adapter.relayEvents(json) : adapter.subscribeEvents(json));
      const streamId = nextStream++;
      streams.set(streamId, stream);
      return streamId;
    },
    async _streamNext(streamId, timeoutMs) {
      const stream = streams.get(streamId);
      const next = stream ? await stream.next(timeoutMs) : null;
      if (next === null) streams.delete(streamId);
      return next;
    },
    async _surface(json) {
      const answer = await adapter.surface(json);
      let stream = null;
      if (answer.stream) {
        stream = nextStream++;
        streams.set(stream, answer.stream);
      }
      return { status: answer.status, headers: answer.headers, body: answer.body, stream };
    },
    _closeStream(streamId) {
      const stream = streams.get(streamId);
      streams.delete(streamId);
      if (stream) stream.close();
    },
  };
  process.on('message', async ({ id, method, args }) => {
    if (method === 'notifyCommitted') {
      adapter.notifyCommitted(args[0].join('\n'));
      return;
    }
    try {
      let result;
      if (method === 'close') result = await close();
      else if (Object.hasOwn(streamCalls, method)) result = await streamCalls[method](...args);
      else result = await adapter[method](...args);
      // The records of a stop (its flush) reach the application before the stop's answer.
      if (method === 'stopRelay') await feed.flush();
      process.send({ id, result: result === undefined ? null : result });
    } catch (error) {
      process.send({ id, error: String(error && error.message) });
    }
  });
  // The application process ended or closed us: flush the relay, then exit.
  process.on('disconnect', () => close().then(() => process.exit(0)));
  stopRequested.then(() => close().then(() => process.exit(0)));
}

module.exports = { RelayHost, serveHost };
