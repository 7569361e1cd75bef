// Shared by the peer scripts: loading the pinned packages from the install directory, the
// protocol with `ojs-bench drain`, and the job payload (the same args as the relay's rows).
//
// Protocol (stdout, one JSON object per line; stdin, one line):
//   peer -> {"event":"added", ...}   the N jobs are in the database, nothing works them yet
//   bench -> "go"                    after VACUUM ANALYZE + CHECKPOINT and its CPU/WAL samples
//   peer -> {"event":"done", ...}    every job worked and completed in the database
// Then the peer shuts down and exits 0.
"use strict";
const path = require("path");
const { createRequire } = require("module");
const readline = require("readline");

const peersDir = process.env.OJS_BENCH_PEERS_DIR;
if (!peersDir) throw new Error("OJS_BENCH_PEERS_DIR is not set (crates/ojs-bench/peers/install.sh prints it)");
const requirePeer = createRequire(path.join(path.resolve(peersDir), "package.json"));

function env(name, fallback) {
  const value = process.env[name];
  if (value === undefined || value === "") {
    if (fallback === undefined) throw new Error(`${name} is not set`);
    return fallback;
  }
  return value;
}

function emit(object) {
  process.stdout.write(JSON.stringify(object) + "\n");
}

/** Resolves when the bench writes a line on stdin. */
function waitForGo() {
  return new Promise((resolve, reject) => {
    const rl = readline.createInterface({ input: process.stdin });
    rl.once("line", (line) => { resolve(line.trim()); rl.close(); });
    rl.once("close", () => reject(new Error("stdin closed before go")));
  });
}

/** The relay rows' args (crates/ojs-bench/src/common.rs, bench_job). */
function payload(i) {
  return [i, `user-${i}@example.com`, { plan: "pro", locale: "en" }];
}

function seconds(fromNs) {
  return Number(process.hrtime.bigint() - fromNs) / 1e9;
}

function cpuSeconds(usage) {
  return (usage.user + usage.system) / 1e6;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

module.exports = { requirePeer, env, emit, waitForGo, payload, seconds, cpuSeconds, sleep };
