'use strict';
// Loads the Node-API addon built from this folder's Rust crate (src/). The package ships it
// as `ojs_native.node` beside package.json; OJS_NATIVE_PATH points elsewhere (development).

const path = require('node:path');

const file = process.env.OJS_NATIVE_PATH || path.join(__dirname, '..', 'ojs_native.node');

module.exports = require(file);
