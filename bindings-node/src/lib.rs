//! Native glue of the npm package `ojs-adapter-express`: the core's `ojs_bridge::Bridge` as a
//! Node-API class (`NativeBridge`). Only type conversion happens here: every behaviour
//! (validation, SQL, savepoint bookkeeping, the relay, defaults) is the core's, and the
//! JavaScript layer (`lib/`) owns knex and Express.
//!
//! Calls that may block (database, network, relay start/stop) run as `AsyncTask`s on libuv's
//! thread pool and resolve a promise, so the event loop never waits on them; staging
//! (`stage_job`, `stage_jobs`), the ledger and `notify_committed` are pure CPU and synchronous.
//! The event streams' waits (`NativeRelayFrames::next`, `NativeEventFeed::next`), which last
//! up to their timeout again and again for as long as a stream is open, run on a thread of
//! each stream's own instead of the pool (`events.rs`); so do a worker's waits for jobs and its
//! stop (`worker.rs`).

mod error;
mod events;
mod facade;
mod log;
mod worker;

pub use error::{codes_json, database_error_code, unencodable};
pub use events::{NativeEventFeed, NativeRelayFrames};
pub use facade::{
    AdminReport, LedgerHandle, NativeBridge, NativeHost, NativeLedger, NativeRelayCommand, Stager,
    SurfaceAnswer, context_header_names, database_url_from_parts, option_keys, reject_option,
    relay_exit_code, stage_job, stage_jobs, surface_is_open, surface_serves, transaction_sql,
};
pub use log::{LogRecord, drain_log_feed, enable_log_feed};
pub use worker::NativeWorker;
