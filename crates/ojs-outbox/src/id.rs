//! Job ids: lowercase UUIDv7 (RFC 9562 §5.7) that sort in creation order within a thread.
//!
//! The 74 bits after the millisecond timestamp are random when the millisecond changes and
//! count up within it (RFC 9562 §6.2, method 2). So the OS random source is read once per new
//! millisecond, not once per id: a `getrandom` call cost more than the rest of staging a job.
//!
//! A forked child must never continue its parent's sequence: the same id twice is one job to
//! the backend (the second is deduplicated, that is lost). A `pthread_atfork` child handler
//! counts forks, and a sequence drawn before the last fork is thrown away. The state is
//! thread-local, so no lock is held when another thread forks.

use std::cell::Cell;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rand::TryRngCore;

const COUNTER_BITS: u32 = 74;

static FORKS: AtomicU64 = AtomicU64::new(0);
static WATCH_FORKS: Once = Once::new();

extern "C" fn forked_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

#[derive(Clone, Copy)]
struct Sequence {
    forks: u64,
    ms: u64,
    counter: u128,
}

thread_local! {
    static SEQUENCE: Cell<Option<Sequence>> = const { Cell::new(None) };
}

fn watch_forks() {
    WATCH_FORKS.call_once(|| {
        // SAFETY: registers a handler that only increments an atomic, which is
        // async-signal-safe as a fork child handler must be.
        unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    });
}

/// How many forks lie between the first call of this (or of `new_job_id`) and this process:
/// a value that changes in a forked child, read with one atomic load.
pub fn fork_generation() -> u64 {
    watch_forks();
    FORKS.load(Ordering::Relaxed)
}

/// A new job id.
pub fn new_job_id() -> uuid::Uuid {
    watch_forks();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64);
    let next = advance(SEQUENCE.get(), FORKS.load(Ordering::Relaxed), now);
    SEQUENCE.set(Some(next));
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&next.ms.to_be_bytes()[2..]);
    let rand_a = (next.counter >> 62) as u16 & 0x0fff;
    bytes[6..8].copy_from_slice(&(0x7000 | rand_a).to_be_bytes());
    let rand_b = next.counter as u64 & ((1 << 62) - 1);
    bytes[8..].copy_from_slice(&((0b10 << 62) | rand_b).to_be_bytes());
    uuid::Uuid::from_bytes(bytes)
}

/// The sequence after `last` for an id made at `now` (ms), after `forks` forks.
fn advance(last: Option<Sequence>, forks: u64, now: u64) -> Sequence {
    match last {
        Some(last) if last.forks == forks && last.ms >= now => {
            let counter = last.counter + 1;
            if counter >> COUNTER_BITS == 0 {
                Sequence { counter, ..last }
            } else {
                // 2^73 ids in one millisecond: borrow the next one.
                fresh(forks, last.ms + 1)
            }
        }
        Some(last) => fresh(forks, now.max(last.ms)),
        None => fresh(forks, now),
    }
}

/// A sequence starting at 73 random bits: the top counter bit starts clear, room to count.
fn fresh(forks: u64, ms: u64) -> Sequence {
    let mut random = [0u8; 16];
    rand::rngs::OsRng
        .try_fill_bytes(&mut random)
        .expect("the operating system's random source works");
    Sequence {
        forks,
        ms,
        counter: u128::from_le_bytes(random) >> (128 - (COUNTER_BITS - 1)),
    }
}

/// The staging time of a job id (UUIDv7: its first 48 bits are Unix milliseconds).
pub fn staged_at_ms(job_id: &str) -> Option<i64> {
    let hex: String = job_id.chars().filter(|c| *c != '-').take(12).collect();
    i64::from_str_radix(&hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_version_7_variant_rfc_and_strictly_increasing() {
        let ids: Vec<uuid::Uuid> = (0..10_000).map(|_| new_job_id()).collect();
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "{} !< {}", pair[0], pair[1]);
        }
        for id in &ids {
            assert_eq!(id.get_version_num(), 7);
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
        }
        let ms = |id: &uuid::Uuid| id.get_timestamp().unwrap().to_unix();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        assert!(ms(&ids[9_999]).0.abs_diff(now.as_secs()) <= 1);
    }

    #[test]
    fn a_fork_redraws_the_sequence_even_within_the_same_millisecond() {
        let last = advance(None, 0, 1_000);
        assert_eq!(advance(Some(last), 0, 1_000).counter, last.counter + 1);
        let after_fork = advance(Some(last), 1, 1_000);
        assert_eq!(after_fork.ms, 1_000);
        assert_ne!(
            after_fork.counter,
            last.counter + 1,
            "redrawn, not continued"
        );
        let clock_went_back = advance(Some(last), 0, 999);
        assert_eq!(
            (clock_went_back.ms, clock_went_back.counter),
            (1_000, last.counter + 1)
        );
    }

    #[test]
    fn the_fork_handler_counts_forks_in_the_child() {
        new_job_id();
        let mut pipe = [0; 2];
        // SAFETY: plain pipe/fork/write/_exit; the child only reads an atomic.
        unsafe { assert_eq!(libc::pipe(pipe.as_mut_ptr()), 0) };
        let in_parent = FORKS.load(Ordering::Relaxed);
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let forks = FORKS.load(Ordering::Relaxed).to_le_bytes();
            unsafe {
                libc::write(pipe[1], forks.as_ptr().cast(), 8);
                libc::_exit(0);
            }
        }
        let mut forks = [0u8; 8];
        unsafe {
            assert_eq!(libc::read(pipe[0], forks.as_mut_ptr().cast(), 8), 8);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        assert_eq!(u64::from_le_bytes(forks), in_parent + 1);
    }
}
