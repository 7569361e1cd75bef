'use strict';
// JSON for the native calls, in one place: the values of a job (and of a request context, a
// handler's result) as the core takes them, refusing what JSON cannot hold with the core's code
// and the value's path; and option keys as the core spells them (snake_case).
//
// ---- values: the only language-side check, naming the core's code and field ---------------
//
// JSON.stringify turns what JSON cannot hold into something else without a word: a Set, a Map
// or a class instance becomes `{}` (or its enumerable fields), NaN and Infinity become `null`,
// `undefined`, a function or a symbol in an array becomes `null` (and a function or symbol
// property disappears), an invalid Date becomes `null`. The adapter refuses them instead, as
// the Django and Rails adapters do: this finds the value's path, the core gives the error the
// code of its part (`unencodable`: INVALID_ARGS, INVALID_OPTIONS, INVALID_META). What is accepted: null, booleans, strings, finite numbers, arrays,
// objects whose prototype is Object.prototype or null, and anything whose `toJSON` returns
// one of these (a Date becomes its ISO text, as JSON.stringify does). An object property
// holding `undefined` is left out (the key is absent, nothing is coerced), as everywhere in
// Node; `undefined` as the whole part means "not given".
//
// Cost: a JSON.stringify replacer (`faithful`) would do the check inside the encoding pass,
// but any replacer takes V8 off its fast serializer: measured on Node 20, 2 to 3 times the
// encoding time of a job's args (0.12 -> 0.40 us for `[1, "ada@example.com"]`). So the common
// case is one cheap walk (`isPlainJson`: plain values only, no toJSON, no call per value)
// followed by the fast native JSON.stringify (together 0.13 us there); a value with a
// `toJSON` (a Date) is encoded with the replacer; only a refused value pays for the walk that
// finds its path (`findUnencodable`).

const native = require('./native');
const { fromJson } = require('./errors');

/** The parts of a job, each checked on its own (the core names the code of each). */
const JOB_PARTS = new Set(['type', 'args', 'options', 'meta']);

/** Thrown by the replacer: the value at hand has no faithful JSON form (path found later). */
const UNENCODABLE = Symbol('unencodable');

/**
 * The JSON.stringify replacer that refuses what JSON cannot hold. `this` is the holder and
 * `value` the value after `toJSON`. Ordered by what job payloads mostly hold.
 */
function faithful(key, value) {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    case 'number':
      if (value - value === 0) return value; // finite (NaN - NaN and Infinity - Infinity are NaN)
      break;
    case 'object': {
      if (value === null) {
        if (!(this[key] instanceof Date)) return value; // an invalid Date's toJSON gives null
        break;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto === Object.prototype || proto === Array.prototype || proto === null || Array.isArray(value)) return value;
      break;
    }
    case 'undefined':
      if (!Array.isArray(this)) return value; // a property left out, or the part not given
      break;
    default:
      break;
  }
  throw UNENCODABLE;
}

/**
 * Whether `value` is JSON as it is: what `faithful` accepts, with no `toJSON` anywhere (so
 * plain JSON.stringify gives its faithful text). A cycle overflows the stack (RangeError),
 * which the caller treats as a refusal.
 */
function isPlainJson(value) {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      return value - value === 0;
    case 'object': {
      if (value === null) return true;
      if (Array.isArray(value)) {
        for (let index = 0; index < value.length; index += 1) {
          const item = value[index];
          if (item === undefined || !isPlainJson(item)) return false;
        }
        return Object.getPrototypeOf(value) === Array.prototype;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return false;
      if (typeof value.toJSON === 'function') return false;
      for (const key in value) {
        const item = value[key];
        if (item !== undefined && !isPlainJson(item)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

/** `key` appended to a path: `.name` for identifiers, `["other key"]` otherwise, `[i]` for indexes. */
function pathOf(path, key, inArray) {
  if (inArray) return `${path}[${key}]`;
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

/** What a value that `faithful` refuses is, for the message. */
function describe(original, value) {
  if (value === null) return 'an invalid Date has no JSON form';
  switch (typeof value) {
    case 'number':
      return `${value} has no JSON form`;
    case 'undefined':
      return 'undefined in an array has no JSON form (it would become null)';
    case 'bigint':
      return 'a BigInt has no JSON form (convert it to a string or a number)';
    case 'function':
      return 'a function is not a JSON value';
    case 'symbol':
      return 'a symbol is not a JSON value';
    default: {
      const name = (original && original.constructor && original.constructor.name) || 'object';
      return `a ${name} is not a JSON value (use plain objects, arrays, strings, finite numbers, booleans, null${name === 'Set' || name === 'Map' ? `; e.g. [...value] for a ${name}` : ''})`;
    }
  }
}

/**
 * The first value under `root` that JSON cannot hold faithfully, as `{path, why}`, walking
 * the way JSON.stringify does (toJSON first, then the replacer rule); null if none. Only
 * run once a call has been refused.
 */
function findUnencodable(root, rootPath) {
  const ancestors = [];
  const walk = (holder, key, path) => {
    let value = holder[key];
    if (value !== null && (typeof value === 'object' || typeof value === 'bigint') && typeof value.toJSON === 'function') {
      try {
        value = value.toJSON(key);
      } catch (error) {
        return { path, why: `its toJSON failed: ${error && error.message}` };
      }
    }
    try {
      faithful.call(holder, key, value);
    } catch (error) {
      if (error !== UNENCODABLE) throw error;
      return { path, why: describe(holder[key], value) };
    }
    if (value === null || typeof value !== 'object') return null;
    if (ancestors.includes(value)) return { path, why: 'refers to an object that contains it (a cycle has no JSON form)' };
    ancestors.push(value);
    const isArray = Array.isArray(value);
    const keys = isArray ? value.keys() : Object.keys(value);
    for (const inner of keys) {
      const found = walk(value, inner, pathOf(path, String(inner), isArray));
      if (found) return found;
    }
    ancestors.pop();
    return null;
  };
  return walk({ '': root }, '', rootPath);
}

/**
 * The refusal of `value` (part `key`, at `path`) after JSON.stringify refused it with `cause`:
 * this finds where and why, the core decides the code (`unencodable`).
 */
function unencodableError(value, key, path, cause) {
  const found = findUnencodable(value, path);
  if (found) return fromJson(native.unencodable(key, found.path, found.why));
  const why = cause === UNENCODABLE ? 'has no JSON form' : `cannot be converted to JSON: ${cause && cause.message}`;
  return fromJson(native.unencodable(key, path, why), cause === UNENCODABLE ? undefined : cause);
}

/**
 * JSON text of `value` (`null` for undefined); a value JSON cannot hold raises the key's code,
 * naming its path (`args[0].tags`). `pathPrefix` goes before the key (`jobs[2].`).
 */
function jsonOf(value, key, pathPrefix = '') {
  let text;
  try {
    text = isPlainJson(value) ? JSON.stringify(value) : JSON.stringify(value, faithful);
  } catch (error) {
    throw unencodableError(value, key, `${pathPrefix}${key}`, error);
  }
  return text === undefined ? 'null' : text;
}

/** The JSON text of one job object as the core takes it: `{"type", "args", "options", "meta"}`. */
function jobJson(type, args, options, meta) {
  return `{"type":${jsonOf(type, 'type')},"args":${jsonOf(args, 'args')},"options":${jsonOf(options, 'options')},"meta":${jsonOf(meta, 'meta')}}`;
}

/**
 * The JSON text of a bulk: every own key of every job passed on, so the core judges them all
 * (a key the core does not know is passed as null: the core refuses it by name).
 */
function jobsJson(jobs) {
  if (!Array.isArray(jobs)) return jsonOf(jobs, 'jobs');
  // The common case in one native call; anything else (a Date, a function under an unknown
  // key, or a value JSON cannot hold, which must be reported with its job, part and path) key
  // by key below.
  try {
    if (isPlainJson(jobs)) return JSON.stringify(jobs);
  } catch {
    // a cycle: reported below
  }
  const parts = new Array(jobs.length);
  for (let index = 0; index < jobs.length; index += 1) {
    const job = jobs[index];
    if (job === null || typeof job !== 'object' || Array.isArray(job)) {
      parts[index] = jsonOf(job, `jobs[${index}]`);
      continue;
    }
    const fields = [];
    for (const key of Object.keys(job)) {
      if (job[key] === undefined) continue;
      const text = JOB_PARTS.has(key) ? jsonOf(job[key], key, `jobs[${index}].`) : 'null';
      fields.push(`${JSON.stringify(key)}:${text}`);
    }
    parts[index] = `{${fields.join(',')}}`;
  }
  return `[${parts.join(',')}]`;
}

// ---- option keys as the core spells them ----------------------------------------------------

/** A core key (`poll_interval`) as JavaScript spells it (`pollInterval`). */
const camelKey = (key) => key.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
/** A JavaScript key (`pollInterval`) as the core spells it (`poll_interval`); snake_case passes unchanged. */
const snakeKey = (key) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

module.exports = { jsonOf, jobJson, jobsJson, camelKey, snakeKey };
