//! The relay's log records for the framework's logger: enabled once, drained by the binding.

/// One record of the relay's log feed as it crosses the FFI line: `level` is `info`,
/// `warning` or `error`; `message` the whole line (job id included); `job_id` the job a dead
/// letter is about; `table` the outbox table of the relay that wrote it (empty for the
/// feed's own "records were dropped" warning).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub level: String,
    pub message: String,
    pub job_id: Option<String>,
    pub table: String,
}

/// Turns the relay's log feed on for this process ([`ojs_outbox::log_feed`]): from now on every
/// relay pause, resume, dead letter, refusal and database or prune failure is queued (bounded)
/// for [`drain_log_feed`]. A binding calls it before it starts a relay whose records it drains.
pub fn enable_log_feed() {
    ojs_outbox::log_feed::enable();
}

/// The relay log records queued in this process since the last call, oldest first. Never
/// blocks on I/O (a short lock on the queue); empty when nothing happened or the feed is off.
pub fn drain_log_feed() -> Vec<LogRecord> {
    ojs_outbox::log_feed::drain()
        .into_iter()
        .map(|record| LogRecord {
            level: record.level.as_str().to_owned(),
            message: record.message,
            job_id: record.job_id,
            table: record.table,
        })
        .collect()
}
