//! A process whose relay is busy on SQLite forks (a pre-fork server starting its workers), and
//! each child opens SQLite and uses an outbox at once: no child may hang on a process-wide mutex
//! the parent's relay thread held at the moment of the fork (`sqlite_fork.rs`).
//!
//! A child that opens the parent's file could also inherit that file's own lock state (held by
//! a connection that no longer runs in the child), which no handler can release: so a fork
//! waits until no statement of the store runs. The second test's children stage a job in the
//! very file the parent's relay keeps writing.

use std::time::{Duration, Instant};

use ojs_outbox::{Config, NewJob, Outbox, Store};
use serde_json::json;

#[test]
fn children_forked_from_a_busy_sqlite_relay_can_use_sqlite() {
    fork_from_a_busy_relay(|dir, child| {
        let url = format!(
            "sqlite://{}",
            dir.join(format!("child-{child}.db")).display()
        );
        (url, false)
    });
}

#[test]
fn children_forked_from_a_busy_sqlite_relay_can_write_its_file() {
    fork_from_a_busy_relay(|dir, _| (format!("sqlite://{}", dir.join("fork.db").display()), true));
}

/// Forks 60 children from a process whose relay claims, pauses and probes every 10 ms on
/// SQLite; each opens the database `child_db` names (and stages a job there when it says so)
/// within 20 s, or counts as hung.
fn fork_from_a_busy_relay(child_db: impl Fn(&std::path::Path, usize) -> (String, bool)) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ojs-fork-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("fork.db").display());
    // A backend no one listens on: the relay keeps claiming, pausing and probing on SQLite.
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": "http://127.0.0.1:9", "database_url": url,
        "outbox": {"poll_interval": "PT0.01S"},
        "relay": {"initial_backoff": "PT0.01S", "max_backoff": "PT0.02S", "request_timeout": "PT0.05S"}}}))
    .unwrap();
    let outbox = runtime.block_on(async {
        let outbox = Outbox::connect(config).await.unwrap();
        outbox.store().migrate().await.unwrap();
        let mut tx = outbox.begin().await.unwrap();
        tx.enqueue_bulk(
            (0..50)
                .map(|i| NewJob::new("fork.job", json!([i])))
                .collect(),
        )
        .await
        .unwrap();
        tx.commit_without_hook().await.unwrap();
        outbox
    });
    {
        let _entered = runtime.enter();
        outbox.start_relay();
    }
    let mut hung = 0;
    for child in 0..60 {
        let (child_url, stage) = child_db(&dir, child);
        // SAFETY: the child only builds its own runtime, uses SQLite and exits with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|child| {
                    child.block_on(async {
                        let store = Store::connect(&child_url, "ojs_outbox").await.ok()?;
                        store.migrate().await.ok()?;
                        if stage {
                            let config = Config::from_value(&json!({"adapter": {
                                "ojs_url": "http://127.0.0.1:9", "database_url": child_url}}))
                            .ok()?;
                            let outbox = Outbox::connect(config).await.ok()?;
                            let mut tx = outbox.begin().await.ok()?;
                            tx.enqueue_after_commit(NewJob::new("fork.child", json!([1])))
                                .await
                                .ok()?;
                            tx.commit_without_hook().await.ok()?;
                        }
                        store.status().await.ok()
                    })
                })
                .ok()
                .flatten()
                .is_some();
            unsafe { libc::_exit(if ok { 0 } else { 3 }) };
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut status = 0;
            let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if done == pid {
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "child failed"
                );
                break;
            }
            if Instant::now() > deadline {
                unsafe { libc::kill(pid, libc::SIGKILL) };
                unsafe { libc::waitpid(pid, &mut status, 0) };
                hung += 1;
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    runtime.block_on(outbox.stop_relay());
    assert_eq!(hung, 0, "children hung on a lock inherited from the parent");
    let _ = std::fs::remove_dir_all(&dir);
}
