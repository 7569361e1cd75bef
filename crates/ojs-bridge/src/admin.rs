//! What an operator and a mount read and do: metrics, readiness, status, rows, pruning,
//! migration and the dead-letter commands.

use crate::Bridge;
use ojs_outbox::{Error, ErrorCode, Result};

impl Bridge {
    /// The Prometheus exposition of the relay running in this process (what a framework's
    /// `/metrics` mount serves), or without one the table's figures alone; `None` when the
    /// table cannot be read either.
    pub fn metrics_text(&self) -> Option<String> {
        let running = self.running().ok()?;
        running.runtime.block_on(running.outbox.prometheus_text())
    }

    /// What a mount's `GET /readyz` answers: `{"ready", "database", "backend"}` as JSON text
    /// (`ready` false: answer 503), checked through the relay's own connection.
    /// When the database cannot even be connected to, the same shape says why.
    pub fn readiness_json(&self) -> Result<String> {
        let running = match self.running() {
            Ok(running) => running,
            Err(unreachable) => {
                return self.with_http(|runtime, backend| {
                    let backend = match runtime.block_on(backend.health()) {
                        Ok(()) => "ok".to_owned(),
                        Err(why) => why.message,
                    };
                    let url = self.config.database_url.as_deref().unwrap_or("");
                    let database = format!(
                        "{}: {}",
                        ojs_outbox::admin::redact(url),
                        unreachable.message
                    );
                    let verdict = serde_json::json!({
                        "ready": false,
                        "database": database,
                        "backend": backend,
                    });
                    Ok(verdict.to_string())
                });
            }
        };
        Ok(running.runtime.block_on(running.outbox.readiness()).1)
    }

    /// The relay's metrics as JSON (`null` when no relay runs in this process).
    pub fn metrics_json(&self) -> String {
        let metrics = self
            .running_here()
            .and_then(|running| running.outbox.metrics());
        serde_json::to_string(&metrics).expect("metrics serialize")
    }

    /// Deletes `sent` rows older than `older_than` (ISO-8601); returns how many.
    pub fn prune(&self, older_than: &str) -> Result<u64> {
        let retention = ojs_outbox::duration::parse(older_than)
            .map_err(|why| Error::field(ErrorCode::InvalidConfig, "older_than", why))?;
        self.with_running(|running| {
            running
                .runtime
                .block_on(running.outbox.store().prune(retention, usize::MAX >> 1))
        })
    }

    /// Creates the outbox table through the relay's own connection.
    pub fn migrate(&self) -> Result<()> {
        self.with_running(|running| running.runtime.block_on(running.outbox.store().migrate()))
    }

    /// Counts by status, oldest pending age and lag, as JSON.
    pub fn status_json(&self) -> Result<String> {
        self.with_running(|running| {
            let status = running.runtime.block_on(running.outbox.store().status())?;
            Ok(serde_json::to_string(&status).expect("status serializes"))
        })
    }

    /// Dead rows of a tenant (or all), oldest first, as a JSON array; at most `limit`
    /// (`store::DEAD_LIST_LIMIT` when `None`).
    pub fn dead_list_json(&self, tenant: Option<&str>, limit: Option<u32>) -> Result<String> {
        let limit = limit.map_or(ojs_outbox::store::DEAD_LIST_LIMIT, |limit| limit as usize);
        self.with_running(|running| {
            let rows = running
                .runtime
                .block_on(running.outbox.store().dead_list(tenant, limit))?;
            Ok(serde_json::to_string(&rows).expect("rows serialize"))
        })
    }

    pub fn dead_replay(&self, tenant: Option<&str>) -> Result<u64> {
        self.with_running(|running| running.runtime.block_on(running.outbox.dead_replay(tenant)))
    }

    pub fn dead_purge(&self, tenant: Option<&str>) -> Result<u64> {
        self.with_running(|running| running.runtime.block_on(running.outbox.dead_purge(tenant)))
    }

    /// A framework command line's operator command (`admin::Command` as JSON: migrate,
    /// status, dead list / replay / purge): what to print and the exit code, in the words and
    /// by the rules of `ojs-relay` (`admin.rs`), through the relay's connection.
    pub fn admin(&self, command_json: &str) -> Result<ojs_outbox::admin::Report> {
        let command = ojs_outbox::admin::Command::from_json(command_json)?;
        if !command.writes() && self.running_here().is_none() {
            return self.admin_read_only(&command);
        }
        self.with_running(|running| {
            let events = running.outbox.events();
            let target = ojs_outbox::admin::Target {
                store: running.outbox.store(),
                table: self.table_name(),
                database_url: self.config.database_url.as_deref().unwrap_or(""),
                create_table_with: &command.create_table_with,
                events: events.as_deref(),
            };
            running
                .runtime
                .block_on(ojs_outbox::admin::execute(&target, &command))
        })
    }

    /// A command that only reads (`status`, `dead list`, a purge without `yes`) in a process
    /// that has not opened the relay's pool: on a store opened read-only, closed after, so a
    /// dry run writes nothing, not even a SQLite file's journal mode (`ojs-relay` does the same).
    fn admin_read_only(
        &self,
        command: &ojs_outbox::admin::Command,
    ) -> Result<ojs_outbox::admin::Report> {
        let database_url = self.config.database_url.as_deref().ok_or_else(|| {
            Error::field(
                ErrorCode::InvalidConfig,
                "adapter.database_url",
                "is required for the relay's own connection",
            )
        })?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::new(ErrorCode::Database, format!("cannot start a runtime: {e}")))?;
        runtime.block_on(async {
            let store = ojs_outbox::Store::connect_read_only(database_url, self.table_name())
                .await
                .map_err(|e| match e.code {
                    // No file, so no outbox table: the framework's migration makes both.
                    ErrorCode::Database
                        if e.message.starts_with(ojs_outbox::store::NO_SQLITE_FILE) =>
                    {
                        Error::new(
                            ErrorCode::OutboxTableMissing,
                            format!(
                                "the outbox table {:?} does not exist ({}); create it with {}",
                                self.table_name(),
                                e.message,
                                command.create_table_with
                            ),
                        )
                    }
                    _ => e,
                })?;
            let target = ojs_outbox::admin::Target {
                store: &store,
                table: self.table_name(),
                database_url,
                create_table_with: &command.create_table_with,
                events: None,
            };
            let report = ojs_outbox::admin::execute(&target, command).await;
            store.close().await;
            report
        })
    }

    /// The state of these jobs' rows as committed, as JSON `{job_id: {status, attempts, error}}`.
    pub fn rows_json(&self, job_ids: Vec<String>) -> Result<String> {
        self.with_running(|running| {
            let rows = running
                .runtime
                .block_on(running.outbox.store().rows_by_job_id(&job_ids))?;
            Ok(serde_json::to_string(&rows).expect("rows serialize"))
        })
    }
}
