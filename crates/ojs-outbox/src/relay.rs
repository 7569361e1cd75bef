//! The relay engine: takes committed outbox rows to the OJS backend.
//!
//! One task per relay, sequential, so what one relay sends leaves in id order (FIFO, §12.2).
//! Work arrives two ways: the hot path (`notify_committed`, milliseconds after COMMIT) and the
//! poller (every `poll_interval`, for rows the hot path never heard of: a crash between COMMIT
//! and the hook, a full hot queue, other processes, a separate relay). Each round is
//! claim -> send (`send.rs`: a batch when the manifest allows) -> settle (one statement). On
//! SQLite the claim writes a lease; on PostgreSQL and MySQL it locks the rows in a transaction
//! that stays open across the request and ends with the settlement, bounded by `relay.lease`
//! (docs/relay.md#claim-lease-settle).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::classify::Outcome;
use crate::config::Config;
use crate::events::{Event, EventBus, EventLog, now_ms};
use crate::hot_drops::{HOT_DROP_TELL_EVERY, HotDrops, Notice};
use crate::log_feed::{self, Level};
use crate::relay_metrics::{Histogram, Histograms, Metrics};
use crate::store::{Claim, ClaimedRow, RowStatus, Settlement, Store};
use crate::wake::Wake;

mod pause;
mod report;
mod send;
use pause::Trouble;
use send::take_batch;

const PRUNE_CHUNK: usize = 10_000;
const METRICS_REFRESH: Duration = Duration::from_secs(5);
/// The longest pause for a backend outage without `Retry-After`: the relay tries again at least
/// this often, with one row, however long the outage has lasted.
pub const OUTAGE_PROBE_MAX: Duration = Duration::from_secs(1);
/// The pause after a failed database operation; the pool's own reconnect backoff is short too
/// (store.rs), so the relay is back within about a second of the database.
const DATABASE_PAUSE: Duration = Duration::from_millis(250);
/// On SQLite the file watch fires when a commit writes the WAL, which can be a moment before
/// the commit is visible: a wake-up whose claim finds nothing looks again after these.
const SQLITE_WAKE_RECHECKS: [Duration; 3] = [
    Duration::from_millis(1),
    Duration::from_millis(4),
    Duration::from_millis(16),
];

/// Counters kept in memory, readable at any time through `Relay::metrics`.
#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    deduplicated: AtomicU64,
    unique_rejected: AtomicU64,
    hot_enqueued: AtomicU64,
    hot_dropped: AtomicU64,
    /// The hot queue's drops, told once per burst (`hot_drops.rs`); `hot_dropping` says, without
    /// the lock, whether a burst may be waiting to be told over.
    hot_drops: Mutex<HotDrops>,
    hot_dropping: AtomicBool,
    in_flight: AtomicI64,
    pending: AtomicI64,
    oldest_pending_age_ms: AtomicI64,
    state: Mutex<BackendState>,
    delivery_lag: Histogram,
    send_duration: Histogram,
    claim_duration: Histogram,
    settle_duration: Histogram,
}

#[derive(Debug, Clone, Default)]
struct BackendState {
    healthy: Option<bool>,
    last_error: Option<String>,
}

impl Counters {
    /// Updates the hot queue's burst of drops with `change` and logs what it says to tell:
    /// a warning when a burst starts and at most every `HOT_DROP_TELL_EVERY` while it lasts,
    /// a line when it is over.
    fn tell_hot_drops(
        &self,
        table: &str,
        capacity: usize,
        change: impl FnOnce(&mut HotDrops) -> Vec<Notice>,
    ) {
        let notices = {
            let mut drops = self.hot_drops.lock().expect("hot drops lock");
            let notices = change(&mut drops);
            self.hot_dropping.store(drops.in_burst(), Ordering::Relaxed);
            notices
        };
        for notice in notices {
            let (level, message) = hot_drop_message(&notice, capacity);
            log_feed::emit(level, table, None, message);
        }
    }

    /// Tells the end of a burst of drops once none came for `HOT_DROP_TELL_EVERY`.
    fn tell_hot_drops_over(&self, table: &str, capacity: usize) {
        let now = std::time::Instant::now();
        self.tell_hot_drops(table, capacity, |drops| {
            drops.quiet(now).into_iter().collect()
        });
    }
}

/// The log line of a hot-queue notice (docs/relay.md#logging).
fn hot_drop_message(notice: &Notice, capacity: usize) -> (Level, String) {
    let every = seconds(HOT_DROP_TELL_EVERY);
    match notice {
        Notice::Started { dropped } => (
            Level::Warning,
            format!(
                "outbox relay: the hot queue is full (relay.hot_queue_capacity = {capacity}): {dropped} committed job id(s) dropped; their rows stay pending and the poller sends them, fresh rows included while the drops last; the relay is behind the commits (told again at most every {every} while it lasts)"
            ),
        ),
        Notice::Continuing {
            since,
            dropped,
            lasted,
        } => (
            Level::Warning,
            format!(
                "outbox relay: the hot queue is still full: {since} more committed job id(s) dropped ({dropped} since it filled {} ago); the poller sends their rows",
                seconds(*lasted)
            ),
        ),
        Notice::Ended { dropped, lasted } => (
            Level::Info,
            format!(
                "outbox relay: the hot queue takes committed job ids again (none dropped for {every}): {dropped} dropped over {}; the poller sends their rows",
                seconds(*lasted)
            ),
        ),
    }
}

/// A running relay. Dropping it without `shutdown` stops it at the next await point.
pub struct Relay {
    hot: mpsc::Sender<String>,
    counters: Arc<Counters>,
    events: Arc<EventBus>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// Set once a commit in another process wakes this relay (`wake.rs`); `None`: it has no
    /// such wake-up (a hot path, `relay.notify` off, or no source on this system).
    wake_ready: Option<Arc<AtomicBool>>,
    /// Its id: lease tokens and the `relay` label of its metrics.
    relay_id: String,
    /// Its table and hot queue's capacity, for the hot queue's warnings.
    table: String,
    hot_capacity: usize,
}

impl Relay {
    /// Starts the relay on the current tokio runtime. `hot_path` says whether commits will be
    /// announced through `notify_committed` (in-process); without one, the poller does not
    /// leave young rows to it. It writes through `store.for_relay()` (commits without fsync).
    pub fn start(store: Store, backend: Backend, config: &Config, hot_path: bool) -> Relay {
        if let Err(error) = crate::otel::install_if_wanted(config.tracing) {
            log_feed::emit(
                Level::Warning,
                &config.outbox.table_name,
                None,
                format!("outbox relay: tracing stays off: {error}"),
            );
        }
        let (hot, hot_rx) = mpsc::channel(config.relay.hot_queue_capacity);
        let (stop, stop_rx) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let events = Arc::new(EventBus::new(
            &config.outbox.table_name,
            config.relay.event_buffer,
            config.relay.event_retention.map(|retention| EventLog {
                store: store.clone(),
                retention,
            }),
        ));
        // A relay with a hot path is woken by its own process's commits; one without is woken
        // by everyone's (a separate relay).
        let wake = (!hot_path && config.relay.notify)
            .then(|| Wake::start(&store, &config.outbox.table_name))
            .flatten();
        let wake_ready = wake.as_ref().map(|wake| wake.ready.clone());
        let relay_id = uuid::Uuid::now_v7().simple().to_string();
        let engine = Engine {
            wake,
            relay_events: Vec::new(),
            wake_rechecks: Vec::new(),
            last_claimed: 0,
            event_log_failed: false,
            // Not on SQLite: there a heartbeat is a write every few seconds, and a write of
            // another connection breaks an application's deferred transaction that read
            // before it writes (SQLITE_BUSY_SNAPSHOT); one host runs SQLite's relays.
            registry: (store.dialect() != crate::sql::Dialect::Sqlite).then(|| {
                crate::store::relays::RelayIdentity {
                    relay_id: relay_id.clone(),
                    host: host_name(),
                    pid: i64::from(std::process::id()),
                    started_ms: now_ms(),
                }
            }),
            events: events.clone(),
            store: store.for_relay(),
            backend,
            config: config.clone(),
            skip_recent: if hot_path {
                config.relay.skip_recent
            } else {
                Duration::ZERO
            },
            resumed: false,
            counters: counters.clone(),
            relay_id: relay_id.clone(),
            claims: 0,
            batch_supported: None,
            pause_until: None,
            send_deadline: None,
            shutdown_deadline: None,
            consecutive_pauses: 0,
            announced: None,
            paused_since: None,
            database_failing: false,
            probe: false,
            hot_rx,
            stop_rx,
            settling: None,
            prefetched: None,
            chained_claims: 0,
        };
        let task = tokio::spawn(engine.run());
        Relay {
            hot,
            counters,
            events,
            stop,
            task: Mutex::new(Some(task)),
            wake_ready,
            relay_id,
            table: config.outbox.table_name.clone(),
            hot_capacity: config.relay.hot_queue_capacity,
        }
    }

    /// Whether a commit in another process wakes this relay now (its LISTEN is in place, or
    /// its file watch): what a test waits for before it stages.
    pub fn woken_by_commits(&self) -> bool {
        self.wake_ready
            .as_ref()
            .is_some_and(|ready| ready.load(Ordering::Acquire))
    }

    /// Wakes the relay for rows just committed. Never blocks and never fails: when the hot
    /// queue is full the ids are dropped and the poller finds the rows (a warning once per
    /// burst of drops, `hot_drops.rs`). Returns how many ids were queued.
    pub fn notify_committed<I: IntoIterator<Item = String>>(&self, job_ids: I) -> usize {
        let (mut queued, mut dropped) = (0, 0);
        for id in job_ids {
            match self.hot.try_send(id) {
                Ok(()) => queued += 1,
                Err(_) => dropped += 1,
            }
        }
        let counters = &self.counters;
        counters
            .hot_enqueued
            .fetch_add(queued as u64, Ordering::Relaxed);
        if dropped > 0 {
            counters.hot_dropped.fetch_add(dropped, Ordering::Relaxed);
            let now = std::time::Instant::now();
            counters.tell_hot_drops(&self.table, self.hot_capacity, |drops| {
                drops.dropped(dropped, now)
            });
        } else if counters.hot_dropping.load(Ordering::Relaxed) {
            counters.tell_hot_drops_over(&self.table, self.hot_capacity);
        }
        queued
    }

    /// The delivery-lag and send-duration histograms (`prometheus.rs`).
    pub fn histograms(&self) -> Histograms {
        let c = &self.counters;
        Histograms {
            delivery_lag: c.delivery_lag.snapshot(),
            send_duration: c.send_duration.snapshot(),
            claim_duration: c.claim_duration.snapshot(),
            settle_duration: c.settle_duration.snapshot(),
        }
    }

    /// The Prometheus exposition of this relay (`prometheus.rs`); `status`: counts read from
    /// the table just now, when the caller has them.
    pub fn prometheus_text(
        &self,
        table: &str,
        status: Option<&crate::store::OutboxStatus>,
    ) -> String {
        let metrics = self.metrics();
        let histograms = self.histograms();
        crate::prometheus::exposition(&crate::prometheus::Sample {
            table,
            relay: &self.relay_id,
            metrics: &metrics,
            histograms: &histograms,
            status,
        })
    }

    /// This relay's event bus: subscribe to it, replay from it (`events.rs`).
    pub fn events(&self) -> Arc<EventBus> {
        self.events.clone()
    }

    pub fn metrics(&self) -> Metrics {
        let c = &self.counters;
        let state = c.state.lock().expect("metrics lock").clone();
        Metrics {
            pending: c.pending.load(Ordering::Relaxed),
            in_flight: c.in_flight.load(Ordering::Relaxed),
            sent: c.sent.load(Ordering::Relaxed),
            retried: c.retried.load(Ordering::Relaxed),
            dead: c.dead.load(Ordering::Relaxed),
            deduplicated: c.deduplicated.load(Ordering::Relaxed),
            unique_rejected: c.unique_rejected.load(Ordering::Relaxed),
            hot_enqueued: c.hot_enqueued.load(Ordering::Relaxed),
            hot_dropped: c.hot_dropped.load(Ordering::Relaxed),
            hot_queue_depth: (self.hot.max_capacity() - self.hot.capacity()) as i64,
            oldest_pending_age_ms: c.oldest_pending_age_ms.load(Ordering::Relaxed),
            backend_healthy: state.healthy,
            last_error: state.last_error,
        }
    }

    pub fn is_running(&self) -> bool {
        self.task
            .lock()
            .expect("task lock")
            .as_ref()
            .is_some_and(|t| !t.is_finished())
    }

    /// Graceful stop: finishes the round in progress, sends what the hot queue holds (within
    /// `shutdown_timeout`), releases every lease, then returns. Committed rows not sent stay
    /// `pending` in the table: nothing is lost.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let task = self.task.lock().expect("task lock").take();
        if let Some(task) = task {
            let _ = task.await;
        }
        if crate::otel::enabled() {
            // The spans of the last rounds leave before the process may exit.
            let _ = tokio::task::spawn_blocking(crate::otel::flush).await;
        }
    }

    /// Abrupt stop, as a crash would: no flush, leases stay until they expire.
    pub fn kill(&self) {
        if let Some(task) = self.task.lock().expect("task lock").take() {
            task.abort();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

struct Engine {
    /// The cross-process wake-up, for a relay without a hot path (`wake.rs`).
    wake: Option<Wake>,
    /// Relay events waiting for the event log (`relay_event`).
    relay_events: Vec<Event>,
    /// After a SQLite wake-up whose claim found nothing, the next looks (last first).
    wake_rechecks: Vec<Duration>,
    /// Rows the last poller claim took.
    last_claimed: usize,
    /// The event log could not be created: no events are written (delivery goes on).
    event_log_failed: bool,
    events: Arc<EventBus>,
    store: Store,
    backend: Backend,
    config: Config,
    skip_recent: Duration,
    /// A pause just ended: the next poll takes every due row, however recent, in id order, so
    /// the rows the pause released go out before hot ids that arrived during it.
    resumed: bool,
    counters: Arc<Counters>,
    relay_id: String,
    /// Who this relay is in `<table>_relays` (`None` once the registry could not be made:
    /// the relay delivers without it).
    registry: Option<crate::store::relays::RelayIdentity>,
    claims: u64,
    batch_supported: Option<bool>,
    pause_until: Option<Instant>,
    /// No new request may start after this: the claim's lease would expire before it ends
    /// (or the graceful stop's time is up). Unsent rows are released instead.
    send_deadline: Option<Instant>,
    /// Set while a graceful stop flushes.
    shutdown_deadline: Option<Instant>,
    consecutive_pauses: u32,
    /// The kind of backend trouble last logged, until an answered send resumes the relay: each
    /// pause is logged when it starts (or turns into another kind), not at every probe.
    announced: Option<Trouble>,
    /// When the backend pause now logged began.
    paused_since: Option<Instant>,
    /// A database operation failed and none has succeeded since (logged once, with its end).
    database_failing: bool,
    /// After an outage pause the next request carries one row: a cheap test of whether the
    /// backend is back before a whole batch goes out again.
    probe: bool,
    hot_rx: mpsc::Receiver<String>,
    stop_rx: watch::Receiver<bool>,
    /// The last round's settlement while it commits (PostgreSQL).
    settling: Option<Settling>,
    /// The poller's next claim, taken while this round sends (PostgreSQL, during a backlog).
    prefetched: Option<AbortOnDrop<Prefetched>>,
    /// Claims taken ahead in a row since the last that started at the head of the table.
    chained_claims: u32,
}

/// A claim taken ahead, with its lease token, how long the statement took, and the row it
/// started past (`next_claim_start`).
struct Prefetched {
    token: String,
    claimed: crate::Result<Claim>,
    took: Duration,
    after: Option<i64>,
}

/// A round's settlement running beside the next round; aborted with the relay (a kill drops
/// it, and its transaction rolls back as a crash would leave it).
struct Settling {
    task: AbortOnDrop<Settled>,
    rows: Vec<ClaimedRow>,
    /// `true` once the settlement has committed: a claim of the rows behind its keyed rows
    /// (their ordering keys' next jobs) waits for it.
    done: tokio::sync::watch::Receiver<bool>,
}

/// What ended the relay's idle wait.
enum Woke {
    /// Hot ids arrived (0: every sender is gone).
    Hot(usize),
    /// Another process committed staged rows: the poller's next round is due now.
    Staged,
    /// The settlement running beside the relay is in.
    Settled(Result<Settled, tokio::task::JoinError>),
    /// A timer or the stop signal: the loop looks at what is due.
    Timer,
}

/// What a settlement statement did, and how long it took.
struct Settled {
    result: crate::Result<u64>,
    took: Duration,
    settlements: Vec<Settlement>,
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Engine {
    async fn run(mut self) {
        if let Err(error) = self.store.upgrade_table().await {
            // Claims name the new columns: until the migration runs, they fail and pause.
            self.log(
                Level::Error,
                None,
                format!(
                    "outbox relay: the table {} lacks the columns order_key and unique_key and they cannot be added ({error}); run the migration (`ojs-relay migrate`)",
                    self.store.sql().table
                ),
            );
        }
        if let Some(log) = self.events.log()
            && let Err(error) = log.store.ensure_event_log().await
        {
            // Delivery must not depend on the log: the relay goes on, without its events.
            self.log(
                Level::Error,
                None,
                format!(
                    "outbox relay: its event log {} cannot be created ({error}); the relay delivers, but makes no events (create it with the migration, or set relay.event_retention to null)",
                    self.store.sql().event_log()
                ),
            );
            self.event_log_failed = true;
        }
        if self.registry.is_some()
            && let Err(error) = self.store.ensure_relay_registry().await
        {
            self.log(
                Level::Warning,
                None,
                format!(
                    "outbox relay: its registry {} cannot be created ({error}); the relay delivers, but the dashboard does not list it",
                    self.store.sql().relay_registry()
                ),
            );
            self.registry = None;
        }
        let poll_interval = self.config.outbox.poll_interval;
        let batch_size = self.config.outbox.batch_size;
        let mut next_poll = Instant::now();
        let mut next_prune = Instant::now() + self.config.relay.prune_interval;
        let mut next_refresh = Instant::now();
        let mut hot_ids = Vec::with_capacity(batch_size);
        let mut dropped_seen = 0;
        loop {
            // Ids the hot queue dropped are rows the poller must find: at once, not after
            // `skip_recent` and a poll interval (and `claim_due` skips no fresh row meanwhile).
            let dropped = self.counters.hot_dropped.load(Ordering::Relaxed);
            if dropped > dropped_seen {
                dropped_seen = dropped;
                next_poll = Instant::now();
            }
            if self.stopping() || self.pause_until.is_some() {
                // Its rows are let go (the transaction rolls back): nothing was sent.
                self.prefetched = None;
            }
            if self.stopping() {
                break;
            }
            if let Some(until) = self.pause_until {
                let mut stop = self.stop_rx.clone();
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => {}
                    _ = stop.changed() => {}
                }
                self.pause_until = None;
                self.resumed = true;
                next_poll = Instant::now();
                continue;
            }
            let now = Instant::now();
            if now >= next_refresh {
                self.refresh_metrics().await;
                next_refresh = now + METRICS_REFRESH;
            }
            if self.counters.hot_dropping.load(Ordering::Relaxed) {
                self.counters.tell_hot_drops_over(
                    &self.config.outbox.table_name,
                    self.config.relay.hot_queue_capacity,
                );
            }
            if now >= next_prune {
                self.prune().await;
                next_prune = now + self.config.relay.prune_interval;
            }
            // Checked before waiting so a steady stream of hot ids cannot starve the poller.
            // A full claim means a backlog: poll again at once (the timers above still run
            // between rounds, so metrics and pruning keep up during a long drain).
            if now >= next_poll {
                let backlog = self.poll_once().await;
                if !backlog {
                    next_poll = Instant::now()
                        + match self.wake_rechecks.pop() {
                            Some(after) if self.last_claimed == 0 => after,
                            _ => {
                                self.wake_rechecks.clear();
                                poll_interval
                            }
                        };
                } else if !self.hot_rx.is_empty() {
                    // Nor a backlog the hot path: one hot round between two poller rounds.
                    // Left waiting, fresh commits would overflow the hot queue and then wait
                    // for the poller behind every older row.
                    self.hot_rx.recv_many(&mut hot_ids, batch_size).await;
                    self.deliver_hot(std::mem::take(&mut hot_ids)).await;
                }
                continue;
            }
            self.flush_relay_events().await;
            // Idle: wait for hot ids, the timers, or the last settlement's outcome (taken as
            // soon as it is in, rather than at the next round; a hot id does not wait for it).
            let mut stop = self.stop_rx.clone();
            let woke = {
                let settling = &mut self.settling;
                tokio::select! {
                    biased;
                    _ = stop.changed() => Woke::Timer,
                    received = self.hot_rx.recv_many(&mut hot_ids, batch_size) => Woke::Hot(received),
                    done = async { (&mut settling.as_mut().expect("checked").task.0).await },
                        if settling.is_some() => Woke::Settled(done),
                    _ = async { self.wake.as_ref().expect("checked").staged.notified().await },
                        if self.wake.is_some() => Woke::Staged,
                    _ = tokio::time::sleep_until(next_poll.min(next_prune).min(next_refresh)) => Woke::Timer,
                }
            };
            match woke {
                Woke::Hot(0) => break, // every sender is gone: the relay handle was dropped
                Woke::Hot(_) => self.deliver_hot(std::mem::take(&mut hot_ids)).await,
                Woke::Staged => {
                    next_poll = Instant::now();
                    if self.store.dialect() == crate::sql::Dialect::Sqlite {
                        self.wake_rechecks = SQLITE_WAKE_RECHECKS.iter().rev().copied().collect();
                    }
                }
                Woke::Settled(done) => {
                    let rows = self.settling.take().expect("settling").rows;
                    self.take_settled(&rows, done).await;
                }
                Woke::Timer => {}
            }
        }
        self.flush().await;
        self.finish_settling().await;
        self.flush_relay_events().await;
        if self.registry.is_some() {
            let _ = self.store.relay_gone(&self.relay_id).await;
        }
    }

    fn stopping(&self) -> bool {
        *self.stop_rx.borrow()
    }

    fn must_stop_sending(&self) -> bool {
        self.pause_until.is_some()
            || self
                .send_deadline
                .is_some_and(|deadline| Instant::now() >= deadline)
    }

    /// Called just before a claim: a request may start only while it can finish within the lease.
    fn start_claim_clock(&mut self) {
        let relay = &self.config.relay;
        let lease_end = Instant::now() + relay.lease.saturating_sub(relay.request_timeout);
        self.send_deadline = Some(
            self.shutdown_deadline
                .map_or(lease_end, |stop| stop.min(lease_end)),
        );
    }

    fn next_lease_token(&mut self) -> String {
        self.claims += 1;
        format!("{}-{}", self.relay_id, self.claims)
    }

    async fn deliver_hot(&mut self, ids: Vec<String>) {
        let token = self.next_lease_token();
        self.start_claim_clock();
        let started = Instant::now();
        let claimed = self
            .store
            .claim_ids(&token, self.config.relay.lease, &ids)
            .await;
        self.counters.claim_duration.record(started.elapsed());
        match claimed {
            Ok(claim) => {
                if claim.rows.is_empty() {
                    self.database_ok();
                }
                self.deliver(&token, claim).await
            }
            Err(e) => self.database_trouble(e).await,
        }
    }

    /// One poller round; true when it claimed a full batch and no pause or stop intervened.
    /// During a backlog on PostgreSQL the next claim runs while this round sends (its rows are
    /// others: these stay locked), so the database and the backend work at the same time.
    async fn poll_once(&mut self) -> bool {
        let batch_size = self.config.outbox.batch_size;
        // Before the claim: a lease (SQLite) runs from the claim statement. A claim taken
        // ahead holds its rows by locks (PostgreSQL), which do not expire.
        self.start_claim_clock();
        let next = match self.prefetched.take() {
            Some(mut task) => (&mut task.0).await,
            None => Ok(self.claim_due(None).await),
        };
        let Prefetched {
            token,
            claimed,
            took,
            after,
        } = match next {
            Ok(prefetched) => prefetched,
            // Only a panic gets here (an abort drops the relay too).
            Err(join) => Prefetched {
                token: String::new(),
                claimed: Err(crate::Error::new(
                    crate::ErrorCode::Database,
                    join.to_string(),
                )),
                took: Duration::ZERO,
                after: None,
            },
        };
        self.counters.claim_duration.record(took);
        match claimed {
            Ok(claim) => {
                if claim.rows.is_empty() {
                    self.database_ok();
                }
                self.last_claimed = claim.rows.len();
                let full = claim.rows.len() == batch_size;
                if full && claim.holds_transaction() {
                    let after = next_claim_start(&claim.rows, self.chained_claims);
                    self.chained_claims = if after.is_some() {
                        self.chained_claims + 1
                    } else {
                        0
                    };
                    let claim_next = self.claim_due(after);
                    self.prefetched = Some(AbortOnDrop(tokio::spawn(claim_next)));
                } else {
                    self.chained_claims = 0;
                }
                // A keyed row's successor is due once it settles: claim again then (the claim
                // waits for the settlement), rather than after a poll interval.
                let keyed = claim.rows.iter().any(|row| row.keyed);
                // A claim that started past the last one and came back short may have left due
                // rows behind it: the next one, from the head, runs at once.
                let behind = after.is_some() && !full;
                self.deliver(&token, claim).await;
                (full || keyed || behind) && self.pause_until.is_none() && !self.stopping()
            }
            Err(e) => {
                self.database_trouble(e).await;
                false
            }
        }
    }

    /// The poller's claim statement, as a future that owns what it needs (it may run as a
    /// task beside the round that sends); past row `after` if given (`next_claim_start`).
    ///
    /// While a settlement of rows with ordering keys is in flight, the claim waits for it: the
    /// next jobs of those keys become due only when it commits, and a claim that ran before
    /// would find them held back and scan the whole backlog for nothing.
    fn claim_due(
        &mut self,
        after: Option<i64>,
    ) -> impl std::future::Future<Output = Prefetched> + Send + 'static {
        let token = self.next_lease_token();
        let store = self.store.clone();
        // After a pause, and while the hot queue drops ids (a burst, `hot_drops.rs`), the
        // poller takes fresh rows too: nothing else would send them sooner.
        let overflowing = self.counters.hot_dropping.load(Ordering::Relaxed);
        let (lease, limit, skip_recent) = (
            self.config.relay.lease,
            self.config.outbox.batch_size,
            if std::mem::take(&mut self.resumed) || overflowing {
                Duration::ZERO
            } else {
                self.skip_recent
            },
        );
        let keyed_settling = self
            .settling
            .as_ref()
            .filter(|settling| settling.rows.iter().any(|row| row.keyed))
            .map(|settling| settling.done.clone());
        async move {
            if let Some(mut done) = keyed_settling {
                let _ = done.wait_for(|done| *done).await;
            }
            let started = Instant::now();
            let claimed = store
                .claim_due_after(&token, lease, limit, skip_recent, after)
                .await;
            Prefetched {
                token,
                claimed,
                took: started.elapsed(),
                after,
            }
        }
    }

    async fn database_trouble(&mut self, error: crate::Error) {
        let delay = DATABASE_PAUSE.min(self.config.relay.max_backoff);
        if self.database_failing {
            tracing::debug!(%error, "outbox relay: the database still fails");
        } else {
            self.database_failing = true;
            let claimed = match self.store.dialect() {
                crate::sql::Dialect::Sqlite => {
                    "rows it had leased are sent again once their lease expires"
                }
                // A claim's row locks end with its transaction: nothing waits for a lease.
                crate::sql::Dialect::Postgres | crate::sql::Dialect::Mysql => {
                    "rows it had claimed are due again at once (their row locks ended with the claim's transaction)"
                }
            };
            self.log(
                Level::Warning,
                None,
                format!(
                    "outbox relay: a database operation failed ({error}); pausing, trying again every {}; {claimed}",
                    seconds(delay)
                ),
            );
        }
        self.record_error(error.to_string(), false);
        self.pause(delay);
    }

    /// A database operation succeeded: ends a database pause (logged once).
    fn database_ok(&mut self) {
        if self.database_failing {
            self.database_failing = false;
            self.log(
                Level::Info,
                None,
                "outbox relay: the database answers again; resuming".to_owned(),
            );
        }
    }

    /// One relay message, once: a `tracing` event and a record of the bindings' log feed.
    fn log(&self, level: Level, job_id: Option<&str>, message: String) {
        log_feed::emit(level, &self.config.outbox.table_name, job_id, message);
    }

    /// Sends claimed rows and settles them all in one statement.
    async fn deliver(&mut self, token: &str, mut claim: Claim) {
        if claim.rows.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut claim.rows);
        self.counters
            .in_flight
            .store(rows.len() as i64, Ordering::Relaxed);
        let mut settlements = Vec::with_capacity(rows.len());
        let batch = match self.batch_supported().await {
            Ok(batch) => batch,
            Err(reason) => {
                self.pause_for(&Outcome::Unavailable {
                    reason,
                    retry_after: None,
                });
                false
            }
        };
        let mut rest = rows.as_slice();
        if self.probe && !self.must_stop_sending() {
            settlements.push(self.send_single(&rest[0]).await);
            rest = &rest[1..];
        }
        while !rest.is_empty() {
            if self.must_stop_sending() {
                settlements.extend(rest.iter().map(release));
                break;
            }
            if batch {
                let (group, body) = take_batch(rest, self.config.outbox.batch_size);
                rest = &rest[group.len()..];
                match body {
                    Some(body) => self.send_batch(group, body, &mut settlements).await,
                    None => settlements.push(self.send_single(&group[0]).await),
                }
            } else {
                let row = &rest[0];
                rest = &rest[1..];
                settlements.push(self.send_single(row).await);
            }
        }
        self.counters.in_flight.store(0, Ordering::Relaxed);
        // One settlement at a time, in claim order.
        self.finish_settling().await;
        // With the event log, the round's events commit with its settlement (each once).
        let logged = match self.events.log() {
            Some(_) if !self.event_log_failed => {
                let mut events = std::mem::take(&mut self.relay_events);
                events.extend(self.job_events(&pair(&rows, &settlements)));
                (!events.is_empty()).then(|| crate::events::logged(&events))
            }
            _ => None,
        };
        let store = self.store.clone();
        let token = token.to_owned();
        let held = claim.holds_transaction();
        let settle = async move {
            let started = Instant::now();
            let result = store
                .settle(&token, claim, &settlements, logged.as_ref())
                .await;
            Settled {
                result,
                took: started.elapsed(),
                settlements,
            }
        };
        if held {
            // PostgreSQL: the claim's transaction commits while the next round claims (other
            // rows: these stay locked until then) and sends.
            let (done_tx, done) = tokio::sync::watch::channel(false);
            let settle = async move {
                let settled = settle.await;
                let _ = done_tx.send(true);
                settled
            };
            self.settling = Some(Settling {
                task: AbortOnDrop(tokio::spawn(settle)),
                rows,
                done,
            });
        } else {
            let settled = settle.await;
            self.settled(&rows, settled).await;
        }
    }

    /// Waits for the settlement still running, if any, and takes its outcome.
    async fn finish_settling(&mut self) {
        if let Some(mut settling) = self.settling.take() {
            let done = (&mut settling.task.0).await;
            self.take_settled(&settling.rows, done).await;
        }
    }

    async fn take_settled(
        &mut self,
        rows: &[ClaimedRow],
        done: Result<Settled, tokio::task::JoinError>,
    ) {
        match done {
            Ok(settled) => self.settled(rows, settled).await,
            // Only a panic gets here (an abort drops the relay too): the rows stay claimable
            // once its transaction is gone.
            Err(join) => {
                let error = crate::Error::new(crate::ErrorCode::Database, join.to_string());
                self.database_trouble(error).await;
            }
        }
    }

    /// A round's settlement is in the table (or failed): counted once the table says so (rows
    /// whose lease was lost count nowhere); dead letters logged and events published then.
    async fn settled(&mut self, rows: &[ClaimedRow], settled: Settled) {
        self.counters.settle_duration.record(settled.took);
        match settled.result {
            Ok(_) => {
                self.database_ok();
                self.count_settled(&settled.settlements);
                let settled = pair(rows, &settled.settlements);
                self.record_lag(&settled);
                self.log_dead_letters(&settled);
                if self.events.log().is_none() && self.events.active() {
                    let events = self.job_events(&settled);
                    let _ = self.events.publish_all(events).await;
                }
            }
            Err(error) => self.database_trouble(error).await,
        }
    }

    async fn prune(&mut self) {
        if let Some(log) = self.events.log() {
            let cutoff = now_ms() - log.retention.as_millis() as i64;
            if let Err(error) = log.store.prune_events(cutoff).await {
                tracing::debug!(%error, "outbox relay: pruning the event log failed");
            }
        }
        loop {
            match self
                .store
                .prune(self.config.relay.retention, PRUNE_CHUNK)
                .await
            {
                Ok(deleted) if deleted as usize == PRUNE_CHUNK => continue,
                Ok(_) => return,
                Err(error) => {
                    self.log(
                        Level::Warning,
                        None,
                        format!(
                            "outbox relay: pruning sent rows failed ({error}); tried again in {}",
                            seconds(self.config.relay.prune_interval)
                        ),
                    );
                    return;
                }
            }
        }
    }

    /// The table's backlog for the metrics, and this relay's heartbeat in the registry.
    async fn refresh_metrics(&mut self) {
        if let Ok((pending, oldest_ms)) = self.store.undelivered_summary().await {
            self.counters.pending.store(pending, Ordering::Relaxed);
            self.counters
                .oldest_pending_age_ms
                .store(oldest_ms, Ordering::Relaxed);
        }
        if let Some(me) = &self.registry {
            let sent = self.counters.sent.load(Ordering::Relaxed) as i64;
            if let Err(error) = self.store.relay_heartbeat(me, now_ms(), sent).await {
                tracing::debug!(%error, "outbox relay: heartbeat not recorded");
            }
        }
    }

    /// On graceful stop: send what the hot queue still holds, within the shutdown timeout.
    async fn flush(&mut self) {
        let deadline = Instant::now() + self.config.relay.shutdown_timeout;
        self.shutdown_deadline = Some(deadline);
        self.pause_until = None;
        let mut ids = Vec::new();
        while let Ok(id) = self.hot_rx.try_recv() {
            ids.push(id);
        }
        for chunk in ids.chunks(self.config.outbox.batch_size) {
            if Instant::now() >= deadline || self.pause_until.is_some() {
                break; // the rows stay pending: the next relay or the poller sends them
            }
            // Not cut short from outside: past the deadline no request starts, and unsent rows
            // are released, so no lease outlives the relay.
            self.deliver_hot(chunk.to_vec()).await;
        }
        self.finish_settling().await;
    }
}

/// Each settlement with its claimed row (settlements follow the send order, which batch
/// splits may change, so they are matched by row id once per round).
fn pair<'a>(
    rows: &'a [ClaimedRow],
    settlements: &'a [Settlement],
) -> Vec<(&'a ClaimedRow, &'a Settlement)> {
    let by_id: std::collections::HashMap<i64, &ClaimedRow> =
        rows.iter().map(|row| (row.id, row)).collect();
    settlements
        .iter()
        .filter_map(|settlement| by_id.get(&settlement.id).map(|row| (*row, settlement)))
        .collect()
}

/// Claims taken ahead in a row past the last one's rows before one starts at the head again.
const CHAINED_CLAIMS_MAX: u32 = 8;

/// Where a backlog's next claim starts, taken while `rows` are sent: past their last row, so
/// that it does not step over the rows still locked by this round and the last one (each
/// skipped row costs PostgreSQL a lock attempt; 1,000 of them tripled a 500-row claim's time).
/// From the head of the table (`None`) when a row has an ordering key (its successor lies
/// behind, and is due once it settles) and every `CHAINED_CLAIMS_MAX + 1`-th claim: a row that
/// became due behind the last claim (a transaction that committed late, a retry whose time
/// came) waits at most that many rounds, and in id order as soon as the backlog ends.
fn next_claim_start(rows: &[ClaimedRow], chained_claims: u32) -> Option<i64> {
    if chained_claims >= CHAINED_CLAIMS_MAX || rows.iter().any(|row| row.keyed) {
        return None;
    }
    rows.last().map(|row| row.id)
}

/// A duration for a log line: `40 ms`, `1.5 s`, `60.0 s`.
fn seconds(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

fn settled(
    row: &ClaimedRow,
    status: RowStatus,
    retry_in: Option<Duration>,
    error: Option<String>,
    consumed_attempt: bool,
) -> Settlement {
    Settlement {
        id: row.id,
        status: Some(status),
        consumed_attempt,
        retry_in,
        error,
        rejected: None,
    }
}

fn release(row: &ClaimedRow) -> Settlement {
    Settlement {
        id: row.id,
        status: None,
        consumed_attempt: false,
        retry_in: None,
        error: None,
        rejected: None,
    }
}

/// The machine's name, as the dashboard lists a relay (Linux's; the product runs there).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use send::tests::row;

    #[test]
    fn a_backlog_claim_starts_past_the_last_one_and_at_the_head_again_in_time() {
        let rows = vec![row(7, 1), row(9, 1)];
        assert_eq!(next_claim_start(&rows, 0), Some(9));
        assert_eq!(next_claim_start(&rows, CHAINED_CLAIMS_MAX - 1), Some(9));
        assert_eq!(next_claim_start(&rows, CHAINED_CLAIMS_MAX), None);
        let mut keyed = rows.clone();
        keyed[0].keyed = true;
        assert_eq!(
            next_claim_start(&keyed, 0),
            None,
            "a key's successor lies behind"
        );
        assert_eq!(next_claim_start(&[], 0), None);
    }
}
