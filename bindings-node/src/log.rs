//! The relay's log feed (`bridge::enable_log_feed`, `bridge::drain_log_feed`) for `lib/log.js`,
//! which hands the records to the application's logger. Synchronous: a drain takes the core's
//! queue under a short lock and never waits on I/O.

use napi_derive::napi;

/// One log record, the relay's or a worker loop's (`NativeWorker::drain_log`): `level` is
/// "info", "warning" or "error"; `jobId` the job it is about (a dead letter, a job given back),
/// else null; `table` the outbox table of the relay that wrote it (empty for a worker's).
#[napi(object)]
pub struct LogRecord {
    pub level: String,
    pub message: String,
    pub job_id: Option<String>,
    pub table: String,
}

impl From<ojs_bridge::LogRecord> for LogRecord {
    fn from(record: ojs_bridge::LogRecord) -> LogRecord {
        LogRecord {
            level: record.level,
            message: record.message,
            job_id: record.job_id,
            table: record.table,
        }
    }
}

/// Turns the relay's log feed on for this process. Idempotent.
#[napi]
pub fn enable_log_feed() {
    ojs_bridge::enable_log_feed();
}

/// The relay log records queued in this process since the last call, oldest first.
#[napi]
pub fn drain_log_feed() -> Vec<LogRecord> {
    ojs_bridge::drain_log_feed()
        .into_iter()
        .map(LogRecord::from)
        .collect()
}
