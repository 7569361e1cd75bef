//! The Rust-native adapter: an `Outbox` owns the store, the backend client and the in-process
//! relay; an `OutboxTransaction` stages jobs in a database transaction and wakes the relay only
//! on the outermost commit. The framework bindings do the same through their host's
//! connection and commit hooks; this is the reference they are checked against.

use std::collections::HashMap;
use std::sync::Mutex;

use sqlx::{AssertSqlSafe, MySql, Postgres, Sqlite, Transaction};

use crate::backend::Backend;
use crate::classify::Outcome;
use crate::config::{Config, RelayMode};
use crate::error::{Error, ErrorCode, Result};
use crate::job::{NewJob, PreparedJob, RequestContext, prepare};
use crate::ledger::{Ledger, needs_savepoint};
use crate::relay::Relay;
use crate::relay_metrics::Metrics;
use crate::sql::{Statement, held_outcome};
use crate::store::{self, Pool, RowState, Store};

pub struct Outbox {
    config: Config,
    store: Store,
    backend: Backend,
    relay: Mutex<Option<Relay>>,
    /// The staging statements of this configuration (`OutboxSql::for_config`).
    staging: crate::sql::OutboxSql,
    /// The event log's bus when no relay runs here (`events`).
    log_bus: std::sync::OnceLock<std::sync::Arc<crate::events::EventBus>>,
}

impl Outbox {
    /// Connects to `config.database_url`. Does not start the relay: see `start_relay`.
    pub async fn connect(config: Config) -> Result<Outbox> {
        let url = config.database_url.clone().ok_or_else(|| {
            Error::field(
                ErrorCode::InvalidConfig,
                "adapter.database_url",
                "is required for the relay's own connection",
            )
        })?;
        let store = Store::connect(&url, &config.outbox.table_name).await?;
        let backend = Backend::new(&config)?;
        // Staging makes `create` spans even where no relay runs here (`external`).
        crate::otel::install_if_wanted(config.tracing)?;
        let staging = crate::sql::OutboxSql::for_config(store.dialect(), &config);
        Ok(Outbox {
            config,
            store,
            backend,
            relay: Mutex::new(None),
            staging,
            log_bus: std::sync::OnceLock::new(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Starts the in-process relay (FA-R003) unless the configuration says `external`, or it
    /// already runs. Must be called inside a tokio runtime.
    pub fn start_relay(&self) {
        if self.config.relay.mode == RelayMode::External {
            return;
        }
        let mut relay = self.relay.lock().expect("relay lock");
        if relay.as_ref().is_some_and(Relay::is_running) {
            return;
        }
        *relay = Some(Relay::start(
            self.store.clone(),
            self.backend.clone(),
            &self.config,
            true,
        ));
    }

    /// Graceful stop: flushes, releases leases.
    pub async fn stop_relay(&self) {
        let relay = self.relay.lock().expect("relay lock").take();
        if let Some(relay) = relay {
            relay.shutdown().await;
        }
    }

    /// Abrupt stop, as a crash: leases stay until they expire. For tests of crash recovery.
    pub fn kill_relay(&self) {
        if let Some(relay) = self.relay.lock().expect("relay lock").take() {
            relay.kill();
        }
    }

    /// The after-commit hook: wakes the relay for these committed job ids. Never blocks, never
    /// fails; without a running relay it does nothing (the poller of whichever relay runs will
    /// find the rows).
    pub fn notify_committed(&self, job_ids: Vec<String>) {
        if let Some(relay) = self.relay.lock().expect("relay lock").as_ref() {
            relay.notify_committed(job_ids);
        }
    }

    /// The Prometheus exposition of the relay running here, with the table's counts read now
    /// (`prometheus.rs`); without a relay here, the table's figures alone; `None` when neither
    /// is readable (no relay, and the table cannot be read).
    pub async fn prometheus_text(&self) -> Option<String> {
        let status = self.store.counts().await.ok();
        let table = &self.config.outbox.table_name;
        let relay = self.relay.lock().expect("relay lock");
        match relay.as_ref() {
            Some(relay) => Some(relay.prometheus_text(table, status.as_ref())),
            // No relay here: the table's figures alone (the same on every surface).
            None => status.map(|status| crate::prometheus::table_exposition(table, &status)),
        }
    }

    /// Replays dead rows (all, or one tenant's) and announces it on the running relay's
    /// events (`ojs.outbox.dead_replayed`), as every in-process operator call must.
    pub async fn dead_replay(&self, tenant: Option<&str>) -> Result<u64> {
        let n = self.store.dead_replay(tenant).await?;
        if let Some(bus) = self.events() {
            bus.operator_event("ojs.outbox.dead_replayed", tenant, n)
                .await;
        }
        Ok(n)
    }

    /// Deletes dead rows (all, or one tenant's) and announces it (`ojs.outbox.dead_purged`).
    pub async fn dead_purge(&self, tenant: Option<&str>) -> Result<u64> {
        let n = self.store.dead_purge(tenant).await?;
        if let Some(bus) = self.events() {
            bus.operator_event("ojs.outbox.dead_purged", tenant, n)
                .await;
        }
        Ok(n)
    }

    /// `GET /readyz`: the database reachable with the outbox table in it, and the backend
    /// reachable. Whether all holds, and the JSON body every server of it answers.
    pub async fn readiness(&self) -> (bool, String) {
        readiness(&self.store, &self.backend).await
    }

    /// The events of the table (`events.rs`): the relay's when one runs here; otherwise,
    /// with the event log (`relay.event_retention`), the log itself, which holds the events of
    /// every relay of the table (a process in `external` mode serves them too).
    pub fn events(&self) -> Option<std::sync::Arc<crate::events::EventBus>> {
        if let Some(relay) = self.relay.lock().expect("relay lock").as_ref() {
            return Some(relay.events());
        }
        let retention = self.config.relay.event_retention?;
        Some(
            self.log_bus
                .get_or_init(|| {
                    std::sync::Arc::new(crate::events::EventBus::new(
                        &self.config.outbox.table_name,
                        self.config.relay.event_buffer,
                        Some(crate::events::EventLog {
                            store: self.store.clone(),
                            retention,
                        }),
                    ))
                })
                .clone(),
        )
    }

    pub fn metrics(&self) -> Option<Metrics> {
        self.relay
            .lock()
            .expect("relay lock")
            .as_ref()
            .map(Relay::metrics)
    }

    /// The running relay's claim, request, settle and delivery-lag histograms.
    pub fn histograms(&self) -> Option<crate::Histograms> {
        self.relay
            .lock()
            .expect("relay lock")
            .as_ref()
            .map(Relay::histograms)
    }

    /// Opens a transaction on the outbox's own database (for Rust applications and tests).
    pub async fn begin(&self) -> Result<OutboxTransaction<'_>> {
        let tx = match &self.store.pool {
            Pool::Postgres(pool) => {
                // The pool is the relay's, whose own writes skip the fsync; an application's
                // commit must be durable before its jobs may be relayed. One round trip.
                Tx::Postgres(
                    pool.begin_with("BEGIN; SET LOCAL synchronous_commit = on")
                        .await?,
                )
            }
            Pool::Sqlite(pool) => Tx::Sqlite(pool.begin().await?),
            Pool::Mysql(pool) => Tx::Mysql(pool.begin().await?),
        };
        Ok(OutboxTransaction {
            outbox: self,
            tx: Some(tx),
            ledger: Ledger::new(),
            context: None,
        })
    }

    /// Stages and commits jobs at once (autocommit): the row is written and relayed right away.
    pub async fn enqueue_after_commit(
        &self,
        job: NewJob,
        context: Option<&RequestContext>,
    ) -> Result<String> {
        let prepared = self.config.seal(prepare(job, context)?)?;
        let mut tx = self.begin().await?;
        let mut ids = tx.stage(vec![prepared]).await?;
        tx.commit().await?;
        Ok(ids.remove(0))
    }

    /// `enqueue`: sends one job to the backend now, without the outbox (spec §5.1). Returns the
    /// job id. Fails with `BACKEND_UNAVAILABLE` or `BACKEND_REJECTED`.
    pub async fn enqueue_now(
        &self,
        job: NewJob,
        context: Option<&RequestContext>,
    ) -> Result<String> {
        let prepared = self.config.seal(prepare(job, context)?)?;
        match self.backend.send_one(prepared.wire_json()).await {
            Outcome::Delivered { .. } => Ok(prepared.job_id),
            Outcome::Unavailable { reason, .. }
            | Outcome::Backpressure { reason, .. }
            | Outcome::Retry { reason, .. }
            | Outcome::Defer { reason, .. } => {
                Err(Error::new(ErrorCode::BackendUnavailable, reason))
            }
            Outcome::Terminal { reason } | Outcome::Misconfigured { reason } => {
                Err(Error::new(ErrorCode::BackendRejected, reason))
            }
            Outcome::Duplicate { .. } => Err(Error::new(
                ErrorCode::BackendRejected,
                "409 duplicate: an equal job exists",
            )),
        }
    }
}

enum Tx {
    Postgres(Transaction<'static, Postgres>),
    Sqlite(Transaction<'static, Sqlite>),
    Mysql(Transaction<'static, MySql>),
}

/// A database transaction that stages jobs. Nested savepoints behave as the spec's §12.4 asks:
/// a rolled-back savepoint discards its jobs; only the outermost commit wakes the relay.
pub struct OutboxTransaction<'a> {
    outbox: &'a Outbox,
    tx: Option<Tx>,
    /// Which staged ids the commit wakes the relay for (savepoint bookkeeping).
    ledger: Ledger,
    context: Option<RequestContext>,
}

impl OutboxTransaction<'_> {
    /// Request context applied to the jobs staged from now on.
    pub fn set_context(&mut self, context: Option<RequestContext>) {
        self.context = context;
    }

    pub async fn enqueue_after_commit(&mut self, job: NewJob) -> Result<String> {
        let prepared = self
            .outbox
            .config
            .seal(prepare(job, self.context.as_ref())?)?;
        let mut ids = self.stage(vec![prepared]).await?;
        Ok(ids.remove(0))
    }

    /// All or nothing: one invalid job stages none.
    pub async fn enqueue_bulk(&mut self, jobs: Vec<NewJob>) -> Result<Vec<String>> {
        let prepared = jobs
            .into_iter()
            .map(|job| {
                self.outbox
                    .config
                    .seal(prepare(job, self.context.as_ref())?)
            })
            .collect::<Result<Vec<_>>>()?;
        self.stage(prepared).await
    }

    /// Writes the jobs' rows and records their ids at the current level; returns the ids.
    async fn stage(&mut self, jobs: Vec<PreparedJob>) -> Result<Vec<String>> {
        let sql = &self.outbox.staging;
        let (ids, statements) = sql.insert_jobs(sql.dialect.native_placeholders(), jobs);
        // Several INSERTs (a very large bulk) are all or nothing, like a single one.
        let guarded = needs_savepoint(statements.len());
        if guarded {
            self.execute("SAVEPOINT ojs_stage").await?;
        }
        let mut ids = ids;
        for statement in &statements {
            let done = match &statement.returns {
                None => self
                    .execute_statement(statement, Error::database)
                    .await
                    .map(drop),
                Some(returns) => self.fetch_returned(statement).await.and_then(|returned| {
                    ids[returns.job] = held_outcome(&returns.token, returned.as_deref())?;
                    Ok(())
                }),
            };
            if let Err(error) = done {
                if guarded {
                    self.execute("ROLLBACK TO SAVEPOINT ojs_stage").await?;
                    self.execute("RELEASE SAVEPOINT ojs_stage").await?;
                }
                return Err(error);
            }
        }
        if guarded {
            self.execute("RELEASE SAVEPOINT ojs_stage").await?;
        }
        self.ledger.staged(ids.iter().cloned())?;
        Ok(ids)
    }

    /// Runs an application statement in this transaction (business writes beside the jobs).
    /// An error here is the application's own (`DATABASE`), never read as a missing outbox.
    pub async fn execute(&mut self, sql: &str) -> Result<u64> {
        let statement = Statement {
            sql: sql.to_owned(),
            params: Vec::new(),
            returns: None,
        };
        self.execute_statement(&statement, |e| {
            Error::new(ErrorCode::Database, e.to_string())
        })
        .await
    }

    /// Runs a staging statement that returns the id of the job holding a unique key
    /// (`Statement::returns`); `None` when it returned no row.
    async fn fetch_returned(&mut self, statement: &Statement) -> Result<Option<String>> {
        let tx = self.tx.as_mut().ok_or_else(ended)?;
        let row: Option<(String,)> = match tx {
            Tx::Postgres(tx) => {
                let mut query = sqlx::query_as(AssertSqlSafe(statement.sql.clone()));
                for param in &statement.params {
                    query = query.bind(param.as_deref());
                }
                query.fetch_optional(&mut **tx).await?
            }
            Tx::Sqlite(tx) => {
                let mut query = sqlx::query_as(AssertSqlSafe(statement.sql.clone()));
                for param in &statement.params {
                    query = query.bind(param.as_deref());
                }
                query.fetch_optional(&mut **tx).await?
            }
            Tx::Mysql(tx) => {
                let mut query = sqlx::query_as(AssertSqlSafe(statement.sql.clone()));
                for param in &statement.params {
                    query = query.bind(param.as_deref());
                }
                query.fetch_optional(&mut **tx).await?
            }
        };
        Ok(row.map(|(id,)| id))
    }

    async fn execute_statement(
        &mut self,
        statement: &Statement,
        map_error: fn(sqlx::Error) -> Error,
    ) -> Result<u64> {
        let tx = self.tx.as_mut().ok_or_else(ended)?;
        let done = match tx {
            Tx::Postgres(tx) => {
                let mut query = sqlx::query(AssertSqlSafe(statement.sql.clone()));
                for param in &statement.params {
                    query = query.bind(param.as_deref());
                }
                query
                    .execute(&mut **tx)
                    .await
                    .map_err(map_error)?
                    .rows_affected()
            }
            Tx::Sqlite(tx) => {
                let mut query = sqlx::query(AssertSqlSafe(statement.sql.clone()));
                for param in &statement.params {
                    query = query.bind(param.as_deref());
                }
                query
                    .execute(&mut **tx)
                    .await
                    .map_err(map_error)?
                    .rows_affected()
            }
            Tx::Mysql(tx) => {
                let mut query = sqlx::query(AssertSqlSafe(statement.sql.clone()));
                for param in &statement.params {
                    query = query.bind(param.as_deref());
                }
                query
                    .execute(&mut **tx)
                    .await
                    .map_err(map_error)?
                    .rows_affected()
            }
        };
        Ok(done)
    }

    /// The state of these jobs' rows as this transaction sees them (its own uncommitted rows too).
    pub async fn rows_by_job_id(
        &mut self,
        job_ids: &[String],
    ) -> Result<HashMap<String, RowState>> {
        let sql = self.outbox.store.sql();
        match self.tx.as_mut().ok_or_else(ended)? {
            Tx::Postgres(tx) => store::rows_by_job_id_pg(sql, &mut **tx, job_ids).await,
            Tx::Sqlite(tx) => store::rows_by_job_id_sqlite(sql, &mut **tx, job_ids).await,
            Tx::Mysql(tx) => store::rows_by_job_id_mysql(sql, &mut **tx, job_ids).await,
        }
    }

    /// Rows in the outbox table as this transaction sees them.
    pub async fn count_rows(&mut self) -> Result<i64> {
        let sql = self.outbox.store.sql();
        match self.tx.as_mut().ok_or_else(ended)? {
            Tx::Postgres(tx) => store::count_rows_pg(sql, &mut **tx).await,
            Tx::Sqlite(tx) => store::count_rows_sqlite(sql, &mut **tx).await,
            Tx::Mysql(tx) => store::count_rows_mysql(sql, &mut **tx).await,
        }
    }

    /// The statement of `step` for the innermost savepoint (`sql::transaction_sql`).
    fn savepoint_sql(&self, step: &str) -> String {
        crate::sql::transaction_sql(step, self.ledger.depth() - 1).expect("a known step")
    }

    /// Opens a nested transaction (SAVEPOINT).
    pub async fn savepoint(&mut self) -> Result<()> {
        self.ledger.savepoint()?;
        let sql = self.savepoint_sql("savepoint");
        if let Err(e) = self.execute(&sql).await {
            self.ledger.rollback_savepoint()?;
            return Err(e);
        }
        Ok(())
    }

    /// Commits the innermost nested transaction: its jobs now belong to the enclosing one.
    /// Nothing is relayed.
    pub async fn release_savepoint(&mut self) -> Result<()> {
        self.require_savepoint()?;
        self.execute(&self.savepoint_sql("release")).await?;
        self.ledger.release()
    }

    /// Rolls back the innermost nested transaction: its rows and their wake-ups are discarded.
    pub async fn rollback_savepoint(&mut self) -> Result<()> {
        self.require_savepoint()?;
        self.execute(&self.savepoint_sql("rollback_to")).await?;
        self.execute(&self.savepoint_sql("release")).await?;
        self.ledger.rollback_savepoint()
    }

    fn require_savepoint(&self) -> Result<()> {
        self.ledger.require_savepoint()
    }

    /// Commits the outermost transaction, then wakes the relay for its jobs. Returns their ids.
    pub async fn commit(mut self) -> Result<Vec<String>> {
        let ids = self.commit_rows().await?;
        self.outbox.notify_committed(ids.clone());
        Ok(ids)
    }

    /// Commits without running the after-commit hook: what happens when the process dies
    /// between COMMIT and the hook. The rows are durable; only the poller will find them.
    #[doc(hidden)]
    pub async fn commit_without_hook(mut self) -> Result<Vec<String>> {
        self.commit_rows().await
    }

    async fn commit_rows(&mut self) -> Result<Vec<String>> {
        match self.tx.take().ok_or_else(ended)? {
            Tx::Postgres(tx) => tx.commit().await?,
            Tx::Sqlite(tx) => tx.commit().await?,
            Tx::Mysql(tx) => tx.commit().await?,
        }
        Ok(self.ledger.commit())
    }

    /// Rolls back everything: no row remains, nothing is relayed.
    pub async fn rollback(mut self) -> Result<()> {
        match self.tx.take().ok_or_else(ended)? {
            Tx::Postgres(tx) => tx.rollback().await?,
            Tx::Sqlite(tx) => tx.rollback().await?,
            Tx::Mysql(tx) => tx.rollback().await?,
        }
        Ok(())
    }
}

fn ended() -> Error {
    Error::new(ErrorCode::NoTransaction, "the transaction has ended")
}

/// The readiness verdict of a store and a backend (`Outbox::readiness`, `ojs-relay run`):
/// `{"ready": bool, "database": "ok" | why, "backend": "ok" | why}`.
pub async fn readiness(store: &Store, backend: &Backend) -> (bool, String) {
    let (table, health) = tokio::join!(store.check_table(), backend.health());
    let verdict = |result: Result<()>| match result {
        Ok(()) => serde_json::json!("ok"),
        Err(why) => serde_json::json!(why.message),
    };
    let ready = table.is_ok() && health.is_ok();
    let body = serde_json::json!({
        "ready": ready,
        "database": verdict(table),
        "backend": verdict(health),
    });
    (ready, body.to_string())
}
