//! SIGINT and SIGTERM for a process whose only job is the relay (`manage.py ojs_relay`,
//! `rake ojs:relay`).
//!
//! Such a command spends a while starting (the framework loads, the pool connects) before the
//! relay runs, and a process manager may stop it at any moment of that. [`arm`] is called first
//! thing: from then on the two signals no longer kill the process but are remembered, and
//! [`wait`] returns at once for one that came before it was called, so the command still exits 0.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, ErrorCode, Result};

static RECEIVED: AtomicBool = AtomicBool::new(false);
static ARMED: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Installs the handlers, once per process (later calls do nothing). A handler the host
/// installed before (Python's SIGINT handler, Ruby's traps) still runs after ours.
pub fn arm() -> Result<()> {
    ARMED
        .get_or_init(|| {
            for signal in [libc::SIGINT, libc::SIGTERM] {
                // SAFETY: the action only stores to an atomic, which is async-signal-safe.
                unsafe {
                    signal_hook_registry::register(signal, || {
                        RECEIVED.store(true, Ordering::SeqCst)
                    })
                }
                .map_err(|e| e.to_string())?;
            }
            Ok(())
        })
        .clone()
        .map_err(|e| {
            Error::new(
                ErrorCode::RelayShutDown,
                format!("cannot install signal handlers: {e}"),
            )
        })
}

/// Waits for SIGINT or SIGTERM, counting one that arrived since [`arm`]. Needs a tokio runtime
/// with signals enabled.
pub async fn wait() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    arm()?;
    let listen = |kind| {
        signal(kind).map_err(|e| {
            Error::new(
                ErrorCode::RelayShutDown,
                format!("cannot listen for signals: {e}"),
            )
        })
    };
    // Listening first, then looking at the flag: a signal is seen by one or the other.
    let mut interrupt = listen(SignalKind::interrupt())?;
    let mut terminate = listen(SignalKind::terminate())?;
    if !RECEIVED.swap(false, Ordering::SeqCst) {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    }
    RECEIVED.store(false, Ordering::SeqCst);
    Ok(())
}
