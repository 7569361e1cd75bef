//! SQLite's process-wide mutexes across `fork()`. SQLite guards its global state (memory
//! accounting, the page-cache LRU, the unix VFS's list of open files, ...) with static mutexes.
//! If a relay thread holds one of them at the moment another thread forks (a pre-fork server
//! forking workers from a process whose relay is polling), the child inherits it locked and
//! the child's own relay hangs on its first SQLite call. A `pthread_atfork` handler therefore
//! takes every static mutex before the fork (in SQLite's own nesting order: `OPEN` before
//! `MAIN`, the memory mutex last) and releases them after it, in the parent and in the child.
//!
//! Each open file's own lock state is inherited too, and no handler can release it: a child
//! that opens the file its parent's relay was writing at the fork would find it locked by a
//! connection that no longer runs ("database is locked", for good). So every statement of the
//! store on SQLite runs inside `statement()`, and the handler first waits (up to
//! `FORK_WAIT`) until none runs, holding new ones back until the fork is done.

use std::ffi::c_void;
use std::sync::{Condvar, Mutex, Once};
use std::time::Duration;

unsafe extern "C" {
    // SQLite's public mutex API (https://sqlite.org/c3ref/mutex_alloc.html), from the
    // libsqlite3 that sqlx already links.
    fn sqlite3_mutex_alloc(kind: i32) -> *mut c_void;
    fn sqlite3_mutex_enter(mutex: *mut c_void);
    fn sqlite3_mutex_leave(mutex: *mut c_void);
}

/// `SQLITE_MUTEX_STATIC_*`, outermost first: `OPEN` (4) is taken before `MAIN` (2) when a
/// shared cache opens, `MEM` (3) is taken inside everything (every allocation).
const STATIC_MUTEXES: [i32; 12] = [4, 2, 6, 5, 11, 12, 13, 8, 9, 10, 7, 3];

static REGISTER: Once = Once::new();

/// How long a fork waits for the statements in progress: a statement waits at most its
/// `busy_timeout` for a lock, so this is only reached when something else holds the file.
const FORK_WAIT: Duration = Duration::from_secs(15);
/// How often a statement held back by a fork looks again (forks take microseconds).
const HELD_BACK_RETRY: Duration = Duration::from_millis(1);

struct Gate {
    /// Statements running now.
    running: usize,
    /// A fork is being prepared: no statement starts.
    forking: bool,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    running: 0,
    forking: false,
});
static NONE_RUNNING: Condvar = Condvar::new();

/// Held while one SQLite statement of the store runs (`statement`).
pub(crate) struct Running(());

impl Drop for Running {
    fn drop(&mut self) {
        let mut gate = GATE.lock().unwrap_or_else(|e| e.into_inner());
        gate.running -= 1;
        if gate.running == 0 {
            NONE_RUNNING.notify_all();
        }
    }
}

/// Marks a SQLite statement as running until the result is dropped; while a fork is being
/// prepared it waits (asynchronously: the statement a fork waits for may need this thread).
pub(crate) async fn statement() -> Running {
    loop {
        {
            let mut gate = GATE.lock().unwrap_or_else(|e| e.into_inner());
            if !gate.forking {
                gate.running += 1;
                return Running(());
            }
        }
        tokio::time::sleep(HELD_BACK_RETRY).await;
    }
}

extern "C" fn before_fork() {
    {
        let mut gate = GATE.lock().unwrap_or_else(|e| e.into_inner());
        gate.forking = true;
        let (gate, _) = NONE_RUNNING
            .wait_timeout_while(gate, FORK_WAIT, |gate| gate.running > 0)
            .unwrap_or_else(|e| e.into_inner());
        drop(gate);
    }
    for kind in STATIC_MUTEXES {
        // SAFETY: static mutexes exist for the life of the process; a null pointer (SQLite
        // built without mutexes) is skipped.
        unsafe {
            let mutex = sqlite3_mutex_alloc(kind);
            if !mutex.is_null() {
                sqlite3_mutex_enter(mutex);
            }
        }
    }
}

extern "C" fn after_fork_in_parent() {
    release_mutexes();
    GATE.lock().unwrap_or_else(|e| e.into_inner()).forking = false;
}

extern "C" fn after_fork_in_child() {
    release_mutexes();
    // The child has none of the parent's other threads: nothing of theirs runs here.
    let mut gate = GATE.lock().unwrap_or_else(|e| e.into_inner());
    gate.forking = false;
    gate.running = 0;
}

fn release_mutexes() {
    for kind in STATIC_MUTEXES.iter().rev() {
        // SAFETY: this thread took each of them in `before_fork`.
        unsafe {
            let mutex = sqlite3_mutex_alloc(*kind);
            if !mutex.is_null() {
                sqlite3_mutex_leave(mutex);
            }
        }
    }
}

/// Registers the handlers, once per process (called before the first SQLite connection).
pub fn guard_forks() {
    REGISTER.call_once(|| {
        // SAFETY: the handlers only take and release SQLite's own mutexes and the gate.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_in_parent),
                Some(after_fork_in_child),
            )
        };
    });
}
