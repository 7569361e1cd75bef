//! The cross-process wake-up of a relay without a hot path (a separate relay): a commit in any
//! process starts a poller round at once instead of at the next `poll_interval`.
//!
//! - PostgreSQL: a staging transaction of a process with no relay of its own sends
//!   `NOTIFY ojs_staged, '<table>'` (`OutboxSql::for_config`); PostgreSQL delivers it at COMMIT
//!   and never after a rollback, so FA-001 holds by construction. The relay LISTENs on one
//!   connection of its own. A lost connection may have lost notifications: the relay is woken
//!   once when it is back.
//! - SQLite (Linux): every commit in WAL mode appends to `<file>-wal`; the relay watches the
//!   database's directory with inotify for writes to that file (or to the file itself, in a
//!   rollback-journal mode). Its own settlements wake it too: that costs one claim that finds
//!   nothing, which writes nothing, so it does not wake it again.
//!
//! - MySQL and MariaDB: none; the poller finds the rows.
//!
//! A wake-up only moves the next poller round forward: the poller remains the safety net,
//! and many notifications before the relay looks make one round (`tokio::sync::Notify` keeps
//! one permit).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::log_feed::{self, Level};
use crate::sql::STAGED_CHANNEL;
use crate::store::{Pool, Store};

/// After a failed LISTEN connection, the pause before the next attempt.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// A running wake-up source; stops when dropped.
pub(crate) struct Wake {
    pub(crate) staged: Arc<Notify>,
    /// True while the source is in place (LISTEN done, watch added): from then on a commit
    /// wakes the relay.
    pub(crate) ready: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Drop for Wake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Wake {
    /// Starts the source for this store's table; `None` where there is none (MySQL, SQLite on
    /// a system without inotify, an in-memory database).
    pub(crate) fn start(store: &Store, table: &str) -> Option<Wake> {
        let staged = Arc::new(Notify::new());
        let ready = Arc::new(AtomicBool::new(false));
        let task = match &store.pool {
            Pool::Postgres(pool) => {
                // A pool of one, apart from the relay's: the listener holds its connection.
                let options = pool.connect_options().as_ref().clone();
                let own = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_lazy_with(options);
                tokio::spawn(listen(own, table.to_owned(), staged.clone(), ready.clone()))
            }
            Pool::Sqlite(pool) => {
                let file = pool.connect_options().get_filename().to_path_buf();
                let task = sqlite::watch(&file, staged.clone(), ready.clone())?;
                log_feed::emit(
                    Level::Info,
                    table,
                    None,
                    format!(
                        "outbox relay: woken by commits in other processes (watching {}-wal)",
                        file.display()
                    ),
                );
                task
            }
            // MySQL and MariaDB have no notification a commit could send: a separate relay
            // finds new rows by polling (docs/mysql.md#a-separate-relay). Said once, so an
            // operator who sees a second's latency knows why and what to set.
            Pool::Mysql(_) => {
                log_feed::emit(
                    Level::Info,
                    table,
                    None,
                    "outbox relay: no commit in another process can wake a relay on MySQL/MariaDB; it finds their rows every outbox.poll_interval (PT0.01S keeps that under about 10 ms)".to_owned(),
                );
                return None;
            }
        };
        Some(Wake {
            staged,
            ready,
            task,
        })
    }
}

async fn listen(pool: sqlx::PgPool, table: String, staged: Arc<Notify>, ready: Arc<AtomicBool>) {
    loop {
        let mut listener = match sqlx::postgres::PgListener::connect_with(&pool).await {
            Ok(listener) => listener,
            Err(error) => {
                tracing::debug!(%error, "outbox relay: LISTEN connection failed");
                tokio::time::sleep(RECONNECT_PAUSE).await;
                continue;
            }
        };
        if let Err(error) = listener.listen(STAGED_CHANNEL).await {
            tracing::debug!(%error, "outbox relay: LISTEN failed");
            tokio::time::sleep(RECONNECT_PAUSE).await;
            continue;
        }
        ready.store(true, Ordering::Release);
        log_feed::emit(
            Level::Info,
            &table,
            None,
            format!("outbox relay: woken by commits in other processes (LISTEN {STAGED_CHANNEL})"),
        );
        // Rows staged before the LISTEN took effect are the poller's; one round now finds them.
        staged.notify_one();
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) => {
                    if notification.payload() == table {
                        staged.notify_one();
                    }
                }
                // Reconnected: what was sent meanwhile is lost, so look once.
                Ok(None) => staged.notify_one(),
                Err(error) => {
                    log_feed::emit(
                        Level::Warning,
                        &table,
                        None,
                        format!(
                            "outbox relay: its LISTEN connection failed ({error}); until it is back, rows wait for the poller"
                        ),
                    );
                    ready.store(false, Ordering::Release);
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                    break;
                }
            }
        }
    }
}

#[cfg(target_os = "linux")]
mod sqlite {
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use tokio::io::unix::AsyncFd;
    use tokio::sync::Notify;
    use tokio::task::JoinHandle;

    /// Watches the directory of `file` (the WAL file comes and goes with the last connection)
    /// for writes to the database or its WAL.
    pub(super) fn watch(
        file: &Path,
        staged: Arc<Notify>,
        ready: Arc<AtomicBool>,
    ) -> Option<JoinHandle<()>> {
        let name = file.file_name()?.as_bytes().to_vec();
        let dir = match file.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        let dir = CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: plain system calls on a descriptor this function owns.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just opened and is owned here alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `dir` is a NUL-terminated path.
        let watch = unsafe {
            libc::inotify_add_watch(
                fd.as_raw_fd(),
                dir.as_ptr(),
                libc::IN_MODIFY | libc::IN_CREATE | libc::IN_MOVED_TO,
            )
        };
        if watch < 0 {
            return None;
        }
        // SAFETY: the OwnedFd stays open, and the same descriptor, for as long as the AsyncFd
        // that owns it.
        let fd = unsafe { AsyncFd::register(fd) }.ok()?;
        let mut wal = name.clone();
        wal.extend_from_slice(b"-wal");
        ready.store(true, Ordering::Release);
        Some(tokio::spawn(async move {
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                let Ok(mut guard) = fd.readable().await else {
                    return;
                };
                let read = guard.try_io(|fd| {
                    // SAFETY: reads into a buffer of the length given.
                    let n = unsafe {
                        libc::read(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len())
                    };
                    if n < 0 {
                        Err(std::io::Error::last_os_error())
                    } else {
                        Ok(n as usize)
                    }
                });
                let Ok(Ok(n)) = read else {
                    continue; // would block: wait again
                };
                if names_written(&buffer[..n])
                    .any(|written| written == wal.as_slice() || written == name.as_slice())
                {
                    staged.notify_one();
                }
            }
        }))
    }

    /// The names of the `struct inotify_event` records in `buffer`.
    fn names_written(buffer: &[u8]) -> impl Iterator<Item = &[u8]> {
        const HEADER: usize = std::mem::size_of::<libc::inotify_event>();
        let mut at = 0;
        std::iter::from_fn(move || {
            if at + HEADER > buffer.len() {
                return None;
            }
            // The name's length is the header's last field (u32, native order).
            let len =
                u32::from_ne_bytes(buffer[at + HEADER - 4..at + HEADER].try_into().ok()?) as usize;
            let name = buffer.get(at + HEADER..at + HEADER + len)?;
            at += HEADER + len;
            // NUL-padded.
            let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
            Some(&name[..end])
        })
    }
}

#[cfg(not(target_os = "linux"))]
mod sqlite {
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    use tokio::sync::Notify;
    use tokio::task::JoinHandle;

    /// No file watch here: the poller alone finds the rows.
    pub(super) fn watch(
        _file: &Path,
        _staged: Arc<Notify>,
        _ready: Arc<AtomicBool>,
    ) -> Option<JoinHandle<()>> {
        None
    }
}
