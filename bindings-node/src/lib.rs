//! Native glue of the npm package `ojs-adapter-express`: the core's `bridge::Bridge` as a
//! Node-API class. Only type conversion happens here: every behaviour (validation, SQL, the
//! relay, defaults) is the core's, and the JavaScript layer (`lib/`) owns knex and Express.
//!
//! Calls that may block (database, network, relay start/stop) run as `AsyncTask`s on libuv's
//! thread pool and resolve a promise, so the event loop never waits on them; staging
//! (`stage_json`, `stage_job`) and `notify_committed` are pure CPU and synchronous.

mod adapter;
mod error;
mod log;

pub use adapter::{NativeAdapter, NativeHost, Stager, option_keys, reject_option, stage_job};
pub use error::{NativeErrorCode, database_error_code, error_codes};
pub use log::{LogRecord, drain_log_feed, enable_log_feed};
