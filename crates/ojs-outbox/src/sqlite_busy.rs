//! Every connection of the core's SQLite pools (`store.rs`: the relay's, the relay CLI's, the
//! Rust `Outbox`'s) waits for a lock in short steps. SQLite's default
//! busy handler (the one `busy_timeout` installs) sleeps 1 ms before its first retry, then 2,
//! 5, 10 ms..., whatever the holder needs; an application's COMMIT holds the lock for its fsync,
//! often well under a millisecond, so a relay claim that meets one waited a whole millisecond
//! or more (a relay woken by the commit's WAL write meets it every time). This handler retries
//! after 50 µs, growing to 1 ms, and gives up at the same total as `busy_timeout`.

use std::ffi::{c_int, c_void};
use std::time::Duration;

unsafe extern "C" {
    // https://sqlite.org/c3ref/busy_handler.html, from the libsqlite3 that sqlx already links.
    fn sqlite3_busy_handler(
        db: *mut c_void,
        handler: Option<unsafe extern "C" fn(*mut c_void, c_int) -> c_int>,
        arg: *mut c_void,
    ) -> c_int;
}

/// The waits before each retry: 20 of 50 µs (the first millisecond), 16 of 250 µs (the next
/// four), then 1 ms each.
fn wait_before(retry: u32) -> Duration {
    match retry {
        0..20 => Duration::from_micros(50),
        20..36 => Duration::from_micros(250),
        _ => Duration::from_millis(1),
    }
}

/// Retries that fit in `timeout` (the last one ends at or past it).
fn retries_within(timeout: Duration) -> u32 {
    let mut waited = Duration::ZERO;
    let mut retry = 0;
    while waited < timeout {
        waited += wait_before(retry);
        retry += 1;
    }
    retry
}

/// The limit of retries travels in the handler's argument (no allocation to free).
unsafe extern "C" fn busy(arg: *mut c_void, retry: c_int) -> c_int {
    let retry = retry.max(0) as u32;
    if retry >= arg as usize as u32 {
        return 0;
    }
    std::thread::sleep(wait_before(retry));
    1
}

/// Installs the handler on one connection (`db`: its `sqlite3*`), replacing `busy_timeout`'s.
///
/// # Safety
/// `db` must be an open connection that no other thread uses during the call.
pub(crate) unsafe fn install(db: *mut c_void, timeout: Duration) {
    let limit = retries_within(timeout) as usize as *mut c_void;
    // SAFETY: per this function's contract; the handler reads only its argument.
    unsafe {
        sqlite3_busy_handler(db, Some(busy), limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waits_add_up_to_the_timeout_in_short_steps_first() {
        let total = |retries: u32| (0..retries).map(wait_before).sum::<Duration>();
        assert_eq!(total(20), Duration::from_millis(1));
        assert_eq!(total(36), Duration::from_millis(5));
        let retries = retries_within(Duration::from_secs(10));
        assert!(total(retries) >= Duration::from_secs(10));
        assert!(total(retries - 1) < Duration::from_secs(10));
    }
}
