//! The relay's side of the database: one sqlx pool and the statements of `sql.rs`.
//! Every operation is one statement whatever the number of rows (seed 004). On PostgreSQL a
//! claim also opens a transaction and its settlement commits it (`Claim`): `BEGIN; SELECT`
//! goes as one message and, in the common round, `UPDATE; COMMIT` as another, two round
//! trips per round of up to `batch_size` rows. MySQL and MariaDB hold a claim the same way,
//! in a transaction sqlx opens (`FOR UPDATE SKIP LOCKED`, then the settlement and COMMIT).

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{
    AssertSqlSafe, Connection, MySql, PgConnection, PgPool, Postgres, Row, SqlSafeStr, SqlStr,
    SqlitePool,
};

use crate::error::{Error, ErrorCode, Result};
use crate::sql::{ClaimFilter, Dialect, OutboxSql};

/// Where a row stands. `failed` means: the last attempt failed, retried at `available_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RowStatus {
    Pending,
    Failed,
    Sent,
    Dead,
}

impl RowStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RowStatus::Pending => "pending",
            RowStatus::Failed => "failed",
            RowStatus::Sent => "sent",
            RowStatus::Dead => "dead",
        }
    }

    pub fn parse(text: &str) -> Option<RowStatus> {
        match text {
            "pending" => Some(RowStatus::Pending),
            "failed" => Some(RowStatus::Failed),
            "sent" => Some(RowStatus::Sent),
            "dead" => Some(RowStatus::Dead),
            _ => None,
        }
    }
}

/// A row the relay holds a lease on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedRow {
    pub id: i64,
    pub job_id: String,
    pub job_type: String,
    pub args_json: String,
    pub options_json: String,
    pub meta_json: String,
    pub attempts: i32,
    /// The row has an ordering key: the next row of its key is due once this one settles.
    pub keyed: bool,
}

/// The rows of one claim and what holds them until they are settled: on SQLite the lease
/// written by the claim; on PostgreSQL the row locks of the claim's open transaction, so the
/// claim writes nothing and each delivered row is written twice in all (the INSERT and the
/// settlement, issue 16). If the relay dies, the server ends the transaction with the
/// connection and the rows are due again at once.
pub struct Claim {
    pub rows: Vec<ClaimedRow>,
    held: Option<Held>,
}

/// The open transaction whose row locks hold a claim.
enum Held {
    /// PostgreSQL's, and where each of its rows lies (`ctid` by row id): a row locked by the
    /// transaction cannot move, so the settlement finds it without the primary-key index.
    Postgres {
        tx: OpenTransaction,
        ctids: HashMap<i64, String>,
    },
    /// MySQL's.
    Mysql(OpenMysqlTransaction),
}

/// MySQL's `OpenTransaction`: a pooled connection inside a transaction its own `BEGIN; SELECT`
/// opened. Dropped before its COMMIT (a relay killed or stopped mid-round), the connection is
/// closed rather than returned with a rollback queued, and the server rolls back.
struct OpenMysqlTransaction {
    conn: PoolConnection<MySql>,
    open: bool,
}

impl OpenMysqlTransaction {
    /// Runs `statements` (ending with COMMIT) and takes the transaction as ended.
    async fn finish(mut self, statements: String) -> Result<u64> {
        let done = sqlx::raw_sql(AssertSqlSafe(statements))
            .execute(&mut *self.conn)
            .await?
            .rows_affected();
        self.open = false;
        Ok(done)
    }
}

impl Drop for OpenMysqlTransaction {
    fn drop(&mut self) {
        if self.open {
            self.conn.close_on_drop();
        }
    }
}

/// A pooled connection inside a transaction that its own statements opened (`BEGIN; SELECT`
/// in one message), which sqlx therefore does not track. Dropped before its COMMIT (a round
/// aborted with the relay, a failed statement), the connection is closed instead of going
/// back to the pool, and the server rolls the transaction back.
struct OpenTransaction {
    conn: PoolConnection<Postgres>,
    open: bool,
}

impl OpenTransaction {
    async fn commit(mut self) -> Result<()> {
        sqlx::raw_sql(AssertSqlSafe("COMMIT"))
            .execute(&mut *self.conn)
            .await?;
        self.open = false;
        Ok(())
    }
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        if self.open {
            self.conn.close_on_drop();
        }
    }
}

impl Claim {
    fn leased(rows: Vec<ClaimedRow>) -> Claim {
        Claim { rows, held: None }
    }

    /// Whether the rows are held by an open transaction (PostgreSQL) rather than a lease.
    pub fn holds_transaction(&self) -> bool {
        self.held.is_some()
    }
}

/// Events as the event log keeps them: one row's `time_ms` and its JSON array
/// (`events::EventLog`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedEvents {
    pub time_ms: i64,
    pub json: String,
}

/// What happens to one claimed row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    pub id: i64,
    /// `None` releases the lease and keeps the status (nothing was decided about the row).
    pub status: Option<RowStatus>,
    /// Whether this outcome consumed one of the row's attempts.
    pub consumed_attempt: bool,
    /// Delay before the row is due again; `None` keeps `available_at`.
    pub retry_in: Option<Duration>,
    pub error: Option<String>,
    /// Set when the backend's unique policy refused the job: the row ends `sent` with a note
    /// (`error`), but this job id was not created. Not a column: the relay's events and
    /// counters read it.
    pub rejected: Option<Rejection>,
}

/// A job the backend's unique policy (`on_conflict: reject`) refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The job the backend holds instead (`details.existing_job_id` of its 409), when named.
    pub existing_job_id: Option<String>,
}

/// How the error of a read-only open of a SQLite file that does not exist begins (a framework's
/// operator command turns it into the missing table's advice).
pub const NO_SQLITE_FILE: &str = "no SQLite database at";

/// Counts by status, for `ojs-relay status` and the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OutboxStatus {
    pub pending: i64,
    pub failed: i64,
    pub sent: i64,
    pub dead: i64,
    /// Of the `sent` rows, those whose job the backend's unique policy (`on_conflict:
    /// reject`) refused: the backend holds another job with the same key, not this id.
    pub unique_rejected: i64,
    /// Rows with a live lease (SQLite). `None` on PostgreSQL: a relay holds its claim there by
    /// row locks, which another session cannot see; each relay's own metrics count its claim
    /// (`Metrics::in_flight`, `ojs_relay_jobs_in_flight`).
    pub in_flight: Option<i64>,
    /// Age of the oldest row not yet delivered (pending or failed), in ms; 0 when none.
    pub oldest_pending_age_ms: i64,
    /// Mean creation-to-delivery time of rows sent in the last minute, in ms.
    pub recent_lag_ms: i64,
    /// Pending or failed rows that wait behind a dead row of their ordering key: they go out
    /// once an operator replays or purges it (docs/relay.md#ordering).
    pub held_by_dead: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadRow {
    pub job_id: String,
    pub job_type: String,
    pub tenant_id: Option<String>,
    pub attempts: i32,
    pub error: Option<String>,
    pub created_at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowState {
    pub status: RowStatus,
    pub attempts: i32,
    pub error: Option<String>,
}

/// Runs the same sqlx expression on whichever pool the store holds: the statements differ by
/// dialect (sql.rs), the calls do not. A SQLite statement holds back a fork (`sqlite_fork`).
macro_rules! on_pool {
    ($pool:expr, |$p:ident| $body:expr) => {
        match $pool {
            Pool::Postgres($p) => $body,
            Pool::Mysql($p) => $body,
            Pool::Sqlite($p) => {
                let _running = crate::sqlite_fork::statement().await;
                $body
            }
        }
    };
}

/// A store's SQLite pool: two connections, each waiting for a lock in short steps
/// (`sqlite_busy.rs`) up to `SQLITE_BUSY_TIMEOUT`.
fn sqlite_pool_options() -> SqlitePoolOptions {
    SqlitePoolOptions::new()
        .max_connections(2)
        .after_connect(|conn, _| {
            Box::pin(async move {
                let mut handle = conn.lock_handle().await?;
                // SAFETY: the handle is locked: no other thread uses the connection.
                unsafe {
                    crate::sqlite_busy::install(
                        handle.as_raw_handle().as_ptr().cast(),
                        SQLITE_BUSY_TIMEOUT,
                    )
                };
                Ok(())
            })
        })
}

/// How long a SQLite statement waits for a lock before it fails with `SQLITE_BUSY`.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub(crate) enum Pool {
    Postgres(PgPool),
    Sqlite(SqlitePool),
    Mysql(MySqlPool),
}

/// Prepared statement texts, built once per store.
#[derive(Debug)]
struct Statements {
    settle: SqlStr,
    prune: SqlStr,
    append_events: SqlStr,
    events_after: SqlStr,
    /// SQLite's claims and common settlement. PostgreSQL's carry their values in their text
    /// instead (`OutboxSql::begin_and_claim_pg`, `settle_sent_and_commit_pg`).
    sqlite: Option<SqliteStatements>,
}

#[derive(Debug)]
struct SqliteStatements {
    claim_due: SqlStr,
    claim_ids: SqlStr,
    settle_sent: SqlStr,
}

fn shared_sql(text: String) -> SqlStr {
    AssertSqlSafe(std::sync::Arc::<str>::from(text)).into_sql_str()
}

#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) pool: Pool,
    sql: OutboxSql,
    statements: std::sync::Arc<Statements>,
    /// How the SQLite pool was opened, for the relay's own connections (`for_relay`).
    sqlite_options: Option<SqliteConnectOptions>,
}

const ERROR_TEXT_LIMIT: usize = 2000;

/// SQLite runs a WAL checkpoint inside the COMMIT that takes the WAL past a connection's
/// `wal_autocheckpoint` (1,000 pages by default, which host frameworks keep): that COMMIT pays
/// for copying the WAL into the database and two fsyncs. The relay commits after every round,
/// so with a lower threshold on its own connections it is the one that checkpoints.
const RELAY_WAL_CHECKPOINT_PAGES: u32 = 200;

/// How many dead rows a listing shows when the caller gives no limit.
pub const DEAD_LIST_LIMIT: usize = 100;

/// A dead-row listing's limit as given by a caller (`None`: [`DEAD_LIST_LIMIT`]): at least 1.
pub fn dead_list_limit(limit: Option<i64>, field: &str) -> Result<usize> {
    match limit {
        None => Ok(DEAD_LIST_LIMIT),
        Some(n) if n >= 1 => Ok(n as usize),
        Some(n) => Err(Error::field(
            ErrorCode::InvalidConfig,
            field,
            format!("must be at least 1, got {n}"),
        )),
    }
}

impl Store {
    /// Connects to `sqlite://path` (created if missing, switched to WAL) or `postgres://...`.
    pub async fn connect(database_url: &str, table: &str) -> Result<Store> {
        Store::open(database_url, table, false).await
    }

    /// For commands that only read (`ojs-relay status`, `dead list`): a SQLite file is opened
    /// read-only, never created and never switched to another journal mode; a PostgreSQL
    /// session refuses writes.
    pub async fn connect_read_only(database_url: &str, table: &str) -> Result<Store> {
        Store::open(database_url, table, true).await
    }

    async fn open(database_url: &str, table: &str, read_only: bool) -> Result<Store> {
        crate::config::validate_table_name(table)
            .map_err(|why| Error::field(ErrorCode::InvalidConfig, "table_name", why))?;
        let bad_url =
            |why: String| Error::field(ErrorCode::InvalidDatabaseUrl, "database_url", why);
        let pool = if database_url.starts_with("sqlite:") {
            crate::sqlite_fork::guard_forks();
            let options = SqliteConnectOptions::from_str(database_url)
                .map_err(|e| bad_url(format!("{database_url:?}: {e}")))?
                .busy_timeout(SQLITE_BUSY_TIMEOUT);
            let options = if read_only {
                options.read_only(true).create_if_missing(false)
            } else {
                options
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
            };
            let path = options.get_filename();
            if path.is_dir() {
                return Err(bad_url(format!(
                    "{} is a directory, not a SQLite database file",
                    path.display()
                )));
            }
            if read_only && !path.exists() {
                return Err(Error::new(
                    ErrorCode::Database,
                    format!(
                        "{NO_SQLITE_FILE} {} (a read-only command creates none)",
                        path.display()
                    ),
                ));
            }
            // SQLite opens any file lazily: reading the schema's version reads the header, so
            // a file that is no database fails here, named, rather than at the first statement.
            let opened = async {
                let pool = sqlite_pool_options().connect_with(options.clone()).await?;
                sqlx::raw_sql("PRAGMA schema_version")
                    .execute(&pool)
                    .await?;
                Ok::<_, sqlx::Error>(pool)
            };
            let pool = opened.await.map_err(|e| sqlite_open_error(path, e))?;
            let mut store = Store::from_pool(Pool::Sqlite(pool), table);
            if !read_only {
                store.sqlite_options = Some(options);
            }
            return Ok(store);
        } else if database_url.starts_with("postgres://")
            || database_url.starts_with("postgresql://")
        {
            // The relay's own writes (leases, settlements) need no fsync: if one is lost in a
            // database crash, the row is sent again under the same job id, which the
            // at-least-once contract already covers. Only the application's staging INSERT
            // must be durable, and that runs in the application's transaction, not here.
            let options = PgConnectOptions::from_str(database_url)
                .map_err(|e| bad_url(format!("{database_url:?}: {e}")))?
                .options([
                    ("synchronous_commit", "off"),
                    (
                        "default_transaction_read_only",
                        if read_only { "on" } else { "off" },
                    ),
                ]);
            // One direct attempt first: an unreachable server fails at once with its real
            // cause instead of a pool timeout.
            let probe = tokio::time::timeout(
                Duration::from_secs(10),
                PgConnection::connect_with(&options),
            )
            .await
            .map_err(|_| {
                Error::new(
                    ErrorCode::Database,
                    format!("{}: connection timed out", redact(database_url)),
                )
            })?
            .map_err(Error::database)?;
            let options = with_lz4_if_offered(options, probe).await;
            let pool = PgPoolOptions::new()
                .max_connections(4)
                // sqlx retries a refused connect with a backoff capped at a fifth of this
                // timeout: 2 s keeps a restarted server's reconnect within about 0.4 s.
                .acquire_timeout(Duration::from_secs(2))
                .connect_with(options)
                .await
                .map_err(Error::database)?;
            Pool::Postgres(pool)
        } else if let Some(rest) = database_url
            .strip_prefix("mysql://")
            .or_else(|| database_url.strip_prefix("mariadb://"))
        {
            name_fits(&OutboxSql::new(Dialect::Mysql, table))?;
            Pool::Mysql(open_mysql(&format!("mysql://{rest}"), database_url, read_only).await?)
        } else {
            return Err(bad_url(format!(
                "{database_url:?}: expected sqlite://PATH, postgres://USER@HOST:PORT/DB or mysql://USER@HOST:PORT/DB (mariadb:// too)"
            )));
        };
        Ok(Store::from_pool(pool, table))
    }

    pub(crate) fn from_pool(pool: Pool, table: &str) -> Store {
        let dialect = match pool {
            Pool::Postgres(_) => Dialect::Postgres,
            Pool::Sqlite(_) => Dialect::Sqlite,
            Pool::Mysql(_) => Dialect::Mysql,
        };
        let sql = OutboxSql::new(dialect, table);
        let statements = Statements {
            settle: shared_sql(sql.settle()),
            prune: shared_sql(sql.prune()),
            append_events: shared_sql(sql.append_events()),
            events_after: shared_sql(sql.events_after()),
            sqlite: (dialect == Dialect::Sqlite).then(|| SqliteStatements {
                claim_due: shared_sql(sql.claim_sqlite(false)),
                claim_ids: shared_sql(sql.claim_sqlite(true)),
                settle_sent: shared_sql(sql.settle_sent_sqlite()),
            }),
        };
        Store {
            pool,
            sql,
            statements: std::sync::Arc::new(statements),
            sqlite_options: None,
        }
    }

    /// The store a relay writes through. Its own writes (claims, settlements) need no fsync:
    /// one lost in a crash means the row is sent again under the same job id, which
    /// at-least-once covers; only the application's staging must be durable. PostgreSQL: the
    /// pool's sessions already commit with `synchronous_commit` off (`Outbox::begin` turns it
    /// on for an application's transaction). SQLite: `synchronous` is a setting of each
    /// connection, so the relay gets connections of its own with `synchronous = NORMAL` (in
    /// WAL mode a commit then appends to the WAL without an fsync). That shortens the relay's
    /// hold on SQLite's one write lock, which the application's transactions wait for. Its
    /// connections also checkpoint the WAL early (`RELAY_WAL_CHECKPOINT_PAGES`), so the WAL
    /// never reaches the 1,000 pages at which an application's COMMIT would do it.
    pub fn for_relay(&self) -> Store {
        let Some(options) = &self.sqlite_options else {
            return self.clone();
        };
        let pool = sqlite_pool_options().connect_lazy_with(
            options
                .clone()
                .synchronous(SqliteSynchronous::Normal)
                .pragma("wal_autocheckpoint", RELAY_WAL_CHECKPOINT_PAGES.to_string()),
        );
        Store {
            pool: Pool::Sqlite(pool),
            sqlite_options: None,
            ..self.clone()
        }
    }

    fn sqlite_statements(&self) -> &SqliteStatements {
        self.statements
            .sqlite
            .as_ref()
            .expect("built for every SQLite store")
    }

    pub fn dialect(&self) -> Dialect {
        self.sql.dialect
    }

    pub fn sql(&self) -> &OutboxSql {
        &self.sql
    }

    pub fn postgres_pool(&self) -> Option<&PgPool> {
        match &self.pool {
            Pool::Postgres(pool) => Some(pool),
            _ => None,
        }
    }

    pub fn sqlite_pool(&self) -> Option<&SqlitePool> {
        match &self.pool {
            Pool::Sqlite(pool) => Some(pool),
            _ => None,
        }
    }

    pub fn mysql_pool(&self) -> Option<&MySqlPool> {
        match &self.pool {
            Pool::Mysql(pool) => Some(pool),
            _ => None,
        }
    }

    /// Creates the table and its indexes if they do not exist.
    pub async fn migrate(&self) -> Result<()> {
        // PostgreSQL would cut a longer name's index names (MySQL is refused at connect, where
        // no such table can exist); a table an earlier version made is still relayed.
        name_fits(&self.sql)?;
        let statements = self.sql.create_table();
        if self.dialect() == Dialect::Sqlite {
            return self.ddl_sqlite(Some(&statements)).await;
        }
        // The table first, then its columns brought up to date (a table created by an older
        // version), then the indexes, which name those columns.
        self.execute(&statements[0]).await?;
        self.upgrade_table().await?;
        for statement in &statements[1..] {
            self.execute(statement).await?;
        }
        Ok(())
    }

    /// Adds `order_key` and `unique_key` and their indexes to a table created before they
    /// existed; does nothing to a table that has them. A relay runs it at start; two relays
    /// racing: the loser's error is ignored when the columns are there.
    pub async fn upgrade_table(&self) -> Result<()> {
        if self.dialect() == Dialect::Sqlite {
            return self.ddl_sqlite(None).await;
        }
        if self.execute(&self.sql.check_key_columns()).await.is_ok() {
            return Ok(());
        }
        let mut upgraded = Ok(0);
        for statement in self.sql.upgrade_table() {
            upgraded = self.execute(&statement).await;
            if upgraded.is_err() {
                break;
            }
        }
        match upgraded {
            Err(error) if self.execute(&self.sql.check_key_columns()).await.is_err() => Err(error),
            _ => Ok(()),
        }
    }

    /// SQLite: [`migrate`](Self::migrate) (`create_table`'s statements) or, without them,
    /// [`upgrade_table`](Self::upgrade_table), in one write transaction, so that every other
    /// connection, of this pool or of another process, sees the table with all its indexes or
    /// not at all. A connection that read the schema between a table's CREATE and its unique
    /// index's keeps that schema for the statements it prepares (SQLite re-reads a changed
    /// schema when a statement runs, not when one is prepared, and a conflict target it cannot
    /// match is no reason to): a unique job's staging upsert failed there with "ON CONFLICT
    /// clause does not match any PRIMARY KEY or UNIQUE constraint" until the connection ran
    /// another statement.
    async fn ddl_sqlite(&self, create: Option<&[String]>) -> Result<()> {
        let Pool::Sqlite(pool) = &self.pool else {
            unreachable!("called for SQLite");
        };
        let _running = crate::sqlite_fork::statement().await;
        let mut conn = pool.acquire().await?;
        sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut *conn).await?;
        let done = async {
            let mut run = async |statement: &str| {
                sqlx::raw_sql(AssertSqlSafe(statement.to_owned()))
                    .execute(&mut *conn)
                    .await
                    .map(drop)
            };
            // The table first, then its columns brought up to date (a table created by an
            // older version), then the indexes, which name those columns. The write lock is
            // held throughout: no other migration runs in between.
            if let Some(create) = create {
                run(&create[0]).await?;
            }
            if run(&self.sql.check_key_columns()).await.is_err() {
                for statement in self.sql.upgrade_table() {
                    run(&statement).await?;
                }
            }
            for statement in create.map_or(&[][..], |create| &create[1..]) {
                run(statement).await?;
            }
            Ok::<_, sqlx::Error>(())
        }
        .await;
        let end = if done.is_ok() { "COMMIT" } else { "ROLLBACK" };
        if let Err(error) = sqlx::raw_sql(end).execute(&mut *conn).await {
            conn.close_on_drop();
            return Err(error.into());
        }
        Ok(done?)
    }

    /// Fails with `OUTBOX_TABLE_MISSING` when the table does not exist, and with
    /// `INVALID_CONFIG` (field `table_name`) when a table of that name exists without the
    /// outbox's columns (`pg_catalog.pg_class`, an application's own table).
    pub async fn check_table(&self) -> Result<()> {
        match self.missing_column().await? {
            None => Ok(()),
            Some(why) => Err(not_an_outbox_table(
                &format!("{:?}", self.sql.table),
                &why,
                "the migration",
            )),
        }
    }

    /// Whether the table has every outbox column: `None` when it has, the database's words
    /// naming the first one missing when it has not. A missing table is an
    /// `OUTBOX_TABLE_MISSING` error.
    pub async fn missing_column(&self) -> Result<Option<String>> {
        let checked = on_pool!(&self.pool, |pool| sqlx::raw_sql(AssertSqlSafe(
            self.sql.check_table()
        ))
        .execute(pool)
        .await
        .map(|_| ()));
        match checked {
            Ok(()) => Ok(None),
            Err(sqlx::Error::Database(db))
                // PostgreSQL's and MySQL's undefined column (any message language); SQLite's
                // words.
                if matches!(db.code().as_deref(), Some("42703" | "42S22"))
                    || db.message().starts_with("no such column") =>
            {
                Ok(Some(db.message().to_owned()))
            }
            Err(e) => Err(Error::database(e)),
        }
    }

    async fn execute(&self, statement: &str) -> Result<u64> {
        Ok(on_pool!(&self.pool, |pool| sqlx::raw_sql(AssertSqlSafe(
            statement.to_owned()
        ))
        .execute(pool)
        .await?
        .rows_affected()))
    }

    /// Claims up to `limit` due rows older than `skip_recent`, in id order.
    pub async fn claim_due(
        &self,
        lease_token: &str,
        lease: Duration,
        limit: usize,
        skip_recent: Duration,
    ) -> Result<Claim> {
        self.claim_due_after(lease_token, lease, limit, skip_recent, None)
            .await
    }

    /// `claim_due`, past row `after_id` if given (a backlog's next claim, on PostgreSQL and
    /// MySQL; SQLite's claims are never taken ahead and ignore it).
    pub async fn claim_due_after(
        &self,
        lease_token: &str,
        lease: Duration,
        limit: usize,
        skip_recent: Duration,
        after_id: Option<i64>,
    ) -> Result<Claim> {
        let lease_ms = lease.as_millis() as i64;
        let skip_ms = skip_recent.as_millis() as i64;
        let filter = match after_id {
            Some(after_id) => ClaimFilter::OlderThanMsAfter {
                ms: skip_ms,
                after_id,
            },
            None => ClaimFilter::OlderThanMs(skip_ms),
        };
        match &self.pool {
            Pool::Postgres(pool) => held(pool, self.sql.begin_and_claim_pg(limit, filter)).await,
            Pool::Mysql(pool) => held_mysql(pool, &self.sql, filter, limit).await,
            Pool::Sqlite(pool) => {
                let _running = crate::sqlite_fork::statement().await;
                let rows = sqlx::query(self.sqlite_statements().claim_due.clone())
                    .bind(lease_token)
                    .bind(lease_ms)
                    .bind(limit as i64)
                    .bind(skip_ms)
                    .fetch_all(pool)
                    .await?;
                Ok(Claim::leased(sorted(
                    rows.iter().map(claimed_sqlite).collect(),
                )))
            }
        }
    }

    /// Claims the due rows among `job_ids` (the hot path), in id order.
    pub async fn claim_ids(
        &self,
        lease_token: &str,
        lease: Duration,
        job_ids: &[String],
    ) -> Result<Claim> {
        let lease_ms = lease.as_millis() as i64;
        // The ids go into the text of a PostgreSQL or MySQL claim: only UUIDs, formatted here
        // (an id that is none names no row).
        let ids = || -> Vec<uuid::Uuid> {
            job_ids
                .iter()
                .filter_map(|id| uuid::Uuid::parse_str(id).ok())
                .collect()
        };
        match &self.pool {
            Pool::Postgres(pool) => {
                let ids = ids();
                if ids.is_empty() {
                    return Ok(Claim::leased(Vec::new()));
                }
                let claim = self
                    .sql
                    .begin_and_claim_pg(ids.len(), ClaimFilter::Ids(&ids));
                held(pool, claim).await
            }
            Pool::Mysql(pool) => {
                let ids = ids();
                if ids.is_empty() {
                    return Ok(Claim::leased(Vec::new()));
                }
                held_mysql(pool, &self.sql, ClaimFilter::Ids(&ids), ids.len()).await
            }
            Pool::Sqlite(pool) => {
                let _running = crate::sqlite_fork::statement().await;
                let rows = sqlx::query(self.sqlite_statements().claim_ids.clone())
                    .bind(lease_token)
                    .bind(lease_ms)
                    .bind(job_ids.len() as i64)
                    .bind(serde_json::to_string(job_ids).expect("strings serialize"))
                    .fetch_all(pool)
                    .await?;
                Ok(Claim::leased(sorted(
                    rows.iter().map(claimed_sqlite).collect(),
                )))
            }
        }
    }

    /// Applies the outcome of every row of one claim in one statement (and, on PostgreSQL,
    /// commits the claim's transaction). On SQLite, rows whose lease was lost (reclaimed by
    /// another relay after expiry) are left alone. Returns how many rows were written.
    pub async fn settle(
        &self,
        lease_token: &str,
        claim: Claim,
        settlements: &[Settlement],
        events: Option<&LoggedEvents>,
    ) -> Result<u64> {
        let error_of = |s: &Settlement| s.error.as_deref().map(truncate);
        let delay_of = |s: &Settlement| s.retry_in.map(|d| d.as_millis() as i64);
        if let Some(Held::Mysql(tx)) = claim.held {
            return self.settle_mysql(tx, settlements, events).await;
        }
        if let Some(Held::Postgres { mut tx, ctids }) = claim.held {
            // A plain release needs no write: the commit lets the locks go.
            let settlements: Vec<&Settlement> = settlements
                .iter()
                .filter(|s| s.status.is_some() || s.retry_in.is_some() || s.error.is_some())
                .collect();
            let mut done = 0;
            let located: Option<Vec<&str>> = settlements
                .iter()
                .map(|s| ctids.get(&s.id).map(String::as_str))
                .collect();
            let settle_and_commit = located
                .filter(|_| settlements.iter().all(|s| delivered_as_is(s)))
                .and_then(|located| match events {
                    Some(events) => self.sql.settle_sent_log_and_commit_pg(
                        &located,
                        events.time_ms,
                        &events.json,
                    ),
                    None => self.sql.settle_sent_and_commit_pg(&located),
                });
            if let Some(statements) = settle_and_commit {
                done = sqlx::raw_sql(AssertSqlSafe(statements))
                    .execute(&mut *tx.conn)
                    .await?
                    .rows_affected();
                tx.open = false;
                return Ok(done);
            }
            if !settlements.is_empty() {
                let ids: Vec<i64> = settlements.iter().map(|s| s.id).collect();
                let statuses: Vec<Option<&str>> = settlements
                    .iter()
                    .map(|s| s.status.map(RowStatus::as_str))
                    .collect();
                let attempts: Vec<i32> = settlements
                    .iter()
                    .map(|s| s.consumed_attempt as i32)
                    .collect();
                let delays: Vec<Option<i64>> = settlements.iter().map(|s| delay_of(s)).collect();
                let errors: Vec<Option<String>> = settlements.iter().map(|s| error_of(s)).collect();
                done = sqlx::query(self.statements.settle.clone())
                    .bind(ids)
                    .bind(statuses)
                    .bind(attempts)
                    .bind(delays)
                    .bind(errors)
                    .execute(&mut *tx.conn)
                    .await?
                    .rows_affected();
            }
            if let Some(events) = events {
                self.append_events_pg(&mut tx.conn, events).await?;
            }
            tx.commit().await?;
            return Ok(done);
        }
        if settlements.is_empty() {
            return Ok(0);
        }
        if let Some(events) = events {
            return self
                .settle_and_log_sqlite(lease_token, settlements, events)
                .await;
        }
        let Pool::Sqlite(pool) = &self.pool else {
            unreachable!("a PostgreSQL claim holds its transaction");
        };
        let _running = crate::sqlite_fork::statement().await;
        let (statement, rows) = self.sqlite_settlement(settlements);
        Ok(sqlx::query(statement)
            .bind(rows)
            .bind(lease_token)
            .execute(pool)
            .await?
            .rows_affected())
    }

    /// MySQL: settles a claim in its transaction, appends the round's events, commits.
    async fn settle_mysql(
        &self,
        mut tx: OpenMysqlTransaction,
        settlements: &[Settlement],
        events: Option<&LoggedEvents>,
    ) -> Result<u64> {
        // A plain release needs no write: the commit lets the locks go.
        let settlements: Vec<Settlement> = settlements
            .iter()
            .filter(|s| s.status.is_some() || s.retry_in.is_some() || s.error.is_some())
            .cloned()
            .collect();
        let ids: Vec<i64> = settlements.iter().map(|s| s.id).collect();
        let all_sent = !settlements.is_empty() && settlements.iter().all(delivered_as_is);
        // The common round, with no events to log: the UPDATE and the COMMIT in one message.
        if all_sent && events.is_none() {
            let sql = format!("{}; COMMIT", self.sql.settle_sent_mysql(&ids));
            return tx.finish(sql).await;
        }
        let mut done = 0;
        if all_sent {
            done = sqlx::raw_sql(AssertSqlSafe(self.sql.settle_sent_mysql(&ids)))
                .execute(&mut *tx.conn)
                .await?
                .rows_affected();
        } else if !settlements.is_empty() {
            done = sqlx::query(AssertSqlSafe(self.sql.settle_mysql(&ids)))
                .bind(settlements_json(&settlements))
                .execute(&mut *tx.conn)
                .await?
                .rows_affected();
        }
        if let Some(events) = events {
            append_events_mysql(&self.sql, &self.statements, &mut tx.conn, events).await?;
        }
        tx.finish("COMMIT".to_owned()).await?;
        Ok(done)
    }

    /// SQLite's settle statement for these settlements and its first parameter (the rows as
    /// JSON text; the second is the lease token).
    fn sqlite_settlement(&self, settlements: &[Settlement]) -> (SqlStr, String) {
        if settlements.iter().all(delivered_as_is) {
            let ids: Vec<i64> = settlements.iter().map(|s| s.id).collect();
            return (
                self.sqlite_statements().settle_sent.clone(),
                serde_json::to_string(&ids).expect("integers serialize"),
            );
        }
        (
            self.statements.settle.clone(),
            settlements_json(settlements),
        )
    }
}

/// Settlements as `OutboxSql::settle` reads them on SQLite and MySQL: a JSON array of
/// `[id, status, attempt, delay_ms, error]`.
fn settlements_json(settlements: &[Settlement]) -> String {
    {
        let rows: Vec<serde_json::Value> = settlements
            .iter()
            .map(|s| {
                serde_json::json!([
                    s.id,
                    s.status.map(RowStatus::as_str),
                    s.consumed_attempt as i32,
                    s.retry_in.map(|d| d.as_millis() as i64),
                    s.error.as_deref().map(truncate)
                ])
            })
            .collect();
        serde_json::Value::Array(rows).to_string()
    }
}

/// MySQL: appends to the event log inside the caller's transaction, after taking the log's
/// lock row (so `seq` grows in commit order, as PostgreSQL's advisory lock ensures there).
async fn append_events_mysql(
    sql: &OutboxSql,
    statements: &Statements,
    conn: &mut sqlx::MySqlConnection,
    events: &LoggedEvents,
) -> Result<()> {
    sqlx::raw_sql(AssertSqlSafe(sql.lock_event_log()))
        .execute(&mut *conn)
        .await?;
    sqlx::query(statements.append_events.clone())
        .bind(events.time_ms)
        .bind(&events.json)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl Store {
    /// SQLite: the settlement and the round's events in one write transaction.
    async fn settle_and_log_sqlite(
        &self,
        lease_token: &str,
        settlements: &[Settlement],
        events: &LoggedEvents,
    ) -> Result<u64> {
        let Pool::Sqlite(pool) = &self.pool else {
            unreachable!("called for SQLite");
        };
        let _running = crate::sqlite_fork::statement().await;
        let mut conn = pool.acquire().await?;
        sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut *conn).await?;
        let (statement, rows) = self.sqlite_settlement(settlements);
        let written = async {
            let done = sqlx::query(statement)
                .bind(rows)
                .bind(lease_token)
                .execute(&mut *conn)
                .await?
                .rows_affected();
            sqlx::query(self.statements.append_events.clone())
                .bind(events.time_ms)
                .bind(&events.json)
                .execute(&mut *conn)
                .await?;
            Ok::<_, sqlx::Error>(done)
        }
        .await;
        let end = if written.is_ok() {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        if let Err(error) = sqlx::raw_sql(end).execute(&mut *conn).await {
            conn.close_on_drop();
            return Err(error.into());
        }
        Ok(written?)
    }

    /// PostgreSQL: appends to the event log inside the caller's transaction.
    async fn append_events_pg(
        &self,
        conn: &mut sqlx::PgConnection,
        events: &LoggedEvents,
    ) -> Result<()> {
        sqlx::raw_sql(AssertSqlSafe(self.sql.lock_event_log()))
            .execute(&mut *conn)
            .await?;
        sqlx::query(self.statements.append_events.clone())
            .bind(events.time_ms)
            .bind(&events.json)
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// Appends events outside a settlement (the relay's pauses, an operator's action).
    pub async fn append_events(&self, events: &LoggedEvents) -> Result<()> {
        match &self.pool {
            Pool::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                self.append_events_pg(&mut tx, events).await?;
                tx.commit().await?;
            }
            Pool::Sqlite(pool) => {
                let _running = crate::sqlite_fork::statement().await;
                sqlx::query(self.statements.append_events.clone())
                    .bind(events.time_ms)
                    .bind(&events.json)
                    .execute(pool)
                    .await?;
            }
            Pool::Mysql(pool) => {
                let mut tx = pool.begin().await?;
                append_events_mysql(&self.sql, &self.statements, &mut tx, events).await?;
                tx.commit().await?;
            }
        }
        Ok(())
    }

    /// Up to `limit` rows of the event log after `seq`: `(seq, time_ms, events JSON)`, in
    /// order.
    pub async fn events_after(&self, seq: i64, limit: usize) -> Result<Vec<(i64, i64, String)>> {
        Ok(on_pool!(&self.pool, |pool| sqlx::query_as(
            self.statements.events_after.clone()
        )
        .bind(seq)
        .bind(limit as i64)
        .fetch_all(pool)
        .await?))
    }

    /// The cursor before the first row of the event log at or after `time_ms` (the end of
    /// the log when there is none).
    pub async fn events_cursor_at(&self, time_ms: i64) -> Result<i64> {
        let (seq,): (i64,) = on_pool!(&self.pool, |pool| sqlx::query_as(AssertSqlSafe(
            self.sql.events_cursor_at()
        ))
        .bind(time_ms)
        .fetch_one(pool)
        .await?);
        Ok(seq)
    }

    /// Deletes the event log's rows older than `cutoff_ms`.
    pub async fn prune_events(&self, cutoff_ms: i64) -> Result<u64> {
        Ok(on_pool!(&self.pool, |pool| sqlx::query(AssertSqlSafe(
            self.sql.prune_events()
        ))
        .bind(cutoff_ms)
        .execute(pool)
        .await?
        .rows_affected()))
    }

    /// Creates the event log when the table was migrated before it existed (idempotent; on
    /// PostgreSQL two relays may race: the loser's error is ignored when the log is there).
    pub async fn ensure_event_log(&self) -> Result<()> {
        let mut created = Ok(0);
        for statement in self.sql.create_event_log() {
            created = self.execute(&statement).await;
            if created.is_err() {
                break;
            }
        }
        if let Err(error) = created
            && self.events_after(i64::MAX, 1).await.is_err()
        {
            return Err(error);
        }
        Ok(())
    }

    /// Deletes up to `limit` `sent` rows older than `retention`; returns how many.
    pub async fn prune(&self, retention: Duration, limit: usize) -> Result<u64> {
        let retention_ms = retention.as_millis() as i64;
        Ok(on_pool!(&self.pool, |pool| sqlx::query(
            self.statements.prune.clone()
        )
        .bind(retention_ms)
        .bind(limit as i64)
        .execute(pool)
        .await?
        .rows_affected()))
    }

    /// Every figure of [`OutboxStatus`] (what `ojs-relay status` prints).
    pub async fn status(&self) -> Result<OutboxStatus> {
        let mut status = self.counts().await?;
        let rejected: (i64,) = on_pool!(&self.pool, |pool| sqlx::query_as(AssertSqlSafe(
            self.sql.unique_rejected_count()
        ))
        .fetch_one(pool)
        .await?);
        status.unique_rejected = rejected.0;
        Ok(status)
    }

    /// [`status`](Self::status) without `unique_rejected` (0 here), which reads every sent row:
    /// what `/metrics` shows at each scrape, each figure read from its index.
    pub async fn counts(&self) -> Result<OutboxStatus> {
        let counts: Vec<(String, i64, i64, i64)> = on_pool!(&self.pool, |pool| sqlx::query_as(
            AssertSqlSafe(self.sql.status_counts())
        )
        .fetch_all(pool)
        .await?);
        let lag: (i64,) = on_pool!(&self.pool, |pool| sqlx::query_as(AssertSqlSafe(
            self.sql.recent_lag()
        ))
        .fetch_one(pool)
        .await?);
        let held: (i64,) = on_pool!(&self.pool, |pool| sqlx::query_as(AssertSqlSafe(
            self.sql.held_by_dead()
        ))
        .fetch_one(pool)
        .await?);
        let mut status = OutboxStatus {
            recent_lag_ms: lag.0,
            held_by_dead: held.0,
            in_flight: (self.dialect() == Dialect::Sqlite).then_some(0),
            ..OutboxStatus::default()
        };
        for (name, rows, in_flight, oldest_ms) in counts {
            if let Some(total) = status.in_flight.as_mut() {
                *total += in_flight;
            }
            match RowStatus::parse(&name) {
                Some(RowStatus::Pending) => status.pending = rows,
                Some(RowStatus::Failed) => status.failed = rows,
                Some(RowStatus::Sent) => status.sent = rows,
                Some(RowStatus::Dead) => status.dead = rows,
                None => {}
            }
            if matches!(name.as_str(), "pending" | "failed") {
                status.oldest_pending_age_ms = status.oldest_pending_age_ms.max(oldest_ms);
            }
        }
        Ok(status)
    }

    /// Rows not yet delivered (pending or failed) and the age of the oldest in ms. Reads only
    /// the due-rows index, so it stays cheap beside millions of sent rows.
    pub async fn undelivered_summary(&self) -> Result<(i64, i64)> {
        let sql = self.sql.undelivered_summary();
        Ok(on_pool!(&self.pool, |pool| sqlx::query_as(AssertSqlSafe(
            sql
        ))
        .fetch_one(pool)
        .await?))
    }

    /// Dead rows, oldest first; `tenant` scopes them (seed 003: a tenant sees only its own).
    pub async fn dead_list(&self, tenant: Option<&str>, limit: usize) -> Result<Vec<DeadRow>> {
        let sql = self.sql.dead_list();
        let rows: Vec<DeadTuple> = on_pool!(&self.pool, |pool| sqlx::query_as(AssertSqlSafe(
            sql.clone()
        ))
        .bind(tenant)
        .bind(limit as i64)
        .fetch_all(pool)
        .await?);
        Ok(rows
            .into_iter()
            .map(
                |(job_id, job_type, tenant_id, attempts, error, created_at_ms)| DeadRow {
                    job_id,
                    job_type,
                    tenant_id,
                    attempts,
                    error,
                    created_at_ms,
                },
            )
            .collect())
    }

    /// How many dead rows a tenant (or, with `None`, every tenant) has.
    pub async fn dead_count(&self, tenant: Option<&str>) -> Result<i64> {
        let sql = self.sql.dead_count();
        let (count,): (i64,) = on_pool!(&self.pool, |pool| sqlx::query_as(AssertSqlSafe(sql))
            .bind(tenant)
            .fetch_one(pool)
            .await?);
        Ok(count)
    }

    /// Puts dead rows back to `pending` with fresh attempts; returns how many.
    pub async fn dead_replay(&self, tenant: Option<&str>) -> Result<u64> {
        self.tenant_statement(&self.sql.dead_replay(), tenant).await
    }

    /// Deletes dead rows; returns how many.
    pub async fn dead_purge(&self, tenant: Option<&str>) -> Result<u64> {
        self.tenant_statement(&self.sql.dead_purge(), tenant).await
    }

    async fn tenant_statement(&self, sql: &str, tenant: Option<&str>) -> Result<u64> {
        Ok(on_pool!(&self.pool, |pool| sqlx::query(AssertSqlSafe(
            sql.to_owned()
        ))
        .bind(tenant)
        .execute(pool)
        .await?
        .rows_affected()))
    }

    /// The state of the rows of these job ids (absent ids have no row), as committed.
    pub async fn rows_by_job_id(&self, job_ids: &[String]) -> Result<HashMap<String, RowState>> {
        match &self.pool {
            Pool::Postgres(pool) => rows_by_job_id_pg(&self.sql, pool, job_ids).await,
            Pool::Mysql(pool) => rows_by_job_id_mysql(&self.sql, pool, job_ids).await,
            Pool::Sqlite(pool) => {
                let _running = crate::sqlite_fork::statement().await;
                rows_by_job_id_sqlite(&self.sql, pool, job_ids).await
            }
        }
    }

    pub async fn count_rows(&self) -> Result<i64> {
        match &self.pool {
            Pool::Postgres(pool) => count_rows_pg(&self.sql, pool).await,
            Pool::Mysql(pool) => count_rows_mysql(&self.sql, pool).await,
            Pool::Sqlite(pool) => {
                let _running = crate::sqlite_fork::statement().await;
                count_rows_sqlite(&self.sql, pool).await
            }
        }
    }

    pub async fn close(&self) {
        on_pool!(&self.pool, |pool| pool.close().await)
    }
}

/// Runs a PostgreSQL claim (`BEGIN; SELECT ...`): its rows, held by the transaction's locks.
/// An empty claim holds nothing, so its transaction ends at once.
async fn held(pool: &PgPool, claim: String) -> Result<Claim> {
    let mut tx = OpenTransaction {
        conn: pool.acquire().await?,
        open: true,
    };
    let rows = sqlx::raw_sql(AssertSqlSafe(claim))
        .fetch_all(&mut *tx.conn)
        .await?;
    if rows.is_empty() {
        tx.commit().await?;
        return Ok(Claim::leased(Vec::new()));
    }
    let ctids = rows.iter().map(|row| (row.get(0), row.get(7))).collect();
    Ok(Claim {
        rows: sorted(rows.iter().map(claimed_pg).collect()),
        held: Some(Held::Postgres { tx, ctids }),
    })
}

/// Runs a MySQL claim in a new transaction: finds the due rows' ids
/// (`OutboxSql::claim_candidates_mysql`), then locks up to `limit` of the rows in their range
/// by primary key (`OutboxSql::claim_mysql`); its rows are held by the transaction's locks.
/// An empty claim holds nothing, so its transaction ends at once.
async fn held_mysql(
    pool: &MySqlPool,
    sql: &OutboxSql,
    filter: ClaimFilter<'_>,
    limit: usize,
) -> Result<Claim> {
    let mut tx = OpenMysqlTransaction {
        conn: pool.acquire().await?,
        open: true,
    };
    // Texts that change every round go as plain queries: prepared, each would evict another
    // from sqlx's statement cache, and the eviction's COM_STMT_CLOSE written just before the
    // next COM_STMT_PREPARE stalls on Nagle's algorithm (sqlx sets no TCP_NODELAY): 40 ms.
    // The BEGIN goes in the same message as the first read.
    let candidates = format!("BEGIN; {}", sql.claim_candidates_mysql(limit, filter));
    let ids: Vec<i64> = sqlx::raw_sql(AssertSqlSafe(candidates))
        .fetch_all(&mut *tx.conn)
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let rows = match (ids.first(), ids.last()) {
        (Some(&first), Some(&last)) => {
            sqlx::raw_sql(AssertSqlSafe(sql.claim_mysql(first, last, limit, filter)))
                .fetch_all(&mut *tx.conn)
                .await?
        }
        _ => Vec::new(),
    };
    if rows.is_empty() {
        tx.finish("COMMIT".to_owned()).await?;
        return Ok(Claim::leased(Vec::new()));
    }
    let rows = rows
        .iter()
        .map(|row| ClaimedRow {
            id: row.get(0),
            job_id: row.get(1),
            job_type: row.get(2),
            args_json: row.get(3),
            options_json: row.get(4),
            meta_json: row.get(5),
            attempts: row.get(6),
            keyed: row.get::<i64, _>(7) != 0,
        })
        .collect();
    Ok(Claim {
        rows: sorted(rows),
        held: Some(Held::Mysql(tx)),
    })
}

/// A MySQL or MariaDB pool. The relay's sessions run READ COMMITTED: a locking read under
/// REPEATABLE READ (InnoDB's default) also locks the gaps it scans, and an application's
/// staging INSERT into the gap after the last row would wait for the relay's claim to
/// commit. A read-only store's sessions refuse writes.
async fn open_mysql(url: &str, shown: &str, read_only: bool) -> Result<MySqlPool> {
    let options = MySqlConnectOptions::from_str(url).map_err(|e| {
        Error::field(
            ErrorCode::InvalidDatabaseUrl,
            "database_url",
            format!("{:?}: {e}", redact(shown)),
        )
    })?;
    let session = if read_only {
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED, READ ONLY"
    } else {
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"
    };
    // One direct attempt first: an unreachable server fails at once with its real cause.
    let probe = tokio::time::timeout(
        Duration::from_secs(10),
        sqlx::MySqlConnection::connect_with(&options),
    )
    .await
    .map_err(|_| {
        Error::new(
            ErrorCode::Database,
            format!("{}: connection timed out", redact(shown)),
        )
    })?
    .map_err(Error::database)?;
    let _ = probe.close().await;
    MySqlPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(2))
        // A server closes a connection idle for `wait_timeout` (8 hours by default): the pool
        // drops its own idle ones sooner, and pings one before handing it out.
        .idle_timeout(Duration::from_secs(300))
        .test_before_acquire(true)
        .after_connect(move |conn, _| {
            Box::pin(async move {
                sqlx::raw_sql(session).execute(&mut *conn).await?;
                // MariaDB turns an IN list of 1,000 values or more (a hot claim's job ids at the
                // largest batch) into a join with a temporary table, whose locking read then
                // skips rows it should take. MySQL has no such variable: the error is ignored.
                let _ = sqlx::raw_sql("SET SESSION in_predicate_conversion_threshold = 0")
                    .execute(&mut *conn)
                    .await;
                Ok(())
            })
        })
        .connect_with(options)
        .await
        .map_err(Error::database)
}

fn claimed_pg(row: &sqlx::postgres::PgRow) -> ClaimedRow {
    ClaimedRow {
        id: row.get(0),
        job_id: row.get(1),
        job_type: row.get(2),
        args_json: row.get(3),
        options_json: row.get(4),
        meta_json: row.get(5),
        attempts: row.get(6),
        keyed: row.get(8),
    }
}

fn claimed_sqlite(row: &sqlx::sqlite::SqliteRow) -> ClaimedRow {
    ClaimedRow {
        id: row.get(0),
        job_id: row.get(1),
        job_type: row.get(2),
        args_json: row.get(3),
        options_json: row.get(4),
        meta_json: row.get(5),
        attempts: row.get(6),
        keyed: row.get(7),
    }
}

/// A settlement `OutboxSql::settle_sent` can write: sent, with no note and no attempt used.
fn delivered_as_is(settlement: &Settlement) -> bool {
    settlement.status == Some(RowStatus::Sent)
        && settlement.error.is_none()
        && settlement.retry_in.is_none()
        && !settlement.consumed_attempt
}

/// RETURNING gives no order; the relay sends in insertion order (FIFO, spec §12.2).
fn sorted(mut rows: Vec<ClaimedRow>) -> Vec<ClaimedRow> {
    rows.sort_unstable_by_key(|row| row.id);
    rows
}

fn truncate(text: &str) -> String {
    if text.len() <= ERROR_TEXT_LIMIT {
        return text.to_owned();
    }
    let mut end = ERROR_TEXT_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

type RowTuple = (String, String, i32, Option<String>);
type DeadTuple = (String, String, Option<String>, i32, Option<String>, i64);

fn row_states(rows: Vec<RowTuple>) -> HashMap<String, RowState> {
    rows.into_iter()
        .filter_map(|(job_id, status, attempts, error)| {
            RowStatus::parse(&status).map(|status| {
                (
                    job_id,
                    RowState {
                        status,
                        attempts,
                        error,
                    },
                )
            })
        })
        .collect()
}

// Readers generic over the executor, so a transaction sees its own uncommitted rows.
pub(crate) async fn rows_by_job_id_pg<'e, E: sqlx::PgExecutor<'e>>(
    sql: &OutboxSql,
    executor: E,
    job_ids: &[String],
) -> Result<HashMap<String, RowState>> {
    let rows: Vec<RowTuple> = sqlx::query_as(AssertSqlSafe(sql.rows_by_job_id()))
        .bind(job_ids)
        .fetch_all(executor)
        .await?;
    Ok(row_states(rows))
}

pub(crate) async fn rows_by_job_id_sqlite<'e, E: sqlx::SqliteExecutor<'e>>(
    sql: &OutboxSql,
    executor: E,
    job_ids: &[String],
) -> Result<HashMap<String, RowState>> {
    let ids = serde_json::to_string(job_ids).expect("strings serialize");
    let rows: Vec<RowTuple> = sqlx::query_as(AssertSqlSafe(sql.rows_by_job_id()))
        .bind(ids)
        .fetch_all(executor)
        .await?;
    Ok(row_states(rows))
}

pub(crate) async fn rows_by_job_id_mysql<'e, E: sqlx::MySqlExecutor<'e>>(
    sql: &OutboxSql,
    executor: E,
    job_ids: &[String],
) -> Result<HashMap<String, RowState>> {
    let ids = serde_json::to_string(job_ids).expect("strings serialize");
    let rows: Vec<RowTuple> = sqlx::query_as(AssertSqlSafe(sql.rows_by_job_id()))
        .bind(ids)
        .fetch_all(executor)
        .await?;
    Ok(row_states(rows))
}

pub(crate) async fn count_rows_mysql<'e, E: sqlx::MySqlExecutor<'e>>(
    sql: &OutboxSql,
    executor: E,
) -> Result<i64> {
    let (count,): (i64,) = sqlx::query_as(AssertSqlSafe(sql.count_rows()))
        .fetch_one(executor)
        .await?;
    Ok(count)
}

pub(crate) async fn count_rows_pg<'e, E: sqlx::PgExecutor<'e>>(
    sql: &OutboxSql,
    executor: E,
) -> Result<i64> {
    let (count,): (i64,) = sqlx::query_as(AssertSqlSafe(sql.count_rows()))
        .fetch_one(executor)
        .await?;
    Ok(count)
}

pub(crate) async fn count_rows_sqlite<'e, E: sqlx::SqliteExecutor<'e>>(
    sql: &OutboxSql,
    executor: E,
) -> Result<i64> {
    let (count,): (i64,) = sqlx::query_as(AssertSqlSafe(sql.count_rows()))
        .fetch_one(executor)
        .await?;
    Ok(count)
}

/// `INVALID_CONFIG` (field `table_name`): `table` (as a message names it) exists without the
/// outbox's columns; `why` is the database's words.
pub(crate) fn not_an_outbox_table(table: &str, why: &str, create_table_with: &str) -> Error {
    Error {
        code: ErrorCode::InvalidConfig,
        field: Some("table_name".to_owned()),
        message: format!(
            "the table {table} is not an outbox table ({why}); name the outbox table, or a table that does not exist yet and create it with {create_table_with}"
        ),
        existing_job_id: None,
    }
}

/// A SQLite file that could not be opened: a file that is no database names its path (SQLite's
/// own words do not).
fn sqlite_open_error(path: &std::path::Path, error: sqlx::Error) -> Error {
    let not_a_database =
        matches!(&error, sqlx::Error::Database(db) if db.code().as_deref() == Some("26"));
    let error = Error::database(error);
    if !not_a_database {
        return error;
    }
    Error::new(
        error.code,
        format!(
            "{} is not a SQLite database: {}",
            path.display(),
            error.message
        ),
    )
}

/// PostgreSQL 14+ built with lz4: the pool's sessions compress what they TOAST with lz4, not
/// pglz. The event log's row of a round's events is such a value, written in the settlement
/// that paces a drain: one of 500 events took 0.32 ms to insert with lz4 and 0.74 ms with
/// pglz, at the same size (docs/benchmarks.md). Without lz4 the server's default stays.
async fn with_lz4_if_offered(
    options: PgConnectOptions,
    mut probe: PgConnection,
) -> PgConnectOptions {
    let offered: Option<bool> = sqlx::query_scalar(
        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'",
    )
    .fetch_optional(&mut probe)
    .await
    .ok()
    .flatten();
    let _ = probe.close().await;
    if offered == Some(true) {
        options.options([("default_toast_compression", "lz4")])
    } else {
        options
    }
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

pub mod dashboard;
pub mod relays;

/// The table's name leaves room for every name derived from it (`OutboxSql::name_too_long`).
fn name_fits(sql: &OutboxSql) -> Result<()> {
    match sql.name_too_long() {
        Some(why) => Err(Error::field(ErrorCode::InvalidConfig, "table_name", why)),
        None => Ok(()),
    }
}
