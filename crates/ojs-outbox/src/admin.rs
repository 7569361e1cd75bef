//! The operator's commands (migrate, status, dead list / replay / purge) as library calls, so
//! every command line says and decides the same thing: `ojs-relay`, `manage.py ojs_outbox`,
//! `rake ojs:*` and the Node bin only parse their arguments their own way, call these, print
//! [`Report::stdout`] / [`Report::stderr`] and exit with [`Report::exit_code`].

use serde_json::{Value, json};

use crate::error::{Error, ErrorCode, Result};
use crate::store::{DeadRow, OutboxStatus, Store, dead_list_limit};

/// Exit code of a purge refused for want of confirmation (`--yes`): a usage error.
pub const EXIT_USAGE: i32 = 2;

/// What a command prints and how its process ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub exit_code: i32,
    /// Every line ends with `\n`.
    pub stdout: String,
    pub stderr: String,
}

impl Report {
    fn ok(stdout: String) -> Report {
        Report {
            exit_code: 0,
            stdout: stdout + "\n",
            stderr: String::new(),
        }
    }
}

/// The outbox a command works on, as its messages name it.
pub struct Target<'a> {
    pub store: &'a Store,
    pub table: &'a str,
    /// The database URL, shown with its password hidden ([`redact`]).
    pub database_url: &'a str,
    /// How this command line's user creates the table, named when it is missing (e.g.
    /// "`ojs-relay migrate` (same --database-url and --table)", "manage.py migrate").
    pub create_table_with: &'a str,
    /// The bus of a relay running in this process: dead replays and purges are announced on
    /// it (`ojs.outbox.dead_replayed`, `ojs.outbox.dead_purged`). `None` in a process of its own.
    pub events: Option<&'a crate::events::EventBus>,
}

impl Target<'_> {
    async fn announce(&self, kind: &str, tenant: Option<&str>, count: u64) {
        if let Some(events) = self.events {
            events.operator_event(kind, tenant, count).await;
        }
    }

    fn database(&self) -> String {
        redact(self.database_url)
    }

    /// Checks that the table exists and is an outbox table, before a command's statements run
    /// (a table of another shape would fail with a bare `column "status" does not exist`).
    pub async fn check(&self) -> Result<()> {
        match self
            .store
            .missing_column()
            .await
            .map_err(|e| self.explain(e))?
        {
            None => Ok(()),
            Some(why) => Err(self.not_an_outbox_table(&why)),
        }
    }

    fn not_an_outbox_table(&self, why: &str) -> Error {
        crate::store::not_an_outbox_table(
            &format!("{:?} in {}", self.table, self.database()),
            why,
            self.create_table_with,
        )
    }

    /// The store's missing-table error, naming the table, the database and the fix.
    pub fn explain(&self, error: Error) -> Error {
        if error.code != ErrorCode::OutboxTableMissing {
            return error;
        }
        Error::new(
            ErrorCode::OutboxTableMissing,
            format!(
                "the outbox table {:?} does not exist in {}; create it with {}",
                self.table,
                self.database(),
                self.create_table_with
            ),
        )
    }
}

/// The dead-letter commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadAction {
    /// `limit`: at most this many rows (the core's default when `None`); `json`: one JSON
    /// array instead of a table.
    List {
        tenant: Option<String>,
        limit: Option<i64>,
        json: bool,
    },
    Replay {
        tenant: Option<String>,
    },
    /// Deletes only when `confirmed` (`--yes`); otherwise says how many rows it would delete
    /// and ends with [`EXIT_USAGE`].
    Purge {
        tenant: Option<String>,
        confirmed: bool,
    },
}

impl DeadAction {
    /// Whether the action writes. One that does not (a listing, a purge without its
    /// confirmation) runs on a store opened with `Store::connect_read_only`, so it changes
    /// nothing in the database, not even a SQLite file's journal mode.
    pub fn writes(&self) -> bool {
        match self {
            DeadAction::List { .. } => false,
            DeadAction::Replay { .. } => true,
            DeadAction::Purge { confirmed, .. } => *confirmed,
        }
    }
}

/// A command as a framework's command line hands it over (JSON), e.g.
/// `{"command": "dead", "action": "purge", "tenant": "acme", "yes": false}`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Command {
    /// `migrate`, `status` or `dead`.
    pub command: String,
    /// For `dead`: `list`, `replay` or `purge`.
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub limit: Option<i64>,
    /// JSON output (status, dead list) instead of a table.
    #[serde(default)]
    pub json: bool,
    /// The purge's confirmation (`--yes`).
    #[serde(default)]
    pub yes: bool,
    /// How this command line's user creates a missing table ([`Target::create_table_with`]).
    pub create_table_with: String,
}

impl Command {
    pub fn from_json(text: &str) -> Result<Command> {
        serde_json::from_str(text)
            .map_err(|e| Error::field(ErrorCode::InvalidConfig, "command", e.to_string()))
    }

    /// Whether the command writes: `migrate`, `dead replay`, `dead purge` with `yes`. The
    /// others (`status`, `dead list`, a purge without `yes`) can run on a store opened with
    /// `Store::connect_read_only`, which writes nothing ([`DeadAction::writes`]). A command
    /// that is none of these counts as writing (it fails in `execute` either way).
    pub fn writes(&self) -> bool {
        match (self.command.as_str(), self.action.as_deref()) {
            ("status", None) => false,
            ("dead", Some(_)) => self.dead_action().map_or(true, |action| action.writes()),
            _ => true,
        }
    }

    /// The dead-letter action of a `dead` command.
    fn dead_action(&self) -> Result<DeadAction> {
        let tenant = self.tenant.clone().filter(|t| !t.is_empty());
        match self.action.as_deref() {
            Some("list") => Ok(DeadAction::List {
                tenant,
                limit: self.limit,
                json: self.json,
            }),
            Some("replay") => Ok(DeadAction::Replay { tenant }),
            Some("purge") => Ok(DeadAction::Purge {
                tenant,
                confirmed: self.yes,
            }),
            other => Err(Error::field(
                ErrorCode::InvalidConfig,
                "action",
                format!("{:?} is not list, replay or purge", other.unwrap_or("")),
            )),
        }
    }
}

/// Runs one [`Command`].
pub async fn execute(target: &Target<'_>, command: &Command) -> Result<Report> {
    match (command.command.as_str(), command.action.as_deref()) {
        ("migrate", None) => migrate(target).await,
        ("status", None) => status(target, command.json).await,
        ("dead", Some(_)) => dead(target, &command.dead_action()?).await,
        (other, action) => Err(Error::field(
            ErrorCode::InvalidConfig,
            "command",
            format!(
                "{other:?} (action {action:?}) is not migrate, status or dead list|replay|purge"
            ),
        )),
    }
}

pub async fn migrate(target: &Target<'_>) -> Result<Report> {
    // A table of that name that is no outbox table is left alone: `IF NOT EXISTS` would skip
    // it and the indexes would fail on its columns.
    let existed = match target.check().await {
        Ok(()) => true,
        Err(e) if e.code == ErrorCode::InvalidConfig => return Err(e),
        Err(_) => false,
    };
    target.store.migrate().await?;
    let line = if existed {
        format!(
            "outbox table {:?} already exists in {}; indexes checked, nothing changed",
            target.table,
            target.database()
        )
    } else {
        format!(
            "created outbox table {:?} and its indexes in {}",
            target.table,
            target.database()
        )
    };
    Ok(Report::ok(line))
}

/// Row counts by status, oldest pending age and recent lag: a table, or one JSON object (the
/// [`OutboxStatus`] fields plus `table`).
pub async fn status(target: &Target<'_>, as_json: bool) -> Result<Report> {
    target.check().await?;
    let status = target.store.status().await.map_err(|e| target.explain(e))?;
    if as_json {
        let mut value = serde_json::to_value(&status).expect("status serializes");
        if let Value::Object(map) = &mut value {
            map.insert("table".into(), json!(target.table));
        }
        return Ok(Report::ok(value.to_string()));
    }
    Ok(Report::ok(status_table(target, &status)))
}

fn status_table(target: &Target<'_>, s: &OutboxStatus) -> String {
    let mut out = format!("outbox table {:?} in {}", target.table, target.database());
    let rows = [
        ("pending", s.pending.to_string()),
        ("failed (retrying)", s.failed.to_string()),
        ("sent", s.sent.to_string()),
        ("unique rejected", s.unique_rejected.to_string()),
        ("dead", s.dead.to_string()),
        ("held behind dead", s.held_by_dead.to_string()),
        // A PostgreSQL relay holds its claim by row locks, which a read cannot see.
        match s.in_flight {
            Some(leased) => ("in flight (leased)", leased.to_string()),
            None => ("in flight", "see metrics".to_owned()),
        },
        ("oldest pending age", human_ms(s.oldest_pending_age_ms)),
        ("recent lag (1 min)", human_ms(s.recent_lag_ms)),
    ];
    for (name, value) in rows {
        out += &format!("\n  {name:<20} {value:>12}");
    }
    out
}

pub async fn dead(target: &Target<'_>, action: &DeadAction) -> Result<Report> {
    let store = target.store;
    let explain = |e| target.explain(e);
    if let DeadAction::List { limit, .. } = action {
        // A flag's error before the database's.
        dead_list_limit(*limit, "--limit")?;
    }
    target.check().await?;
    match action {
        DeadAction::List {
            tenant,
            limit,
            json,
        } => {
            let limit = dead_list_limit(*limit, "--limit")?;
            let rows = store
                .dead_list(tenant.as_deref(), limit)
                .await
                .map_err(explain)?;
            if *json {
                return Ok(Report::ok(
                    serde_json::to_string(&rows).expect("rows serialize"),
                ));
            }
            Ok(Report::ok(dead_table(&rows, tenant.as_deref(), limit)))
        }
        DeadAction::Replay { tenant } => {
            let n = store
                .dead_replay(tenant.as_deref())
                .await
                .map_err(explain)?;
            target
                .announce("ojs.outbox.dead_replayed", tenant.as_deref(), n)
                .await;
            Ok(Report::ok(format!(
                "replayed {n} dead row(s) of {} back to pending with fresh attempts; a running relay sends them at its next poll",
                tenant_scope(tenant.as_deref())
            )))
        }
        DeadAction::Purge {
            tenant,
            confirmed: true,
        } => {
            let n = store.dead_purge(tenant.as_deref()).await.map_err(explain)?;
            target
                .announce("ojs.outbox.dead_purged", tenant.as_deref(), n)
                .await;
            Ok(Report::ok(format!(
                "purged {n} dead row(s) of {}",
                tenant_scope(tenant.as_deref())
            )))
        }
        DeadAction::Purge {
            tenant,
            confirmed: false,
        } => {
            let n = store.dead_count(tenant.as_deref()).await.map_err(explain)?;
            Ok(Report {
                exit_code: EXIT_USAGE,
                stdout: String::new(),
                stderr: format!(
                    "refusing to purge without --yes: this would delete {n} dead row(s) of {}; nothing was deleted\n",
                    tenant_scope(tenant.as_deref())
                ),
            })
        }
    }
}

fn tenant_scope(tenant: Option<&str>) -> String {
    match tenant {
        Some(t) => format!("tenant {t:?}"),
        None => "every tenant (no --tenant given)".to_owned(),
    }
}

fn dead_table(rows: &[DeadRow], tenant: Option<&str>, limit: usize) -> String {
    let more = if rows.len() == limit {
        format!(" (limit {limit} reached; --limit shows more)")
    } else {
        String::new()
    };
    let mut out = format!(
        "{} dead row(s) of {}{more}",
        rows.len(),
        tenant_scope(tenant)
    );
    if rows.is_empty() {
        return out;
    }
    out += &format!(
        "\n{:<36}  {:<24}  {:<12}  {:>8}  {:<24}  ERROR",
        "JOB ID", "TYPE", "TENANT", "ATTEMPTS", "CREATED (UTC)"
    );
    for row in rows {
        out += &format!(
            "\n{:<36}  {:<24}  {:<12}  {:>8}  {:<24}  {}",
            row.job_id,
            row.job_type,
            row.tenant_id.as_deref().unwrap_or("-"),
            row.attempts,
            utc(row.created_at_ms),
            one_line(row.error.as_deref().unwrap_or("-"), 100),
        );
    }
    out
}

fn human_ms(ms: i64) -> String {
    match ms {
        ..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{:.1} min", ms as f64 / 60_000.0),
        _ => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

fn utc(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

/// Newlines folded, long text cut: every message of the commands is one line.
pub fn one_line(text: &str, max_chars: usize) -> String {
    let folded: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if folded.chars().count() <= max_chars {
        return folded;
    }
    let mut cut: String = folded.chars().take(max_chars).collect();
    cut.push('…');
    cut
}

/// A database URL with its password replaced by `***`, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_only_the_password() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("sqlite:///tmp/a.db"), "sqlite:///tmp/a.db");
        assert_eq!(redact("sqlite:x.db"), "sqlite:x.db");
    }

    #[test]
    fn one_line_folds_and_cuts() {
        assert_eq!(one_line("a\n  b", 10), "a b");
        assert_eq!(one_line("abcdef", 3), "abc…");
    }
}
