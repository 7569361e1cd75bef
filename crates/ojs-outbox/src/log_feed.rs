//! The relay's log records for the bindings: what the relay has to tell the operator (a pause,
//! a resume, a dead letter, a refusal, a database or prune failure), once per event, for a
//! binding to hand to its framework's logger (Python `logging`, the Rails logger, a Node logger).
//!
//! The relay writes each message once, through [`emit`]: it becomes a `tracing` event (what the
//! Rust `ojs-relay` prints) and, when a binding has turned the feed on ([`enable`]), a
//! [`Record`] in a process-wide bounded queue that the binding drains ([`drain`]) from a thread
//! or timer of its own. The relay never calls into the host language: nothing of the host runs
//! on the core's threads, and a slow logger cannot hold the relay up.
//!
//! The queue holds at most [`CAPACITY`] records. When it is full a new record is dropped and
//! counted, and the next drain starts with one warning saying how many were dropped. Without
//! [`enable`] (Rust-only users, `ojs-relay`, the benchmarks) nothing is queued.
//!
//! Fork-aware: the queue belongs to the process that filled it. A forked child (pre-fork
//! servers) starts with an empty queue, never its parent's records, and the lock cannot be
//! left held by a parent's thread that does not exist in the child (see [`Lock`]).

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// The most records the queue holds between two drains.
pub const CAPACITY: usize = 1_000;

/// How much a record matters, as the framework loggers name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warning,
    Error,
}

impl Level {
    /// `info`, `warning` or `error`: the level's name as the bindings receive it.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warning => "warning",
            Level::Error => "error",
        }
    }
}

/// One relay log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub level: Level,
    /// The whole line, job id included when there is one.
    pub message: String,
    /// The job the record is about (a dead letter), else `None`.
    pub job_id: Option<String>,
    /// The outbox table of the relay that wrote it.
    pub table: String,
}

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns the feed on for this process (a binding that drains it). Idempotent; there is no
/// turning it off: a binding that stops draining leaves at most [`CAPACITY`] records queued.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

pub fn is_enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The `tracing` target of the relay's events (`OJS_LOG=ojs_outbox::relay=debug` for `ojs-relay`).
const TARGET: &str = "ojs_outbox::relay";

/// Writes one relay message: a `tracing` event at `level` and, when the feed is on, a record.
pub fn emit(level: Level, table: &str, job_id: Option<&str>, message: String) {
    match level {
        Level::Info => tracing::info!(target: TARGET, "{message}"),
        Level::Warning => tracing::warn!(target: TARGET, "{message}"),
        Level::Error => tracing::error!(target: TARGET, "{message}"),
    }
    if !is_enabled() {
        return;
    }
    let record = Record {
        level,
        message,
        job_id: job_id.map(str::to_owned),
        table: table.to_owned(),
    };
    FEED.with(|queue| {
        if queue.records.len() < CAPACITY {
            queue.records.push_back(record);
        } else {
            queue.dropped += 1;
        }
    });
}

/// Every record queued since the last drain, oldest first; never waits on anything but the
/// queue's own short lock. After an overflow the first record is a warning naming how many
/// records were dropped.
pub fn drain() -> Vec<Record> {
    FEED.with(|queue| {
        let mut out = Vec::with_capacity(queue.records.len() + 1);
        if queue.dropped > 0 {
            let dropped = std::mem::take(&mut queue.dropped);
            out.push(Record {
                level: Level::Warning,
                message: format!(
                    "{dropped} relay log records were dropped: more than {CAPACITY} came between two reads of the log feed"
                ),
                job_id: None,
                table: String::new(),
            });
        }
        out.extend(queue.records.drain(..));
        out
    })
}

struct Queue {
    /// The process these records belong to.
    pid: u32,
    records: VecDeque<Record>,
    dropped: u64,
}

/// The queue behind a lock that knows which process holds it.
///
/// A `std::sync::Mutex` held by one of the parent's threads at the moment of a `fork` stays
/// locked for ever in the child (that thread does not exist there), and the child's relay would
/// hang on its first record. This lock stores the holder's process id instead: a child that
/// finds it held by another process takes it over, and then discards the queue it inherited
/// (which that holder may have left half-written: it is leaked, never read or dropped).
struct Lock {
    holder: AtomicU32,
    queue: UnsafeCell<Option<Queue>>,
}

// SAFETY: `queue` is only reached through `with`, which holds `holder` (one process id; within
// a process that means exclusive access by one thread at a time).
unsafe impl Sync for Lock {}

static FEED: Lock = Lock {
    holder: AtomicU32::new(0),
    queue: UnsafeCell::new(None),
};

impl Lock {
    fn with<T>(&self, work: impl FnOnce(&mut Queue) -> T) -> T {
        let pid = std::process::id();
        loop {
            match self
                .holder
                .compare_exchange(0, pid, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(other) if other != pid => {
                    // Held by the process we were forked from: no thread here will release it.
                    if self
                        .holder
                        .compare_exchange(other, pid, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        break;
                    }
                }
                Err(_) => std::thread::yield_now(),
            }
        }
        struct Release<'a>(&'a AtomicU32);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.store(0, Ordering::Release);
            }
        }
        let _release = Release(&self.holder);
        // SAFETY: this thread holds the lock (above) until `_release` is dropped.
        let slot = unsafe { &mut *self.queue.get() };
        if slot.as_ref().is_some_and(|queue| queue.pid != pid) {
            // Inherited across a fork: not ours, possibly mid-update. Leaked, never touched.
            std::mem::forget(slot.take());
        }
        let queue = slot.get_or_insert_with(|| Queue {
            pid,
            records: VecDeque::new(),
            dropped: 0,
        });
        work(queue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the feed is process-wide, and tests run in parallel threads.
    #[test]
    fn records_are_bounded_counted_and_drained_in_order() {
        assert!(drain().is_empty());
        emit(Level::Info, "t", None, "before enable".into());
        assert!(drain().is_empty(), "nothing is queued until enabled");
        enable();
        emit(Level::Warning, "t", None, "first".into());
        emit(Level::Error, "t", Some("id-1"), "second".into());
        let records = drain();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].message, "first");
        assert_eq!(records[1].level, Level::Error);
        assert_eq!(records[1].job_id.as_deref(), Some("id-1"));
        assert!(drain().is_empty());

        for i in 0..CAPACITY + 5 {
            emit(Level::Info, "t", None, format!("r{i}"));
        }
        let records = drain();
        assert_eq!(records.len(), CAPACITY + 1);
        assert_eq!(records[0].level, Level::Warning);
        assert_eq!(
            records[0].message,
            "5 relay log records were dropped: more than 1000 came between two reads of the log feed"
        );
        assert_eq!(records[1].message, "r0");
        assert_eq!(records[CAPACITY].message, format!("r{}", CAPACITY - 1));
        assert!(drain().is_empty());
    }
}
