'use strict';
// The event surface (issue 15, docs/events.md): the relay's event stream as SSE frames
// (`ojs.relayEvents()`; `ojs.router()` gets its stream from the core's surface and reads it the
// same way), and `ojs.subscribeEvents()`, an event client of any OJS event stream.
//
// Everything about events is the core's: the events, filters, replay, SSE framing, the
// client's reconnect and Last-Event-ID resume. This file only spells the options the
// JavaScript way, waits for the next frame or event off the JavaScript thread (the addon's
// `next(timeoutMs)`), and turns each event's CloudEvents JSON text into an object.

const { rejectOption } = require('./native');
const { callNative, awaitNative } = require('./errors');
const { camelKey, snakeKey } = require('./json');

/** How long one wait for a frame or an event lasts before it is asked again (ms). */
const WAIT_MS = 1000;

/**
 * The request keys of `Bridge::relay_events` (the query of `GET /v1/events/stream`), and the
 * options of `Bridge::subscribe_events`: the contract's names, accepted as they are or in
 * camelCase; any other name is refused by the core's rule (with the near miss named).
 */
const STREAM_KEYS = ['types', 'queues', 'job_types', 'tenant', 'since', 'last_event_id'];
const SUBSCRIPTION_KEYS = ['url', 'token', 'types', 'queues', 'job_types', 'tenant', 'since', 'last_event_id'];

/** `options` as JSON with the contract's keys: unknown names refused, undefined values left out. */
function contractJson(options, keys) {
  const accepted = keys.map(camelKey);
  const out = {};
  for (const [key, value] of Object.entries(options ?? {})) {
    const name = snakeKey(key);
    if (!keys.includes(name) || (key !== name && key !== camelKey(name))) callNative(() => rejectOption(key, accepted));
    if (value !== undefined) out[name] = value;
  }
  return JSON.stringify(out);
}

/** A stream of the addon (`NativeRelayFrames`, `NativeEventFeed`) as `{ next, close }`. */
function nativeStream(native) {
  return {
    next: (timeoutMs) => awaitNative(native.next(timeoutMs)),
    close: () => native.close(),
  };
}

/**
 * `ojs.subscribeEvents(options)`: the events of an OJS event stream as an async iterable of
 * plain objects (`id`, `type`, `source`, `subject`, `time`, `data`, ...). The feed opens on the
 * first `next()`; `return()` (a `break` out of `for await`) or `close()` closes it.
 */
class EventSubscription {
  constructor(open) {
    this._open = open;
    this._opening = null;
    this._stream = null;
    this._done = false;
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  async next() {
    try {
      while (!this._done) {
        this._opening ||= this._open();
        this._stream ||= await this._opening;
        if (this._done) break;
        const text = await this._stream.next(WAIT_MS);
        if (text === null) break;
        if (text === '' || this._done) continue;
        return { value: JSON.parse(text), done: false };
      }
    } catch (error) {
      this.close();
      throw error;
    }
    this.close();
    return { value: undefined, done: true };
  }

  async return(value) {
    this.close();
    return { value, done: true };
  }

  /** Closes the feed (also while a `next()` waits: it then ends). Idempotent. */
  close() {
    if (this._done && this._stream === null && this._opening === null) return;
    this._done = true;
    const stream = this._stream;
    const opening = this._opening;
    this._stream = null;
    this._opening = null;
    if (stream) stream.close();
    else if (opening) opening.then((opened) => opened.close(), () => {});
  }
}

module.exports = { WAIT_MS, STREAM_KEYS, SUBSCRIPTION_KEYS, contractJson, nativeStream, EventSubscription };
