//! SQLite's process-wide mutexes across `fork()`. SQLite guards its global state (memory
//! accounting, the page-cache LRU, the unix VFS's list of open files, ...) with static mutexes.
//! If a relay thread holds one of them at the moment another thread forks (a pre-fork server
//! forking workers from a process whose relay is polling), the child inherits it locked and
//! the child's own relay hangs on its first SQLite call. A `pthread_atfork` handler therefore
//! takes every static mutex before the fork (in SQLite's own nesting order: `OPEN` before
//! `MAIN`, the memory mutex last) and releases them after it, in the parent and in the child.
//! What it cannot cover is each open file's own lock state, which a child inherits too: a child
//! that opens the file its parent's relay was writing at the fork may fail or hang on it, so a
//! process forks only while its relay is stopped (docs/django.md, "SQLite").

use std::ffi::c_void;
use std::sync::Once;

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

extern "C" fn before_fork() {
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

extern "C" fn after_fork() {
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
        // SAFETY: the handlers only take and release SQLite's own mutexes.
        unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork)) };
    });
}
