//! `ojs-devserver`: an in-memory stand-in for an Open Job Spec backend.
//!
//! It speaks the OJS HTTP binding's producer side (single and atomic batch enqueue, get job,
//! health, manifest) and worker side (fetch, ack, nack, heartbeat, with retries, backoff and
//! reservations that run out) and answers as the reference servers do: the full job envelope,
//! the `scheduled` state, unique jobs, the binding's error codes and `X-Request-Id` (rule by
//! rule in docs/ojs-compat.md), plus a control API under `/_dev` that tells a test what the
//! backend really holds and lets it inject faults. It serves the event stream of RFC-0005
//! (`GET /v1/events/stream`), and the control API moves a job through a worker's life
//! (start, complete, fail) the way the worker endpoints do. It is the oracle of the
//! conformance suite, so it deliberately shares no code with the `ojs-outbox` crate it checks.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use ojs_devserver::{DevServer, Fault};
//! let server = DevServer::start(0).await?;
//! server.push_fault(Fault::status_code(503).with_retry_after("1").times(2));
//! // ... point the code under test at server.url() ...
//! let received = server.snapshot();
//! assert!(received.jobs.is_empty());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod app;
mod envelope;
mod events;
mod http;
mod model;
mod respond;
mod retry;
mod server;
mod store;
mod timefmt;
mod unique;
mod validate;
mod worker;
mod worker_api;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use events::{HISTORY_LIMIT, SUBSCRIBER_BUFFER};
pub use model::{
    Fault, FaultScope, JobControlError, Received, ReceivedJob, ReplacedJob, RequestCounts, Stats,
};

use crate::app::App;
use crate::worker::{DEFAULT_WORKER_ID, Transition};

/// Largest request body the OJS endpoints accept (1 MiB), as the reference servers have it.
pub const MAX_BODY_BYTES: usize = validate::MAX_BODY_BYTES;

/// How to start a [`DevServer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevServerConfig {
    pub addr: SocketAddr,
    /// Whether `POST /ojs/v1/jobs/batch` exists (and the manifest says so) at start and after
    /// every reset.
    pub batch_enqueue: bool,
}

impl Default for DevServerConfig {
    fn default() -> Self {
        DevServerConfig {
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            batch_enqueue: true,
        }
    }
}

/// A running devserver. Dropping it stops the server too (like [`DevServer::shutdown`], but
/// without waiting): keep it alive for as long as the code under test needs the backend.
pub struct DevServer {
    addr: SocketAddr,
    app: Arc<App>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl DevServer {
    /// Binds `127.0.0.1:port` (0 = ephemeral) and serves in the current tokio runtime.
    pub async fn start(port: u16) -> std::io::Result<DevServer> {
        DevServer::start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await
    }

    /// Binds `addr` and serves in the current tokio runtime.
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<DevServer> {
        DevServer::start_with(DevServerConfig {
            addr,
            ..DevServerConfig::default()
        })
        .await
    }

    /// Starts with a full configuration (e.g. batch enqueue disabled from the start).
    pub async fn start_with(config: DevServerConfig) -> std::io::Result<DevServer> {
        let listener = TcpListener::bind(config.addr).await?;
        let addr = listener.local_addr()?;
        let app = Arc::new(App::new(config.batch_enqueue));
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(server::serve(listener, app.clone(), stopped));
        Ok(DevServer {
            addr,
            app,
            stop,
            task,
        })
    }

    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Everything received since start or the last reset: the same data as
    /// `GET /_dev/received`. Copies every stored job; for counters only, use [`DevServer::stats`].
    pub fn snapshot(&self) -> Received {
        let json = self.app.received_json();
        serde_json::from_slice(&json).expect("the devserver writes valid received JSON")
    }

    /// Counts of held and replaced jobs, delivery total and request counters
    /// (`GET /_dev/stats`).
    pub fn stats(&self) -> Stats {
        self.app.state().stats()
    }

    /// Clears jobs, counters and faults; batch enqueue goes back to its start value.
    pub fn reset(&self) {
        self.app.reset();
    }

    /// Appends a fault to the FIFO list.
    ///
    /// # Panics
    /// If the fault cannot work (status outside 400..=599, `count` 0, or no effect at all):
    /// a mistake in the test's setup, reported where it was made.
    pub fn push_fault(&self, fault: Fault) {
        if let Some(problem) = fault.problem() {
            panic!("invalid devserver fault {fault:?}: {problem}");
        }
        self.app.state().push_fault(fault);
    }

    /// The faults still pending, in order, with their remaining counts.
    pub fn faults(&self) -> Vec<Fault> {
        self.app.state().faults()
    }

    pub fn clear_faults(&self) {
        self.app.state().clear_faults();
    }

    /// Switches batch enqueue (the manifest capability and the endpoint) on or off.
    pub fn set_batch_enqueue(&self, enabled: bool) {
        self.app.state().set_batch_enqueue(enabled);
    }

    /// Ends every open `GET /v1/events/stream` response now (`POST /_dev/events/drop`), so a
    /// client's reconnect and `Last-Event-ID` resume can be tested. Returns how many were open.
    pub fn drop_event_streams(&self) -> usize {
        self.app.events.drop_streams()
    }

    /// Moves a stored `available` or `retryable` job (even before its backoff ran out) to
    /// `active` as worker `devserver-worker`, as a fetch would, and emits `job.started`. Returns
    /// the job's envelope.
    pub fn start_job(&self, id: &str) -> Result<serde_json::Value, JobControlError> {
        self.start_job_as(id, DEFAULT_WORKER_ID)
    }

    /// [`DevServer::start_job`] with the `worker_id` the `job.started` event names.
    pub fn start_job_as(
        &self,
        id: &str,
        worker_id: &str,
    ) -> Result<serde_json::Value, JobControlError> {
        envelope(self.app.transition(id, Transition::Start { worker_id }))
    }

    /// Moves an `active` job to `completed` and emits `job.completed` (with `duration_ms`).
    pub fn complete_job(&self, id: &str) -> Result<serde_json::Value, JobControlError> {
        envelope(self.app.transition(id, Transition::Complete))
    }

    /// Fails the `active` job's attempt with `error` (an object, e.g.
    /// `{"code": "handler_error", "message": "..."}`, recorded as sent) as a nack would:
    /// `retryable` with the retry policy's backoff while attempts remain (`job.failed`, then
    /// `job.retrying`), else `discarded` (`job.failed`, then `job.discarded`).
    pub fn fail_job(
        &self,
        id: &str,
        error: serde_json::Value,
    ) -> Result<serde_json::Value, JobControlError> {
        if !error.is_object() {
            return Err(JobControlError::InvalidRequest {
                message: "the error must be a JSON object".to_owned(),
            });
        }
        envelope(self.app.transition(id, Transition::Fail { error: &error }))
    }

    /// Stops listening and closes every connection (in-flight requests get no response).
    pub async fn shutdown(self) {
        let DevServer { stop, task, .. } = self;
        let _ = stop.send(());
        let _ = task.await;
    }
}

impl std::fmt::Debug for DevServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn envelope(
    result: Result<Vec<u8>, JobControlError>,
) -> Result<serde_json::Value, JobControlError> {
    result.map(|json| serde_json::from_slice(&json).expect("the devserver writes valid JSON"))
}
