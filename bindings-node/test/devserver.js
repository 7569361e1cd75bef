'use strict';
// Starts the real `ojs-devserver` binary on a free port: for the tests (support.js) and the
// soak (bench/soak.js). Only Node's own modules, so it loads from anywhere.

const { spawn } = require('node:child_process');

/** Spawns `bin --port 0`; resolves with {child, url} once the server says where it listens. */
function spawnDevserver(bin, stderr = 'inherit') {
  const child = spawn(bin, ['--port', '0'], { stdio: ['ignore', 'pipe', stderr] });
  return new Promise((resolve, reject) => {
    let seen = '';
    child.stdout.on('data', (chunk) => {
      seen += chunk;
      const match = /ojs-devserver listening on (http:\/\/\S+)/.exec(seen);
      if (match) resolve({ child, url: match[1] });
    });
    child.once('exit', (code) => reject(new Error(`ojs-devserver exited (${code}) before listening`)));
    child.once('error', reject);
  });
}

module.exports = { spawnDevserver };
