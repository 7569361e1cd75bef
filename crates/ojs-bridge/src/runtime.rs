//! This process's runtime, outbox and relay: created on first use, fork-aware (a child gets
//! fresh ones), started, woken by commits, stopped; and the client runtime of a process that
//! only speaks HTTP.

use std::sync::Arc;

use crate::Bridge;
use ojs_outbox::ledger::Ledger;
use ojs_outbox::outbox::Outbox;
use ojs_outbox::{Error, ErrorCode, Result};

pub(crate) struct Running {
    pub(crate) pid: u32,
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) outbox: Outbox,
}

/// What an HTTP-only call (an event client, a worker request) needs when this process has no
/// outbox connection: a runtime and the backend client, without the database.
pub(crate) struct Client {
    pub(crate) pid: u32,
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) backend: ojs_outbox::backend::Backend,
}

impl Bridge {
    /// This process's runtime and outbox, created on first use (or after a fork: the parent's
    /// runtime has no threads in the child, so it is leaked, not dropped). The lock is held only
    /// to look them up, never across I/O.
    pub(crate) fn running(&self) -> Result<Arc<Running>> {
        let mut guard = self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let pid = std::process::id();
        if guard.as_ref().is_some_and(|running| running.pid != pid) {
            std::mem::forget(guard.take());
        }
        if let Some(running) = guard.as_ref() {
            return Ok(running.clone());
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ojs-relay")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::new(
                    ErrorCode::Database,
                    format!("cannot start the relay runtime: {e}"),
                )
            })?;
        let outbox = runtime.block_on(Outbox::connect(self.config.clone()))?;
        let running = Arc::new(Running {
            pid,
            runtime,
            outbox,
        });
        *guard = Some(running.clone());
        Ok(running)
    }

    /// A runtime and the backend for a call that only speaks HTTP: the running state's when
    /// there is one, else a small one of its own (the outbox database need not be reachable).
    pub(crate) fn with_http<T>(
        &self,
        work: impl FnOnce(&tokio::runtime::Runtime, &ojs_outbox::backend::Backend) -> Result<T>,
    ) -> Result<T> {
        if let Some(running) = self.running_here() {
            return work(&running.runtime, running.outbox.backend());
        }
        let client = {
            let mut guard = self.client.lock().unwrap_or_else(|p| p.into_inner());
            let pid = std::process::id();
            if guard.as_ref().is_some_and(|client| client.pid != pid) {
                std::mem::forget(guard.take()); // a forked child: the parent's threads are gone
            }
            match guard.as_ref() {
                Some(client) => client.clone(),
                None => {
                    let runtime = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(1)
                        .thread_name("ojs-client")
                        .enable_all()
                        .build()
                        .map_err(|e| {
                            Error::new(
                                ErrorCode::BackendUnavailable,
                                format!("cannot start the client runtime: {e}"),
                            )
                        })?;
                    let backend = ojs_outbox::backend::Backend::new(&self.config)?;
                    let client = Arc::new(Client {
                        pid,
                        runtime,
                        backend,
                    });
                    *guard = Some(client.clone());
                    client
                }
            }
        };
        work(&client.runtime, &client.backend)
    }

    /// The running state of this process, if any, without creating it.
    pub(crate) fn running_here(&self) -> Option<Arc<Running>> {
        let guard = self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        guard
            .as_ref()
            .filter(|running| running.pid == std::process::id())
            .cloned()
    }

    pub(crate) fn with_running<T>(&self, work: impl FnOnce(&Running) -> Result<T>) -> Result<T> {
        let running = self.running()?;
        work(&running)
    }

    /// Starts the in-process relay (FA-R003) unless the mode is `external`. Idempotent.
    pub fn start_relay(&self) -> Result<()> {
        if !self.relay_in_process() {
            return Ok(());
        }
        self.with_running(|running| {
            let _entered = running.runtime.enter();
            running.outbox.start_relay();
            Ok(())
        })
    }

    /// Starts the in-process relay unless [`ensure_relay`](Self::ensure_relay) already did in
    /// this process: once per process, and again in a forked child (pre-fork servers). For the
    /// bindings that start the relay on first use; one atomic load when it runs already.
    pub fn ensure_relay(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        let generation = ojs_outbox::id::fork_generation() + 1;
        if self.relay_started.load(Ordering::Acquire) == generation {
            return Ok(());
        }
        self.start_relay()?;
        self.relay_started.store(generation, Ordering::Release);
        Ok(())
    }

    /// Graceful stop: sends what the hot queue holds (within `shutdown_timeout`), releases leases.
    pub fn stop_relay(&self) {
        self.relay_started
            .store(0, std::sync::atomic::Ordering::Release);
        if let Some(running) = self.running_here() {
            running.runtime.block_on(running.outbox.stop_relay());
        }
    }

    /// Stops the relay gracefully and closes this process's database pool and runtime (an
    /// application shutting down). A later call starts afresh.
    pub fn close(&self) {
        self.relay_started
            .store(0, std::sync::atomic::Ordering::Release);
        let running = self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(running) = running.filter(|running| running.pid == std::process::id()) {
            running.runtime.block_on(async {
                running.outbox.stop_relay().await;
                running.outbox.store().close().await;
            });
        }
        // The staged jobs' `create` spans leave before the application exits.
        if ojs_outbox::otel::enabled() {
            ojs_outbox::otel::flush();
        }
    }

    /// Abrupt stop, as a crash: no flush, leases stay until they expire (conformance tests).
    pub fn kill_relay(&self) {
        self.relay_started
            .store(0, std::sync::atomic::Ordering::Release);
        if let Some(running) = self.running_here() {
            running.outbox.kill_relay();
        }
    }

    /// The after-commit hook. Never blocks on I/O, never fails: without a relay in this process
    /// the rows wait for a poller.
    pub fn notify_committed(&self, job_ids: Vec<String>) {
        if let Some(running) = self.running_here() {
            running.outbox.notify_committed(job_ids);
        }
    }

    /// The outermost transaction of `ledger` committed: wakes the relay for every id it still
    /// holds (none from rolled-back savepoints). The ledger is then ended.
    pub fn committed(&self, ledger: &mut Ledger) {
        let job_ids = ledger.commit();
        if !job_ids.is_empty() {
            self.notify_committed(job_ids);
        }
    }

    /// Runs the relay as this process's only job (a framework's `ojs_relay` command) until
    /// SIGINT or SIGTERM, then stops gracefully. Same engine as `ojs-relay run`. A signal that
    /// arrived since [`arm_stop_signals`] stops it before it starts.
    pub fn run_relay_until_signal(&self) -> Result<()> {
        arm_stop_signals()?;
        self.with_running(|running| {
            running.runtime.block_on(async {
                let stop = ojs_outbox::stop_signal::wait();
                let store = running.outbox.store().clone();
                store.check_table().await?;
                let relay = ojs_outbox::Relay::start(
                    store,
                    running.outbox.backend().clone(),
                    &self.config,
                    false,
                );
                let stopped = stop.await;
                relay.shutdown().await;
                stopped
            })
        })
    }
}

/// Called first thing by a framework's relay command: from now on SIGINT and SIGTERM stop
/// [`Bridge::run_relay_until_signal`] gracefully (before it starts, too) instead of killing the
/// process. Idempotent.
pub fn arm_stop_signals() -> Result<()> {
    ojs_outbox::stop_signal::arm()
}
