//! Every SQL statement of the product, per dialect, in one place. Bindings get the staging
//! INSERT and the DDL from here as "SQL text + ordered parameters" and run them on the host
//! connection; the relay's store runs the rest through sqlx. Dialect differences stay here.

use crate::job::{OnConflict, PreparedJob};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Sqlite,
    /// MariaDB 10.6+ (tested on 10.11) and MySQL 8.0.13+ (written for, not tested here).
    Mysql,
}

impl Dialect {
    pub fn parse(name: &str) -> Option<Dialect> {
        match name {
            "postgres" | "postgresql" | "pg" => Some(Dialect::Postgres),
            "sqlite" | "sqlite3" => Some(Dialect::Sqlite),
            "mysql" | "mariadb" => Some(Dialect::Mysql),
            _ => None,
        }
    }

    /// The default parameter style of the dialect's own drivers (sqlx, libpq, sqlite3).
    pub fn native_placeholders(self) -> Placeholder {
        match self {
            Dialect::Postgres => Placeholder::Dollar,
            Dialect::Sqlite | Dialect::Mysql => Placeholder::Question,
        }
    }
}

/// The rows a PostgreSQL claim takes among the due ones (`OutboxSql::begin_and_claim_pg`).
#[derive(Debug, Clone, Copy)]
pub enum ClaimFilter<'a> {
    /// These job ids (the hot path).
    Ids(&'a [uuid::Uuid]),
    /// Rows created at least this many milliseconds ago (the poller leaves fresher rows to
    /// the hot path).
    OlderThanMs(i64),
    /// The same, only past row `after_id`: a backlog's next claim starts where the last one
    /// ended rather than stepping over the rows still locked or just settled at the head.
    OlderThanMsAfter { ms: i64, after_id: i64 },
}

/// How the host driver spells a positional parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    /// `$1, $2` (libpq, sqlx postgres, ActiveRecord's postgres binds)
    Dollar,
    /// `?` (sqlite3, knex bindings, ActiveRecord's sqlite binds)
    Question,
    /// `%s` (Python DB-API "format" style: Django's cursor, psycopg)
    Percent,
}

impl Placeholder {
    pub fn parse(name: &str) -> Option<Placeholder> {
        match name {
            "dollar" | "$" => Some(Placeholder::Dollar),
            "question" | "?" => Some(Placeholder::Question),
            "percent" | "%s" | "format" => Some(Placeholder::Percent),
            _ => None,
        }
    }

    fn write(self, out: &mut String, index: usize) {
        match self {
            Placeholder::Dollar => {
                out.push('$');
                out.push_str(&index.to_string());
            }
            Placeholder::Question => out.push('?'),
            Placeholder::Percent => out.push_str("%s"),
        }
    }
}

/// A statement for a host connection: SQL text and its parameters, in order. Every parameter
/// is text or NULL; casts in the SQL give the columns their types.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Statement {
    pub sql: String,
    pub params: Vec<Option<String>>,
    /// Set when the statement returns one row, whose first column is the id of the job that
    /// holds a unique key (the staged job's, or the one held before it); no row means the held
    /// job is being sent and could not be replaced. The binding hands the row's id to
    /// `ojs_bridge::Bridge::held_outcome` with `token`, and reports what that returns as the
    /// id of job `job` (or raises its error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub returns: Option<Returns>,
}

/// What a row-returning staging statement means (`Statement::returns`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Returns {
    /// The job's position in the staged list.
    pub job: usize,
    /// `<on_conflict>:<staged job id>`, read back by `held_outcome`.
    pub token: String,
}

impl Returns {
    fn new(job: usize, job_id: &str, on_conflict: OnConflict) -> Returns {
        Returns {
            job,
            token: format!("{}:{job_id}", on_conflict.as_str()),
        }
    }
}

/// The id a unique job's enqueue call reports, from the staging statement's returned id
/// (`Statement::returns`): the staged job's own when it was staged (or took the held job's row),
/// the held job's for `ignore` and `replace_except_schedule`, `DUPLICATE` for `reject` and for a
/// held job that is being sent when the policy would have replaced it.
pub fn held_outcome(token: &str, returned: Option<&str>) -> crate::Result<String> {
    use crate::error::{Error, ErrorCode};
    let (policy, staged) = token
        .split_once(':')
        .and_then(|(policy, id)| Some((OnConflict::parse(policy)?, id)))
        .ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidConfig,
                format!("not a staging token: {token:?}"),
            )
        })?;
    let duplicate = |existing: Option<&str>, why: &str| {
        let mut error = Error::field(ErrorCode::Duplicate, "options.unique", why.to_owned());
        error.existing_job_id = existing.map(str::to_owned);
        error
    };
    match (policy, returned) {
        (_, Some(id)) if id.eq_ignore_ascii_case(staged) => Ok(staged.to_owned()),
        (OnConflict::Reject, Some(id)) => Err(duplicate(
            Some(id),
            &format!(
                "a job with the same unique key is staged and not yet sent: {id} (on_conflict reject)"
            ),
        )),
        (_, Some(id)) => Ok(id.to_ascii_lowercase()),
        (_, None) => Err(duplicate(
            None,
            "the job holding the same unique key is being sent right now and cannot be replaced; try again",
        )),
    }
}

/// Rows per staging INSERT: 6 parameters a row keeps one statement under the parameter limits
/// of PostgreSQL (65535) and SQLite (32766).
pub const MAX_ROWS_PER_INSERT: usize = 5000;
const INSERT_COLUMNS: &str = "job_id, job_type, job_args, job_options, job_meta, tenant_id";

/// The rows whose unique key the outbox enforces: those it still holds.
const HELD: &str = "status IN ('pending', 'failed')";

/// Every column of the outbox table (`create_table`), for the check that a table of the
/// configured name is an outbox table.
const OUTBOX_COLUMNS: &str = "id, job_id, job_type, job_args, job_options, job_meta, tenant_id, \
     status, attempts, available_at, locked_until, lease_token, created_at, sent_at, error";

/// The current time in milliseconds since the epoch, from SQLite's own clock (works on every
/// SQLite from 3.x on: `unixepoch('subsec')` needs 3.42, hosts may have older).
const SQLITE_NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

/// The same from MySQL's and MariaDB's clock. `UTC_TIMESTAMP` does not depend on the session's
/// time zone (`UNIX_TIMESTAMP(NOW(3))` does, ambiguously in a daylight-saving change), and the
/// difference of two DATETIMEs is arithmetic.
const MYSQL_NOW_MS: &str =
    "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";

/// MySQL and MariaDB: the most bytes of job texts in one multi-row staging INSERT, well under
/// `max_allowed_packet` (4 MiB on MySQL 5.7, 16 MiB on MariaDB, 64 MiB on MySQL 8).
const MYSQL_MAX_INSERT_BYTES: usize = 1024 * 1024;

/// The longest name derived from the table's: its event log's index, `<table>_events_time`.
const LONGEST_DERIVED_SUFFIX: &str = "_events_time";

/// MySQL and MariaDB: how many claims' worth of due ids a claim looks among
/// (`claim_candidates_mysql`).
const MYSQL_CLAIM_WINDOW: usize = 4;

/// MySQL and MariaDB have no partial indexes: generated columns hold what a partial index
/// filters on (`held`: the row is pending or failed; `held_unique_key`: its unique key while it
/// is), and the indexes of `create_table` are on them. The ordering and uniqueness locks of a
/// staging transaction are rows of `<table>_locks` (no transaction-scoped advisory locks).
const MYSQL_TABLE_OPTIONS: &str = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";

/// The statements of one outbox table in one dialect.
#[derive(Debug, Clone)]
pub struct OutboxSql {
    pub dialect: Dialect,
    pub table: String,
    /// Staging statements announce themselves (PostgreSQL NOTIFY, delivered at COMMIT only).
    pub notify: bool,
}

/// The channel of the staging NOTIFY; the payload is the table's name (`OutboxSql::insert`).
pub const STAGED_CHANNEL: &str = "ojs_staged";

/// The start of the `error` note of a row whose job the backend's unique policy refused (the
/// relay writes it, `relay/send.rs`): what `status` counts as `unique_rejected`
/// ([`OutboxSql::unique_rejected_count`]).
pub const UNIQUE_REJECTED_NOTE: &str = "unique conflict: not created;";

impl OutboxSql {
    pub fn new(dialect: Dialect, table: &str) -> Self {
        OutboxSql {
            dialect,
            table: table.to_owned(),
            notify: false,
        }
    }

    /// The statements of a process with this configuration: its staging announces the commit
    /// to relays in other processes when it has no relay of its own (`relay.mode` external)
    /// and `relay.notify` is on. A process with an in-process relay wakes it itself (the hot
    /// path), so its commits pay for no NOTIFY.
    pub fn for_config(dialect: Dialect, config: &crate::Config) -> Self {
        OutboxSql {
            notify: dialect == Dialect::Postgres
                && config.relay.notify
                && config.relay.mode == crate::config::RelayMode::External,
            ..OutboxSql::new(dialect, &config.outbox.table_name)
        }
    }

    /// `(index name prefix, table as the index clause names it)`. PostgreSQL puts the schema
    /// on the table (`ON app.ojs_outbox`); SQLite on the index (`app.ojs_outbox_due ON ojs_outbox`).
    fn index_names(&self) -> (String, String) {
        let (schema, bare) = match self.table.split_once('.') {
            Some((schema, bare)) => (Some(schema), bare),
            None => (None, self.table.as_str()),
        };
        match (self.dialect, schema) {
            (Dialect::Sqlite, Some(schema)) => (format!("{schema}.{bare}"), bare.to_owned()),
            _ => (bare.to_owned(), self.table.clone()),
        }
    }

    /// The DDL, one statement per element (drivers such as sqlite3 run one at a time).
    /// Idempotent: `IF NOT EXISTS` throughout. On PostgreSQL every row is updated twice
    /// (claim, settle): free space on each page (fillfactor 70) lets those be in-page (HOT)
    /// updates, which measured 23k -> 29k jobs/s draining at batch 500 (docs/benchmarks.md).
    pub fn create_table(&self) -> Vec<String> {
        let t = &self.table;
        let (p, on) = self.index_names();
        if self.dialect == Dialect::Mysql {
            return self.create_table_mysql();
        }
        let table = match self.dialect {
            Dialect::Postgres => format!(
                "CREATE TABLE IF NOT EXISTS {t} (
    id           BIGSERIAL PRIMARY KEY,
    job_id       UUID NOT NULL UNIQUE,
    job_type     TEXT NOT NULL,
    job_args     JSONB NOT NULL,
    job_options  JSONB NOT NULL DEFAULT '{{}}',
    job_meta     JSONB NOT NULL DEFAULT '{{}}',
    tenant_id    TEXT,
    status       TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'failed', 'sent', 'dead')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    available_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_until TIMESTAMPTZ,
    lease_token  TEXT,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at      TIMESTAMPTZ,
    error        TEXT,
    order_key    TEXT,
    unique_key   TEXT
) WITH (fillfactor = 70)"
            ),
            Dialect::Sqlite => format!(
                "CREATE TABLE IF NOT EXISTS {t} (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id       TEXT NOT NULL UNIQUE,
    job_type     TEXT NOT NULL,
    job_args     TEXT NOT NULL,
    job_options  TEXT NOT NULL DEFAULT '{{}}',
    job_meta     TEXT NOT NULL DEFAULT '{{}}',
    tenant_id    TEXT,
    status       TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'failed', 'sent', 'dead')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    available_at INTEGER NOT NULL DEFAULT ({SQLITE_NOW_MS}),
    locked_until INTEGER,
    lease_token  TEXT,
    created_at   INTEGER NOT NULL DEFAULT ({SQLITE_NOW_MS}),
    sent_at      INTEGER,
    error        TEXT,
    order_key    TEXT,
    unique_key   TEXT
)"
            ),
            Dialect::Mysql => unreachable!("create_table_mysql"),
        };
        let mut statements = vec![
            table,
            // The relay's claim scans only due rows, in id order.
            format!(
                "CREATE INDEX IF NOT EXISTS {p}_due ON {on} (id) WHERE status IN ('pending', 'failed')"
            ),
            format!("CREATE INDEX IF NOT EXISTS {p}_sent ON {on} (sent_at) WHERE status = 'sent'"),
            format!(
                "CREATE INDEX IF NOT EXISTS {p}_dead ON {on} (tenant_id, id) WHERE status = 'dead'"
            ),
        ];
        statements.extend(self.key_indexes());
        statements.extend(self.create_event_log());
        statements
    }

    /// MySQL and MariaDB: the table with its indexes in one statement (`CREATE INDEX IF NOT
    /// EXISTS` is MariaDB's only), the event log and the locks table. Each statement commits
    /// on its own (DDL commits implicitly) and is idempotent, so a migration stopped half-way
    /// completes when it runs again. Times are milliseconds since the epoch, as on SQLite; job
    /// ids are `CHAR(36)` text, whose order is a UUIDv7's time order on every version
    /// (MariaDB's `UUID` type reorders a UUID's bytes for version 1 until 11.7); the JSON
    /// columns are `LONGTEXT` (`JSON` is its alias on MariaDB; `TEXT` stops at 64 KiB).
    /// `utf8mb4_bin` compares tenants and keys byte for byte, as PostgreSQL and SQLite do.
    fn create_table_mysql(&self) -> Vec<String> {
        let t = &self.table;
        let (p, _) = self.index_names();
        let mut statements = vec![format!(
            "CREATE TABLE IF NOT EXISTS {t} (
    id              BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    job_id          CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    job_type        VARCHAR(255) NOT NULL,
    job_args        LONGTEXT NOT NULL,
    job_options     LONGTEXT NOT NULL DEFAULT ('{{}}'),
    job_meta        LONGTEXT NOT NULL DEFAULT ('{{}}'),
    tenant_id       VARCHAR(255),
    status          VARCHAR(16) CHARACTER SET ascii NOT NULL DEFAULT 'pending',
    attempts        INT NOT NULL DEFAULT 0,
    available_at    BIGINT NOT NULL DEFAULT ({MYSQL_NOW_MS}),
    locked_until    BIGINT,
    lease_token     VARCHAR(64),
    created_at      BIGINT NOT NULL DEFAULT ({MYSQL_NOW_MS}),
    sent_at         BIGINT,
    error           TEXT,
    order_key       VARCHAR(255),
    unique_key      VARCHAR(512),
    held            TINYINT AS (CASE WHEN status IN ('pending', 'failed') THEN 1 END) STORED,
    held_unique_key VARCHAR(512) AS (CASE WHEN status IN ('pending', 'failed') THEN unique_key END) STORED,
    CONSTRAINT {p}_status CHECK (status IN ('pending', 'failed', 'sent', 'dead')),
    UNIQUE KEY {p}_job_id (job_id),
    KEY {p}_due (held, id),
    KEY {p}_sent (status, sent_at),
    KEY {p}_dead (status, tenant_id, id),
    KEY {p}_order (order_key, id),
    UNIQUE KEY {p}_unique (held_unique_key)
) {MYSQL_TABLE_OPTIONS}"
        )];
        statements.extend(self.create_event_log());
        statements
    }

    /// MySQL and MariaDB: `<table>_locks`, one row per lock a transaction takes by writing it
    /// (`INSERT ... ON DUPLICATE KEY UPDATE` holds the row's lock until COMMIT): the event
    /// log's writers, and the ordering keys being staged.
    pub fn locks_table(&self) -> String {
        format!("{}_locks", self.table)
    }

    /// The indexes of `ordering_key` and `unique` (docs/relay.md#ordering, #uniqueness): the
    /// claim's "is there an older row of this key still held" probe, and the unique key of
    /// the jobs the outbox still holds (the staging INSERT's `ON CONFLICT` arbiter).
    fn key_indexes(&self) -> Vec<String> {
        let (p, on) = self.index_names();
        vec![
            format!(
                "CREATE INDEX IF NOT EXISTS {p}_order ON {on} (order_key, id) WHERE order_key IS NOT NULL AND status IN ('pending', 'failed', 'dead')"
            ),
            format!(
                "CREATE UNIQUE INDEX IF NOT EXISTS {p}_unique ON {on} (unique_key) WHERE {HELD}"
            ),
        ]
    }

    /// Brings a table created before `order_key` and `unique_key` existed up to date: the
    /// columns, then their indexes (`Store::upgrade_table` runs it once, when a column is
    /// missing; a nullable column without a default is a catalogue change on both databases).
    pub fn upgrade_table(&self) -> Vec<String> {
        let t = &self.table;
        if self.dialect == Dialect::Mysql {
            // Every MySQL table was created with them.
            return Vec::new();
        }
        let mut statements = vec![
            format!("ALTER TABLE {t} ADD COLUMN order_key TEXT"),
            format!("ALTER TABLE {t} ADD COLUMN unique_key TEXT"),
        ];
        statements.extend(self.key_indexes());
        statements
    }

    /// Reads nothing; fails when the table predates `order_key` and `unique_key`.
    pub fn check_key_columns(&self) -> String {
        format!("SELECT order_key, unique_key FROM {} LIMIT 0", self.table)
    }

    /// The event log of the table (`<table>_events`): one row per settlement (or relay or
    /// operator event), holding that moment's events as a JSON array (`events::EventLog`).
    /// `seq` only grows, in commit order (`lock_event_log`), so a reader's cursor is a `seq`.
    pub fn create_event_log(&self) -> Vec<String> {
        let log = self.event_log();
        let (p, on) = self.index_names();
        let index = format!("CREATE INDEX IF NOT EXISTS {p}_events_time ON {on}_events (time_ms)");
        match self.dialect {
            // One statement under the log's advisory lock: an application's migration and a
            // relay that creates the log for a table migrated before it may run at once, and
            // two concurrent CREATE ... IF NOT EXISTS can still collide in PostgreSQL's catalog.
            Dialect::Postgres => vec![format!(
                // A plain string literal, not `$$`: some drivers read `$` as a bind parameter
                // (Sequelize turns `$$` into `$`); nothing in the body has a quote.
                "DO 'BEGIN PERFORM {}; CREATE TABLE IF NOT EXISTS {log} (seq BIGSERIAL PRIMARY KEY, time_ms BIGINT NOT NULL, events TEXT NOT NULL); {index}; END'",
                self.lock_event_log().trim_start_matches("SELECT ")
            )],
            Dialect::Sqlite => vec![
                format!(
                    "CREATE TABLE IF NOT EXISTS {log} (seq INTEGER PRIMARY KEY AUTOINCREMENT, time_ms INTEGER NOT NULL, events TEXT NOT NULL)"
                ),
                index,
            ],
            Dialect::Mysql => vec![
                format!(
                    "CREATE TABLE IF NOT EXISTS {log} (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, time_ms BIGINT NOT NULL, \
                     events LONGTEXT NOT NULL, KEY {p}_events_time (time_ms)) {MYSQL_TABLE_OPTIONS}"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {} (lock_key VARCHAR(512) NOT NULL PRIMARY KEY) {MYSQL_TABLE_OPTIONS}",
                    self.locks_table()
                ),
            ],
        }
    }

    /// `<table>_events`.
    pub fn event_log(&self) -> String {
        format!("{}_events", self.table)
    }

    /// PostgreSQL: serializes the writers of the event log until their COMMIT, so that `seq`
    /// (taken after the lock) grows in commit order and no reader's cursor can pass a row
    /// that commits later. SQLite has one writer at a time anyway.
    pub fn lock_event_log(&self) -> String {
        if self.dialect == Dialect::Mysql {
            return format!(
                "INSERT INTO {} (lock_key) VALUES ('events') ON DUPLICATE KEY UPDATE lock_key = lock_key",
                self.locks_table()
            );
        }
        // FNV-1a of the log's name: the advisory lock's key.
        let key = self
            .event_log()
            .bytes()
            .fold(0xcbf29ce484222325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
            }) as i64;
        format!("SELECT pg_advisory_xact_lock({key})")
    }

    /// Appends one row: parameters `time_ms`, `events` (text).
    pub fn append_events(&self) -> String {
        let (a, b) = (self.param(1), self.param(2));
        format!(
            "INSERT INTO {} (time_ms, events) VALUES ({a}, {b})",
            self.event_log()
        )
    }

    /// The same with the values in the text, for a message that carries its COMMIT
    /// (`settle_sent_and_commit_pg`). `events` is JSON: quotes doubled, no NUL (JSON escapes it).
    pub fn append_events_literal(&self, time_ms: i64, events: &str) -> String {
        format!(
            "{}; INSERT INTO {} (time_ms, events) VALUES ({time_ms}, '{}')",
            self.lock_event_log(),
            self.event_log(),
            events.replace('\'', "''")
        )
    }

    /// Rows after a cursor, in order: parameters `seq`, limit. Returns `seq, time_ms, events`.
    pub fn events_after(&self) -> String {
        let (a, b) = (self.param(1), self.param(2));
        format!(
            "SELECT seq, time_ms, events FROM {} WHERE seq > {a} ORDER BY seq LIMIT {b}",
            self.event_log()
        )
    }

    /// The cursor just before the first row at or after a time (ms): parameter `time_ms`.
    pub fn events_cursor_at(&self) -> String {
        let a = self.param(1);
        format!(
            "SELECT COALESCE(MIN(seq) - 1, (SELECT COALESCE(MAX(seq), 0) FROM {log})) FROM {log} WHERE time_ms >= {a}",
            log = self.event_log()
        )
    }

    /// Deletes the log's rows older than a cutoff (ms): parameter `time_ms`.
    pub fn prune_events(&self) -> String {
        let a = self.param(1);
        format!("DELETE FROM {} WHERE time_ms < {a}", self.event_log())
    }

    /// The staging INSERT for `jobs`, in as few statements as the parameter limits allow
    /// (one for up to `MAX_ROWS_PER_INSERT` jobs). Runs inside the host's transaction.
    pub fn insert(&self, placeholder: Placeholder, jobs: &[PreparedJob]) -> Vec<Statement> {
        self.insert_jobs(placeholder, jobs.to_vec()).1
    }

    /// `insert` taking the jobs: their texts move into the parameters instead of being copied
    /// (a bulk's largest cost after parsing). Returns the job ids, in order, and the statements.
    ///
    /// Plain jobs go in multi-row INSERTs. A job with an ordering key or a unique key gets a
    /// statement of its own ([`insert_keyed`](Self::insert_keyed)), in list order between them,
    /// so ids still follow the list. On PostgreSQL the ordering keys of the call are locked
    /// first ([`lock_order_keys`](Self::lock_order_keys)).
    pub fn insert_jobs(
        &self,
        placeholder: Placeholder,
        jobs: Vec<PreparedJob>,
    ) -> (Vec<String>, Vec<Statement>) {
        let mut ids = Vec::with_capacity(jobs.len());
        let mut statements = Vec::with_capacity(jobs.len().div_ceil(MAX_ROWS_PER_INSERT));
        let literals = jobs.len() > 1;
        if let Some(lock) = self.lock_order_keys(placeholder, &jobs) {
            statements.push(lock);
        }
        let keyed = |job: &PreparedJob| job.order_key.is_some() || job.unique.is_some();
        let mut any_keyed = false;
        let mut jobs = jobs.into_iter().peekable();
        while let Some(job) = jobs.peek() {
            if keyed(job) {
                let job = jobs.next().expect("peeked");
                any_keyed = true;
                statements.extend(self.insert_keyed(placeholder, job, &mut ids));
                continue;
            }
            let mut plain = Vec::new();
            let mut bytes = 0;
            while let Some(job) = jobs.next_if(|job| !keyed(job)) {
                bytes += job.args_json.len() + job.options_json.len() + job.meta_json.len();
                plain.push(job);
                if plain.len() == MAX_ROWS_PER_INSERT
                    || (self.dialect == Dialect::Mysql && bytes >= MYSQL_MAX_INSERT_BYTES)
                {
                    break;
                }
            }
            statements.push(self.insert_chunk(placeholder, plain.into_iter(), literals, &mut ids));
        }
        if any_keyed && self.notify {
            statements.push(Statement {
                sql: self.notify_sql(),
                params: Vec::new(),
                returns: None,
            });
        }
        (ids, statements)
    }

    /// `SELECT pg_notify(...)`: the wake-up of separate relays (`OutboxSql::notify`).
    fn notify_sql(&self) -> String {
        // The table name is a checked identifier (`validate_table_name`): no quote in it.
        format!("SELECT pg_notify('{STAGED_CHANNEL}', '{}')", self.table)
    }

    /// PostgreSQL: one statement that takes a transaction-level advisory lock on each ordering
    /// key of `jobs`, in sorted order, before their rows get their ids. Two transactions
    /// staging the same key run one after the other from here to COMMIT, so the ids of a key
    /// follow the order in which its transactions commit, which is the order the relay sends
    /// them in. SQLite needs none: its writers are serialized from first write to COMMIT.
    /// One parameter: the keys as a JSON array.
    pub fn lock_order_keys(
        &self,
        placeholder: Placeholder,
        jobs: &[PreparedJob],
    ) -> Option<Statement> {
        if self.dialect == Dialect::Sqlite {
            return None;
        }
        let mut keys: Vec<&str> = jobs
            .iter()
            .filter_map(|job| job.order_key.as_deref())
            .collect();
        if keys.is_empty() {
            return None;
        }
        keys.sort_unstable();
        keys.dedup();
        if self.dialect == Dialect::Mysql {
            // A row of `<table>_locks` per key, written in sorted order (so two transactions
            // cannot deadlock on them) and held until COMMIT.
            let mut sql = format!("INSERT INTO {} (lock_key) VALUES ", self.locks_table());
            for index in 0..keys.len() {
                sql.push_str(if index == 0 { "(" } else { ", (" });
                placeholder.write(&mut sql, index + 1);
                sql.push(')');
            }
            sql.push_str(" ON DUPLICATE KEY UPDATE lock_key = lock_key");
            return Some(Statement {
                sql,
                params: keys
                    .iter()
                    .map(|key| Some(format!("order:{key}")))
                    .collect(),
                returns: None,
            });
        }
        let mut sql = format!(
            "SELECT pg_advisory_xact_lock(hashtextextended(ojs_key, {})) FROM (SELECT ojs_key FROM jsonb_array_elements_text(CAST(",
            self.order_lock_seed()
        );
        placeholder.write(&mut sql, 1);
        sql.push_str(" AS jsonb)) AS ojs_key ORDER BY ojs_key) AS ojs_keys");
        Some(Statement {
            sql,
            params: vec![Some(serde_json::Value::from(keys).to_string())],
            returns: None,
        })
    }

    /// The seed of the ordering-key locks' hashes: FNV-1a of the table's name, so two outbox
    /// tables' keys do not share locks.
    fn order_lock_seed(&self) -> i64 {
        self.table.bytes().fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
        }) as i64
    }

    /// One job with an ordering key or a unique key: the eight columns. With a unique key, the
    /// INSERT meets a held job of the same key (pending or failed) in `ON CONFLICT` and never
    /// fails, so the host's transaction stays usable on PostgreSQL; it returns the id of the
    /// job that holds the key ([`held_outcome`] says what that means for the call):
    /// - `reject`, `ignore`: the held row is left as it is (touched only to return it);
    /// - `replace`: the staged job takes the held row (its id, args, options, meta), so the
    ///   held job is never sent;
    /// - `replace_except_schedule`: the held job keeps its id and options and takes the new
    ///   args and meta.
    ///
    /// A held row that a SQLite relay is sending (under a lease) is not replaced: no row comes
    /// back. On PostgreSQL the statement waits for the relay's claim to settle.
    ///
    /// MySQL and MariaDB: `ON DUPLICATE KEY UPDATE` meets the held row, and a second statement
    /// reads the id of the job holding the key (MySQL has no `RETURNING`); a relay's claim
    /// holds its rows by their locks, so the INSERT waits for it as on PostgreSQL.
    pub fn insert_keyed(
        &self,
        placeholder: Placeholder,
        job: PreparedJob,
        ids: &mut Vec<String>,
    ) -> Vec<Statement> {
        if self.dialect == Dialect::Mysql {
            return self.insert_keyed_mysql(placeholder, job, ids);
        }
        let (uuid, json) = match self.dialect {
            Dialect::Postgres => (("CAST(", " AS uuid)"), ("CAST(", " AS jsonb)")),
            _ => (("", ""), ("", "")),
        };
        let t = &self.table;
        let mut sql = format!("INSERT INTO {t} ({INSERT_COLUMNS}, order_key, unique_key) VALUES (");
        let wraps = [
            uuid,
            ("", ""),
            json,
            json,
            json,
            ("", ""),
            ("", ""),
            ("", ""),
        ];
        for (index, wrap) in wraps.iter().enumerate() {
            if index > 0 {
                sql.push_str(", ");
            }
            sql.push_str(wrap.0);
            placeholder.write(&mut sql, index + 1);
            sql.push_str(wrap.1);
        }
        sql.push(')');
        let returns = job.unique.as_ref().map(|unique| {
            let (excluded, now) = match self.dialect {
                Dialect::Postgres => ("EXCLUDED", "now()"),
                _ => ("excluded", SQLITE_NOW_MS),
            };
            let bare = self.bare_table();
            let not_in_flight = format!(" WHERE {bare}.locked_until IS NULL OR {bare}.locked_until <= {now}");
            let set = match unique.on_conflict {
                OnConflict::Reject | OnConflict::Ignore => {
                    format!("unique_key = {excluded}.unique_key")
                }
                OnConflict::Replace => format!(
                    "job_id = {excluded}.job_id, job_type = {excluded}.job_type, job_args = {excluded}.job_args, \
                     job_options = {excluded}.job_options, job_meta = {excluded}.job_meta, tenant_id = {excluded}.tenant_id, \
                     order_key = {excluded}.order_key, attempts = 0, available_at = {now}, error = NULL{not_in_flight}"
                ),
                OnConflict::ReplaceExceptSchedule => format!(
                    "job_args = {excluded}.job_args, job_meta = {excluded}.job_meta{not_in_flight}"
                ),
            };
            let returned = match self.dialect {
                Dialect::Postgres => "job_id::text",
                _ => "job_id",
            };
            sql.push_str(&format!(
                " ON CONFLICT (unique_key) WHERE {HELD} DO UPDATE SET {set} RETURNING {returned}"
            ));
            Returns::new(ids.len(), &job.job_id, unique.on_conflict)
        });
        ids.push(job.job_id.clone());
        vec![Statement {
            sql,
            params: keyed_params(job),
            returns,
        }]
    }

    fn insert_keyed_mysql(
        &self,
        placeholder: Placeholder,
        job: PreparedJob,
        ids: &mut Vec<String>,
    ) -> Vec<Statement> {
        let t = &self.table;
        let mut sql = format!("INSERT INTO {t} ({INSERT_COLUMNS}, order_key, unique_key) VALUES (");
        for index in 1..=8 {
            if index > 1 {
                sql.push_str(", ");
            }
            placeholder.write(&mut sql, index);
        }
        sql.push(')');
        let Some(unique) = job.unique.clone() else {
            ids.push(job.job_id.clone());
            return vec![Statement {
                sql,
                params: keyed_params(job),
                returns: None,
            }];
        };
        let set = match unique.on_conflict {
            OnConflict::Reject | OnConflict::Ignore => "unique_key = unique_key".to_owned(),
            OnConflict::Replace => format!(
                "job_id = VALUES(job_id), job_type = VALUES(job_type), job_args = VALUES(job_args), \
                 job_options = VALUES(job_options), job_meta = VALUES(job_meta), tenant_id = VALUES(tenant_id), \
                 order_key = VALUES(order_key), attempts = 0, available_at = {MYSQL_NOW_MS}, error = NULL"
            ),
            OnConflict::ReplaceExceptSchedule => {
                "job_args = VALUES(job_args), job_meta = VALUES(job_meta)".to_owned()
            }
        };
        sql.push_str(&format!(" ON DUPLICATE KEY UPDATE {set}"));
        // A locking read: it sees the row the INSERT met even when it committed after this
        // transaction's snapshot, and that row is already locked by the INSERT.
        let mut held = format!("SELECT job_id FROM {t} WHERE held_unique_key = ");
        placeholder.write(&mut held, 1);
        held.push_str(" FOR UPDATE");
        let returns = Returns::new(ids.len(), &job.job_id, unique.on_conflict);
        ids.push(job.job_id.clone());
        vec![
            Statement {
                sql,
                params: keyed_params(job),
                returns: None,
            },
            Statement {
                sql: held,
                params: vec![Some(unique.key)],
                returns: Some(returns),
            },
        ]
    }

    /// In a bulk (`literals`), empty options/meta and a missing tenant are written as literals:
    /// half the parameters for a typical row, which the host driver binds (and Django rewrites)
    /// one by one. A single row keeps all six, so its text is the same for every job.
    fn insert_chunk(
        &self,
        placeholder: Placeholder,
        jobs: impl Iterator<Item = PreparedJob>,
        literals: bool,
        ids: &mut Vec<String>,
    ) -> Statement {
        let (uuid, json) = match self.dialect {
            Dialect::Postgres => (("CAST(", " AS uuid)"), ("CAST(", " AS jsonb)")),
            _ => (("", ""), ("", "")),
        };
        // A data-modifying WITH runs to completion whatever its SELECT reads; the NOTIFY is
        // queued in the host's transaction and delivered only if it commits (FA-001), once per
        // transaction however many statements staged (PostgreSQL folds equal notifications).
        let mut sql = if self.notify {
            format!(
                "WITH staged AS (INSERT INTO {} ({INSERT_COLUMNS}) VALUES ",
                self.table
            )
        } else {
            format!("INSERT INTO {} ({INSERT_COLUMNS}) VALUES ", self.table)
        };
        let mut params = Vec::new();
        let mut index = 0;
        let mut param = |sql: &mut String, wrap: (&str, &str)| {
            index += 1;
            sql.push_str(wrap.0);
            placeholder.write(sql, index);
            sql.push_str(wrap.1);
        };
        for (row, job) in jobs.enumerate() {
            sql.push_str(if row == 0 { "(" } else { ", (" });
            param(&mut sql, uuid);
            sql.push_str(", ");
            param(&mut sql, ("", ""));
            sql.push_str(", ");
            param(&mut sql, json);
            ids.push(job.job_id.clone());
            params.push(Some(job.job_id));
            params.push(Some(job.job_type));
            params.push(Some(job.args_json));
            for text in [job.options_json, job.meta_json] {
                if literals && text == "{}" {
                    sql.push_str(", '{}'");
                } else {
                    sql.push_str(", ");
                    param(&mut sql, json);
                    params.push(Some(text));
                }
            }
            match job.tenant_id {
                None if literals => sql.push_str(", NULL)"),
                tenant => {
                    sql.push_str(", ");
                    param(&mut sql, ("", ""));
                    sql.push(')');
                    params.push(tenant);
                }
            }
        }
        if self.notify {
            sql.push_str(") ");
            sql.push_str(&self.notify_sql());
        }
        Statement {
            sql,
            params,
            returns: None,
        }
    }

    /// One row by its job id, for a host reading through its own connection (so it sees the
    /// rows its open transaction staged): `job_type, job_args, status, attempts, error,
    /// created_at_ms, job_meta`, the same types in both dialects (texts, integers;
    /// `created_at_ms` milliseconds since the epoch). One parameter: the job id. Encrypted args
    /// open with `job_meta` (`Bridge::open_args`).
    pub fn select_job(&self, placeholder: Placeholder) -> String {
        let (id, args, created, meta) = match self.dialect {
            Dialect::Postgres => (
                ("CAST(", " AS uuid)"),
                "job_args::text",
                "CAST(EXTRACT(EPOCH FROM created_at) * 1000 AS bigint)",
                "job_meta::text",
            ),
            _ => (("", ""), "job_args", "created_at", "job_meta"),
        };
        let mut sql = format!(
            "SELECT job_type, {args}, status, attempts, error, {created}, {meta} FROM {} WHERE job_id = {}",
            self.table, id.0
        );
        placeholder.write(&mut sql, 1);
        sql.push_str(id.1);
        sql
    }

    fn now(&self) -> &'static str {
        match self.dialect {
            Dialect::Postgres => "now()",
            Dialect::Sqlite => SQLITE_NOW_MS,
            Dialect::Mysql => MYSQL_NOW_MS,
        }
    }

    /// `COUNT(*)`, read as an `i64` in every dialect.
    fn count_all(&self) -> &'static str {
        match self.dialect {
            Dialect::Postgres => "COUNT(*)::bigint",
            _ => "COUNT(*)",
        }
    }

    /// Ms since the oldest `created_at` of the rows aggregated; 0 when there are none.
    fn oldest_age_ms(&self) -> String {
        match self.dialect {
            Dialect::Postgres => {
                "COALESCE(FLOOR(EXTRACT(EPOCH FROM (now() - MIN(created_at))) * 1000), 0)::bigint"
                    .to_owned()
            }
            _ => format!("COALESCE({} - MIN(created_at), 0)", self.now()),
        }
    }

    /// Rows pending or failed, as each dialect's index on them reads it (MySQL: the generated
    /// `held` column).
    fn held_rows(&self) -> &'static str {
        match self.dialect {
            Dialect::Mysql => "held = 1",
            _ => HELD,
        }
    }

    /// `now() + ms` in the dialect, where `ms` is an SQL expression yielding milliseconds.
    fn now_plus_ms(&self, ms: &str) -> String {
        match self.dialect {
            Dialect::Postgres => format!("now() + ({ms}) * interval '1 millisecond'"),
            _ => format!("({} + ({ms}))", self.now()),
        }
    }

    /// The rows a claim may take: pending or failed, due, and under no live lease (one a
    /// relay of an earlier version wrote is still respected on PostgreSQL).
    ///
    /// A row with an ordering key is claimable only at the head of its key: while an older row
    /// of the same key is pending, failed (waiting for its retry) or dead (until an operator
    /// replays or purges it), it waits. A claim holds the head, which stays pending, so one job
    /// per key is in flight across every relay.
    fn claimable(&self) -> String {
        let now = self.now();
        let t = self.bare_table();
        // MySQL: the generated column of the index that finds them in id order.
        let held = if self.dialect == Dialect::Mysql {
            "held = 1 AND "
        } else {
            ""
        };
        format!(
            "{held}status IN ('pending', 'failed') AND available_at <= {now} AND (locked_until IS NULL OR locked_until <= {now}) \
             AND (order_key IS NULL OR NOT EXISTS (SELECT 1 FROM {} ojs_head WHERE ojs_head.order_key = {t}.order_key \
             AND ojs_head.id < {t}.id AND ojs_head.status IN ('pending', 'failed', 'dead')))",
            self.table
        )
    }

    /// Why the table's name is too long for this dialect, if it is: every name derived from
    /// it must fit in the dialect's identifiers, and the longest is its event log's index,
    /// `<table>_events_time`. MySQL and MariaDB refuse identifiers over 64 characters;
    /// PostgreSQL silently cuts them at 63, so that a cut index name could equal another
    /// relation's and its `CREATE INDEX IF NOT EXISTS` would create nothing.
    pub fn name_too_long(&self) -> Option<String> {
        let bare = self.bare_table();
        let (database, limit) = match self.dialect {
            Dialect::Mysql => ("MySQL and MariaDB", 64),
            Dialect::Postgres => ("PostgreSQL", 63),
            Dialect::Sqlite => return None,
        };
        let most = limit - LONGEST_DERIVED_SUFFIX.len();
        (bare.len() > most).then(|| {
            format!(
                "{bare:?} is {} characters; on {database} an outbox table's name has at most {most} (its index {bare}{LONGEST_DERIVED_SUFFIX} must fit in {limit})",
                bare.len()
            )
        })
    }

    /// The table's name without its schema: how a statement refers to the row it scans.
    fn bare_table(&self) -> &str {
        self.table.rsplit('.').next().unwrap_or(&self.table)
    }

    /// SQLite: claims due rows in one statement that puts a lease on them. Parameters: lease
    /// token, lease ms, limit, then either skip-recent ms (`by_ids == false`) or the job ids
    /// as a JSON array text. Returns
    /// `id, job_id, job_type, job_args, job_options, job_meta, attempts`, and whether the row
    /// has an ordering key.
    pub fn claim_sqlite(&self, by_ids: bool) -> String {
        debug_assert_eq!(self.dialect, Dialect::Sqlite);
        let t = &self.table;
        let now = self.now();
        let due = self.claimable();
        let filter = if by_ids {
            "job_id IN (SELECT value FROM json_each(?4))".to_owned()
        } else {
            // A keyed row is not left to the hot path: its successor is due when the head
            // settles, when no commit announces it.
            format!("(created_at <= {now} - ?4 OR order_key IS NOT NULL)")
        };
        format!(
            "UPDATE {t} SET locked_until = {now} + ?2, lease_token = ?1 \
             WHERE id IN (SELECT id FROM {t} WHERE {due} AND {filter} ORDER BY id LIMIT ?3) \
             RETURNING id, job_id, job_type, job_args, job_options, job_meta, attempts, order_key IS NOT NULL"
        )
    }

    /// PostgreSQL: opens the claim's transaction and locks up to `limit` due rows
    /// `FOR UPDATE SKIP LOCKED`, in one simple-protocol message (`BEGIN; SELECT ...`): one
    /// round trip, where sqlx sends a BEGIN and waits for it before any statement. The locks
    /// hold the rows until the settlement commits, so the claim writes nothing. Its values
    /// are written into the text, and only values that cannot carry SQL: a count, a number
    /// of milliseconds, UUIDs formatted here. Returns the columns of `claim_sqlite` (but its
    /// last), `ctid` as text (where the locked row lies, for `settle_sent_and_commit_pg`), and
    /// whether the row has an ordering key.
    pub fn begin_and_claim_pg(&self, limit: usize, filter: ClaimFilter<'_>) -> String {
        debug_assert_eq!(self.dialect, Dialect::Postgres);
        let t = &self.table;
        let due = self.claimable();
        let filter = self.claim_filter(filter);
        format!(
            "BEGIN; SELECT id, job_id::text, job_type, job_args::text, job_options::text, job_meta::text, attempts, ctid::text, order_key IS NOT NULL \
             FROM {t} WHERE {due} AND {filter} ORDER BY id LIMIT {limit} FOR UPDATE SKIP LOCKED"
        )
    }

    /// The claim's filter, its values in the text (a count, milliseconds, UUIDs formatted here).
    fn claim_filter(&self, filter: ClaimFilter<'_>) -> String {
        match filter {
            ClaimFilter::Ids(ids) => {
                let ids: Vec<String> = ids.iter().map(|id| format!("'{id}'")).collect();
                match self.dialect {
                    Dialect::Postgres => format!("job_id = ANY(ARRAY[{}]::uuid[])", ids.join(",")),
                    _ => format!("job_id IN ({})", ids.join(",")),
                }
            }
            ClaimFilter::OlderThanMs(ms) => format!(
                "(created_at <= {} OR order_key IS NOT NULL)",
                match self.dialect {
                    Dialect::Postgres => format!("now() - {ms} * interval '1 millisecond'"),
                    _ => format!("{} - {ms}", self.now()),
                }
            ),
            ClaimFilter::OlderThanMsAfter { ms, after_id } => format!(
                "id > {after_id} AND {}",
                self.claim_filter(ClaimFilter::OlderThanMs(ms))
            ),
        }
    }

    /// MySQL and MariaDB, a claim's first step: the ids of the first due rows, a plain read that
    /// locks nothing: a window of `MYSQL_CLAIM_WINDOW` claims' worth, since rows that other
    /// claims hold (this relay's prefetched next one, other relays') are among them and are
    /// skipped by the second step. A locking read through a secondary index keeps the lock of each index
    /// entry it looked at, even one whose row it then skips as locked by another relay; a
    /// relay's settlement, which rewrites those entries, would then wait for a claim that a
    /// relay holds while it waits for that settlement (InnoDB cannot see that cycle). So the
    /// rows are found here and locked by a primary-key range ([`claim_mysql`](Self::claim_mysql)).
    pub fn claim_candidates_mysql(&self, limit: usize, filter: ClaimFilter<'_>) -> String {
        debug_assert_eq!(self.dialect, Dialect::Mysql);
        format!(
            "SELECT id FROM {} WHERE {} AND {} ORDER BY id LIMIT {}",
            self.table,
            self.claimable(),
            self.claim_filter(filter),
            limit * MYSQL_CLAIM_WINDOW
        )
    }

    /// MySQL and MariaDB, a claim's second step: locks up to `limit` due rows among the
    /// primary keys `first..=last` (the first step's window), `FOR UPDATE SKIP LOCKED` by a
    /// primary-key range, in the claim's transaction (opened by the store), which holds them
    /// until the settlement commits, as on PostgreSQL. A row another claim holds is skipped and
    /// a row no longer due is let go at once (READ COMMITTED); the subquery of `claimable`
    /// takes no lock (a locking read's clause does not reach a nested subquery, which reads
    /// the last committed state). Returns the columns of `claim_sqlite`.
    pub fn claim_mysql(
        &self,
        first: i64,
        last: i64,
        limit: usize,
        filter: ClaimFilter<'_>,
    ) -> String {
        debug_assert_eq!(self.dialect, Dialect::Mysql);
        format!(
            "SELECT id, job_id, job_type, job_args, job_options, job_meta, attempts, order_key IS NOT NULL \
             FROM {} FORCE INDEX (PRIMARY) WHERE id BETWEEN {first} AND {last} AND {} AND {} \
             ORDER BY id LIMIT {limit} FOR UPDATE SKIP LOCKED",
            self.table,
            self.claimable(),
            self.claim_filter(filter)
        )
    }

    /// MySQL and MariaDB: marks the rows of a claim sent, named by their ids (integers the
    /// claim returned, written into the text), in the claim's transaction, by primary key only
    /// (see [`settle_mysql`](Self::settle_mysql)).
    pub fn settle_sent_mysql(&self, ids: &[i64]) -> String {
        format!(
            "UPDATE {} FORCE INDEX (PRIMARY) SET {} WHERE id IN ({})",
            self.table,
            self.sent_columns(),
            id_list(ids)
        )
    }

    /// MySQL and MariaDB: [`settle`](Self::settle) for the rows of these ids. Naming them, and
    /// forcing the primary key (on a small table the optimizer prefers a scan), makes the
    /// UPDATE read only them; a scan would wait for the rows other claims hold, this relay's
    /// prefetched next claim among them, which waits for this settlement (InnoDB cannot see
    /// that cycle: it lasts until `innodb_lock_wait_timeout`).
    pub fn settle_mysql(&self, ids: &[i64]) -> String {
        format!(
            "{} WHERE {}.id IN ({})",
            self.settle(),
            self.table,
            id_list(ids)
        )
    }

    /// Settles every row of one claim in one statement. Each row gets a new status (NULL keeps
    /// it: a release), an attempt increment, a retry delay (NULL keeps `available_at`) and an
    /// error text. SQLite: only rows still leased under `lease token` are touched (one JSON
    /// array of `[id, status, attempt, delay_ms, error]`, lease token). PostgreSQL: runs in the
    /// claim's transaction, whose locks hold the rows (ids bigint[], statuses text[], attempt
    /// increments int[], delays bigint[], errors text[]).
    pub fn settle(&self) -> String {
        let t = &self.table;
        let now = self.now();
        let available = self.now_plus_ms("u.delay_ms");
        // MySQL's multi-table UPDATE needs the table on each column it sets; PostgreSQL and
        // SQLite refuse it there.
        let c = if self.dialect == Dialect::Mysql {
            format!("{t}.")
        } else {
            String::new()
        };
        let set = format!(
            "{c}status = COALESCE(u.status, {t}.status), \
             {c}attempts = {t}.attempts + u.attempt, \
             {c}available_at = CASE WHEN u.delay_ms IS NULL THEN {t}.available_at ELSE {available} END, \
             {c}sent_at = CASE WHEN u.status = 'sent' THEN {now} ELSE {t}.sent_at END, \
             {c}error = CASE WHEN u.status = 'sent' THEN u.error ELSE COALESCE(u.error, {t}.error) END, \
             {c}locked_until = NULL, {c}lease_token = NULL"
        );
        match self.dialect {
            Dialect::Postgres => format!(
                "UPDATE {t} SET {set} \
                 FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[], $5::text[]) AS u(id, status, attempt, delay_ms, error) \
                 WHERE {t}.id = u.id"
            ),
            Dialect::Sqlite => format!(
                "UPDATE {t} SET {set} \
                 FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS status, \
                 json_extract(value, '$[2]') AS attempt, json_extract(value, '$[3]') AS delay_ms, \
                 json_extract(value, '$[4]') AS error FROM json_each(?1)) AS u \
                 WHERE {t}.id = u.id AND {t}.lease_token = ?2"
            ),
            // Runs in the claim's transaction, like PostgreSQL's; one parameter, SQLite's JSON
            // (`settle_mysql` adds the rows' ids).
            Dialect::Mysql => format!(
                "UPDATE {t} FORCE INDEX (PRIMARY) JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$[0]', status VARCHAR(16) PATH '$[1]', \
                 attempt INT PATH '$[2]', delay_ms BIGINT PATH '$[3]', error TEXT PATH '$[4]')) AS u \
                 ON {t}.id = u.id SET {set}"
            ),
        }
    }

    /// SQLite: settles a claim whose every row was delivered as is (no note, no attempt
    /// used), the common round: one JSON array of ids instead of `settle`'s per-row values,
    /// and the lease token.
    pub fn settle_sent_sqlite(&self) -> String {
        debug_assert_eq!(self.dialect, Dialect::Sqlite);
        let t = &self.table;
        format!(
            "UPDATE {t} SET {} WHERE id IN (SELECT value FROM json_each(?1)) AND lease_token = ?2",
            self.sent_columns()
        )
    }

    /// PostgreSQL: settles a claim whose every row was delivered as is and commits the
    /// claim's transaction, in one simple-protocol message. The rows are named by the
    /// `ctid`s the claim returned (its locks keep each row where it is, so a TID scan finds
    /// them without an index), written into the text; `None` if one is not a ctid's text.
    pub fn settle_sent_and_commit_pg(&self, ctids: &[&str]) -> Option<String> {
        debug_assert_eq!(self.dialect, Dialect::Postgres);
        let is_ctid = |c: &&str| {
            c.starts_with('(')
                && c.ends_with(')')
                && c.bytes().all(|b| b.is_ascii_digit() || b"(),".contains(&b))
        };
        if ctids.is_empty() || !ctids.iter().all(is_ctid) {
            return None;
        }
        let t = &self.table;
        let ctids: Vec<String> = ctids.iter().map(|c| format!("'{c}'")).collect();
        Some(format!(
            "UPDATE {t} SET {} WHERE ctid = ANY(ARRAY[{}]::tid[]); COMMIT",
            self.sent_columns(),
            ctids.join(",")
        ))
    }

    /// [`settle_sent_and_commit_pg`](Self::settle_sent_and_commit_pg) that also appends the
    /// round's events to the log, in the same transaction.
    pub fn settle_sent_log_and_commit_pg(
        &self,
        ctids: &[&str],
        time_ms: i64,
        events: &str,
    ) -> Option<String> {
        let settle = self.settle_sent_and_commit_pg(ctids)?;
        let update = settle.strip_suffix("; COMMIT")?;
        Some(format!(
            "{update}; {}; COMMIT",
            self.append_events_literal(time_ms, events)
        ))
    }

    fn sent_columns(&self) -> String {
        format!(
            "status = 'sent', sent_at = {}, error = NULL, locked_until = NULL, lease_token = NULL",
            self.now()
        )
    }

    /// Deletes up to a limit of `sent` rows older than the retention. Parameters: retention ms, limit.
    pub fn prune(&self) -> String {
        let t = &self.table;
        let cutoff = match self.dialect {
            Dialect::Postgres => "now() - $1 * interval '1 millisecond'".to_owned(),
            Dialect::Sqlite => format!("{SQLITE_NOW_MS} - ?1"),
            Dialect::Mysql => format!("{MYSQL_NOW_MS} - ?"),
        };
        let limit = self.param(2);
        if self.dialect == Dialect::Mysql {
            // MySQL can neither LIMIT an IN subquery nor read the table it deletes from.
            return format!(
                "DELETE FROM {t} WHERE status = 'sent' AND sent_at < {cutoff} ORDER BY id LIMIT {limit}"
            );
        }
        format!(
            "DELETE FROM {t} WHERE id IN (SELECT id FROM {t} WHERE status = 'sent' AND sent_at < {cutoff} ORDER BY id LIMIT {limit})"
        )
    }

    /// How many pending or failed rows wait behind a dead row of their ordering key.
    pub fn held_by_dead(&self) -> String {
        let (t, count) = (&self.table, self.count_all());
        format!(
            "SELECT {count} FROM {t} ojs_held WHERE ojs_held.order_key IS NOT NULL AND ojs_held.status IN ('pending', 'failed') \
             AND EXISTS (SELECT 1 FROM {t} ojs_dead WHERE ojs_dead.order_key = ojs_held.order_key \
             AND ojs_dead.id < ojs_held.id AND ojs_dead.status = 'dead')"
        )
    }

    /// Counts by status with the in-flight count (leases, SQLite) and the oldest row's age
    /// (ms). Returns `status, rows, in_flight, oldest_age_ms`. Each status is counted on its own
    /// index (the due rows', the dead rows', the sent rows' index-only on PostgreSQL), not by
    /// one GROUP BY over the table: the sent rows, kept for `relay.retention`, outnumber the
    /// rest, and `/metrics` reads this at every scrape.
    pub fn status_counts(&self) -> String {
        let (t, count, held) = (&self.table, self.count_all(), self.held_rows());
        let oldest = self.oldest_age_ms();
        let in_flight = match self.dialect {
            Dialect::Postgres => "COUNT(*) FILTER (WHERE locked_until > now())::bigint".to_owned(),
            Dialect::Sqlite => {
                format!("SUM(CASE WHEN locked_until > {SQLITE_NOW_MS} THEN 1 ELSE 0 END)")
            }
            // SUM is DECIMAL on MySQL.
            Dialect::Mysql => {
                format!("CAST(COALESCE(SUM(locked_until > {MYSQL_NOW_MS}), 0) AS SIGNED)")
            }
        };
        format!(
            "SELECT status, {count}, {in_flight}, {oldest} FROM {t} WHERE {held} GROUP BY status \
             UNION ALL SELECT 'dead', {count}, 0, 0 FROM {t} WHERE status = 'dead' \
             UNION ALL SELECT 'sent', {count}, 0, 0 FROM {t} WHERE status = 'sent'"
        )
    }

    /// Sent rows whose job the backend's unique policy refused (their note). Reads every sent
    /// row: for `status`, not for each `/metrics` scrape.
    pub fn unique_rejected_count(&self) -> String {
        let rejected = UNIQUE_REJECTED_NOTE;
        format!(
            "SELECT {} FROM {} WHERE status = 'sent' AND error LIKE '{rejected}%'",
            self.count_all(),
            self.table
        )
    }

    /// `(rows, oldest_age_ms)` over pending and failed rows.
    pub fn undelivered_summary(&self) -> String {
        format!(
            "SELECT {}, {} FROM {} WHERE {}",
            self.count_all(),
            self.oldest_age_ms(),
            self.table,
            self.held_rows()
        )
    }

    /// Mean ms from creation to delivery of rows sent in the last minute (the relay's lag).
    pub fn recent_lag(&self) -> String {
        let t = &self.table;
        match self.dialect {
            Dialect::Postgres => format!(
                "SELECT COALESCE(FLOOR(AVG(EXTRACT(EPOCH FROM (sent_at - created_at)) * 1000)), 0)::bigint \
                 FROM {t} WHERE status = 'sent' AND sent_at > now() - interval '1 minute'"
            ),
            Dialect::Sqlite => format!(
                "SELECT CAST(COALESCE(AVG(sent_at - created_at), 0) AS INTEGER) FROM {t} \
                 WHERE status = 'sent' AND sent_at > {SQLITE_NOW_MS} - 60000"
            ),
            Dialect::Mysql => format!(
                "SELECT CAST(COALESCE(AVG(sent_at - created_at), 0) AS SIGNED) FROM {t} \
                 WHERE status = 'sent' AND sent_at > {MYSQL_NOW_MS} - 60000"
            ),
        }
    }

    /// Parameter `index`. MySQL's `?` has no number: a statement of this dialect names each
    /// parameter once, in order.
    fn param(&self, index: usize) -> String {
        match self.dialect {
            Dialect::Postgres => format!("${index}"),
            Dialect::Sqlite => format!("?{index}"),
            Dialect::Mysql => "?".to_owned(),
        }
    }

    /// `(tenant IS NULL OR tenant_id = tenant)` on parameter 1.
    fn tenant_filter(&self) -> String {
        match self.dialect {
            Dialect::Postgres => "($1::text IS NULL OR tenant_id = $1::text)".to_owned(),
            Dialect::Sqlite => "(?1 IS NULL OR tenant_id = ?1)".to_owned(),
            // NULL-safe equality names the parameter once.
            Dialect::Mysql => "tenant_id <=> COALESCE(?, tenant_id)".to_owned(),
        }
    }

    fn created_ms(&self) -> &'static str {
        match self.dialect {
            Dialect::Postgres => "FLOOR(EXTRACT(EPOCH FROM created_at) * 1000)::bigint",
            _ => "created_at",
        }
    }

    /// Dead rows of one tenant (parameter 1, NULL = every tenant), oldest first, up to parameter 2.
    /// Returns `job_id, job_type, tenant_id, attempts, error, created_at_ms`.
    pub fn dead_list(&self) -> String {
        let job_id = if self.dialect == Dialect::Postgres {
            "job_id::text"
        } else {
            "job_id"
        };
        format!(
            "SELECT {job_id}, job_type, tenant_id, attempts, error, {} FROM {} WHERE status = 'dead' AND {} ORDER BY id LIMIT {}",
            self.created_ms(),
            self.table,
            self.tenant_filter(),
            self.param(2)
        )
    }

    /// Puts dead rows of one tenant (parameter 1, NULL = all) back to `pending` with fresh
    /// attempts. A replayed row gives up its unique key (a newer job may hold it by now): the
    /// operator asked for it to be sent, and the backend still judges it.
    pub fn dead_replay(&self) -> String {
        format!(
            "UPDATE {} SET status = 'pending', attempts = 0, available_at = {}, error = NULL, locked_until = NULL, lease_token = NULL, unique_key = NULL \
             WHERE status = 'dead' AND {}",
            self.table,
            self.now(),
            self.tenant_filter()
        )
    }

    /// Deletes dead rows of one tenant (parameter 1, NULL = all).
    pub fn dead_purge(&self) -> String {
        format!(
            "DELETE FROM {} WHERE status = 'dead' AND {}",
            self.table,
            self.tenant_filter()
        )
    }

    /// Rows by job id (parameter 1: text[] on Postgres, JSON array text on SQLite).
    /// Returns `job_id, status, attempts, error`.
    pub fn rows_by_job_id(&self) -> String {
        match self.dialect {
            Dialect::Postgres => format!(
                "SELECT job_id::text, status, attempts, error FROM {} WHERE job_id = ANY(CAST($1 AS uuid[]))",
                self.table
            ),
            Dialect::Sqlite => format!(
                "SELECT job_id, status, attempts, error FROM {} WHERE job_id IN (SELECT value FROM json_each(?1))",
                self.table
            ),
            Dialect::Mysql => format!(
                "SELECT job_id, status, attempts, error FROM {} WHERE job_id IN ({})",
                self.table,
                mysql_json_ids()
            ),
        }
    }

    /// Removes the table and, with it, its indexes.
    /// Drops the table; on PostgreSQL its event log too (SQLite drops one table per
    /// statement: there the log stays, empty of anything the table could still refer to).
    pub fn drop_table(&self) -> String {
        match self.dialect {
            Dialect::Postgres => {
                format!(
                    "DROP TABLE IF EXISTS {}, {}, {}",
                    self.table,
                    self.event_log(),
                    self.relay_registry()
                )
            }
            Dialect::Sqlite => format!("DROP TABLE IF EXISTS {}", self.table),
            Dialect::Mysql => format!(
                "DROP TABLE IF EXISTS {}, {}, {}, {}",
                self.table,
                self.event_log(),
                self.relay_registry(),
                self.locks_table()
            ),
        }
    }

    /// Fails when the table does not exist, and when it lacks one of the outbox's columns
    /// (the database's error names the first one missing); reads no row.
    pub fn check_table(&self) -> String {
        format!("SELECT {OUTBOX_COLUMNS} FROM {} LIMIT 0", self.table)
    }

    /// Dead rows of one tenant (parameter 1, NULL = all).
    pub fn dead_count(&self) -> String {
        format!(
            "SELECT COUNT(*) FROM {} WHERE status = 'dead' AND {}",
            self.table,
            self.tenant_filter()
        )
    }

    pub fn count_rows(&self) -> String {
        format!("SELECT COUNT(*) FROM {}", self.table)
    }
}

mod dashboard;
mod relays;

/// Row ids as the text of an SQL list.
fn id_list(ids: &[i64]) -> String {
    let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
    ids.join(",")
}

/// The parameters of `insert_keyed`'s INSERT.
fn keyed_params(job: PreparedJob) -> Vec<Option<String>> {
    vec![
        Some(job.job_id),
        Some(job.job_type),
        Some(job.args_json),
        Some(job.options_json),
        Some(job.meta_json),
        job.tenant_id,
        job.order_key,
        job.unique.map(|unique| unique.key),
    ]
}

/// MySQL: the job ids of one parameter, a JSON array's text, as a subquery.
fn mysql_json_ids() -> &'static str {
    "SELECT ojs_ids.job_id FROM JSON_TABLE(?, '$[*]' COLUMNS (job_id CHAR(36) CHARACTER SET ascii PATH '$')) AS ojs_ids"
}

/// Transaction control, for hosts whose driver has none (node-postgres): the statements the
/// Rust-native `OutboxTransaction` runs too, the same in both dialects. `step`: `begin`,
/// `commit`, `rollback`, `savepoint`, `release`, `rollback_to`; `depth` names a savepoint
/// (`ojs_savepoint_<depth>`, 0 for the first). `None` for an unknown step.
pub fn transaction_sql(step: &str, depth: usize) -> Option<String> {
    let savepoint = format!("ojs_savepoint_{depth}");
    Some(match step {
        "begin" => "BEGIN".to_owned(),
        "commit" => "COMMIT".to_owned(),
        "rollback" => "ROLLBACK".to_owned(),
        "savepoint" => format!("SAVEPOINT {savepoint}"),
        "release" => format!("RELEASE SAVEPOINT {savepoint}"),
        "rollback_to" => format!("ROLLBACK TO SAVEPOINT {savepoint}"),
        _ => return None,
    })
}
