//! The dashboard's statements (`crate::dashboard`): read-only views of the table and the
//! dead-letter actions on chosen rows. Parameter 1 is always the tenant scope (NULL: every
//! tenant), so a tenant's dashboard cannot reach another tenant's rows (seed 003).

use super::{Dialect, OutboxSql, SQLITE_NOW_MS};

impl OutboxSql {
    fn job_id_text(&self) -> &'static str {
        match self.dialect {
            Dialect::Postgres => "job_id::text",
            _ => "job_id",
        }
    }

    fn queue_of_row(&self) -> &'static str {
        match self.dialect {
            Dialect::Postgres => "COALESCE(job_options->>'queue', 'default')",
            Dialect::Sqlite => "COALESCE(json_extract(job_options, '$.queue'), 'default')",
            Dialect::Mysql => {
                "COALESCE(JSON_UNQUOTE(JSON_EXTRACT(job_options, '$.queue')), 'default')"
            }
        }
    }

    fn ms_of(&self, column: &str) -> String {
        match self.dialect {
            Dialect::Postgres => format!("FLOOR(EXTRACT(EPOCH FROM {column}) * 1000)::bigint"),
            _ => column.to_owned(),
        }
    }

    /// `column` equal to parameter `index`, or any value when the parameter is NULL.
    fn optional_eq(&self, column: &str, index: usize) -> String {
        match self.dialect {
            Dialect::Mysql => format!("{column} <=> COALESCE(?, {column})"),
            _ => {
                let param = self.text_param(index);
                format!("({param} IS NULL OR {column} = {param})")
            }
        }
    }

    /// A text parameter that may be NULL, typed where PostgreSQL needs it.
    fn text_param(&self, index: usize) -> String {
        match self.dialect {
            Dialect::Postgres => format!("${index}::text"),
            Dialect::Sqlite => format!("?{index}"),
            Dialect::Mysql => "?".to_owned(),
        }
    }

    /// `job_id` equal to parameter `index` (a UUID's text; the caller checked its form).
    fn job_id_is(&self, index: usize) -> String {
        match self.dialect {
            Dialect::Postgres => format!("job_id = CAST(${index} AS uuid)"),
            Dialect::Sqlite => format!("job_id = ?{index}"),
            Dialect::Mysql => "job_id = ?".to_owned(),
        }
    }

    /// `job_id` among parameter 2 (text[] on PostgreSQL, a JSON array's text on SQLite).
    fn job_id_among(&self) -> String {
        match self.dialect {
            Dialect::Postgres => "job_id = ANY(CAST($2 AS uuid[]))".to_owned(),
            Dialect::Sqlite => "job_id IN (SELECT value FROM json_each(?2))".to_owned(),
            Dialect::Mysql => format!("job_id IN ({})", super::mysql_json_ids()),
        }
    }

    /// Rows, newest first, filtered by status (2), type (3), queue (4) and job id (5), up to
    /// parameter 6. Returns `job_id, job_type, queue, tenant_id, status, attempts, error,
    /// created_at_ms, sent_at_ms`.
    pub fn dashboard_rows(&self) -> String {
        let queue = self.queue_of_row();
        let (status, job_type, queue_is) = (
            self.optional_eq("status", 2),
            self.optional_eq("job_type", 3),
            self.optional_eq(queue, 4),
        );
        let id = match self.dialect {
            Dialect::Postgres => "($5::text IS NULL OR job_id = CAST($5::text AS uuid))".to_owned(),
            _ => self.optional_eq("job_id", 5),
        };
        format!(
            "SELECT {}, job_type, {queue}, tenant_id, status, attempts, error, {}, {} FROM {} \
             WHERE {} AND {status} AND {job_type} AND {queue_is} AND {id} \
             ORDER BY id DESC LIMIT {}",
            self.job_id_text(),
            self.ms_of("created_at"),
            self.ms_of("sent_at"),
            self.table,
            self.tenant_filter(),
            self.param(6),
        )
    }

    /// One row by job id (parameter 2), in the tenant's scope. Returns the columns of
    /// [`Self::dashboard_rows`], then `available_at_ms, job_args, job_options, job_meta,
    /// order_key`, the JSON columns as text.
    pub fn dashboard_row(&self) -> String {
        let json = |column: &str| match self.dialect {
            Dialect::Postgres => format!("{column}::text"),
            _ => column.to_owned(),
        };
        format!(
            "SELECT {}, job_type, {}, tenant_id, status, attempts, error, {}, {}, {}, {}, {}, {}, order_key \
             FROM {} WHERE {} AND {}",
            self.job_id_text(),
            self.queue_of_row(),
            self.ms_of("created_at"),
            self.ms_of("sent_at"),
            self.ms_of("available_at"),
            json("job_args"),
            json("job_options"),
            json("job_meta"),
            self.table,
            self.tenant_filter(),
            self.job_id_is(2),
        )
    }

    /// Rows not yet sent and dead rows by type, queue, tenant and status, the largest groups
    /// first (at most 200), and how many times the tenant is bound. Returns `job_type, queue,
    /// tenant_id, status, rows`. The waiting rows and the dead rows are read apart, each on its
    /// index (one `status IN` of the three matched neither partial index: a pass over the
    /// table, 490 ms with 2M sent rows on PostgreSQL).
    pub fn dashboard_groups(&self) -> (String, usize) {
        let (queue, t, tenant) = (self.queue_of_row(), &self.table, self.tenant_filter());
        let (held, count) = (self.held_rows(), self.count_all());
        let sql = format!(
            "SELECT job_type, queue, tenant_id, status, {count} FROM (\
             SELECT job_type, {queue} AS queue, tenant_id, status FROM {t} WHERE {held} AND {tenant} \
             UNION ALL SELECT job_type, {queue}, tenant_id, status FROM {t} WHERE status = 'dead' AND {tenant}\
             ) AS ojs_waiting GROUP BY job_type, queue, tenant_id, status ORDER BY {count} DESC LIMIT 200"
        );
        (sql, self.tenant_binds(2))
    }

    /// How many times a statement that uses `tenant_filter` `uses` times binds the tenant: once
    /// by number (`$1`, `?1`), or at each use (MySQL's `?`).
    fn tenant_binds(&self, uses: usize) -> usize {
        if self.dialect == Dialect::Mysql {
            uses
        } else {
            1
        }
    }

    /// Counts by status and the age of the oldest row of each, in the tenant's scope, and how
    /// many times the tenant is bound (MySQL's `?` names it once per use). Returns `status,
    /// rows, oldest_age_ms` (0 for `sent`). Each status is its own count, so each reads its
    /// index (PostgreSQL and SQLite: the partial indexes, the sent rows' index-only), not the
    /// whole table: sent rows are kept for `relay.retention` and outnumber the rest (2M of
    /// them: 126 ms against 670 ms for one GROUP BY over the table, PostgreSQL 15).
    pub fn dashboard_counts(&self) -> (String, usize) {
        let (oldest, count, held) = (self.oldest_age_ms(), self.count_all(), self.held_rows());
        let (t, tenant) = (&self.table, self.tenant_filter());
        let sql = format!(
            "SELECT status, {count}, {oldest} FROM {t} WHERE {held} AND {tenant} GROUP BY status \
             UNION ALL SELECT 'dead', {count}, {oldest} FROM {t} WHERE status = 'dead' AND {tenant} \
             UNION ALL SELECT 'sent', {count}, 0 FROM {t} WHERE status = 'sent' AND {tenant}"
        );
        (sql, self.tenant_binds(3))
    }

    /// Per minute of the last hour: the minute (ms since the epoch / 60000), rows sent, their
    /// mean creation-to-delivery time in ms. Reads the `sent_at` index; rows the relay pruned
    /// (`relay.retention`) are no longer counted.
    pub fn dashboard_minutes(&self) -> String {
        let (minute, lag, since) = match self.dialect {
            Dialect::Postgres => (
                "FLOOR(EXTRACT(EPOCH FROM sent_at) / 60)::bigint".to_owned(),
                "COALESCE(FLOOR(AVG(EXTRACT(EPOCH FROM (sent_at - created_at)) * 1000)), 0)::bigint"
                    .to_owned(),
                "now() - interval '1 hour'".to_owned(),
            ),
            Dialect::Sqlite => (
                "sent_at / 60000".to_owned(),
                "CAST(COALESCE(AVG(sent_at - created_at), 0) AS INTEGER)".to_owned(),
                format!("{SQLITE_NOW_MS} - 3600000"),
            ),
            // `/` and AVG are DECIMAL on MySQL.
            Dialect::Mysql => (
                "sent_at DIV 60000".to_owned(),
                "CAST(COALESCE(AVG(sent_at - created_at), 0) AS SIGNED)".to_owned(),
                format!("{} - 3600000", self.now()),
            ),
        };
        let count = self.count_all();
        format!(
            "SELECT {minute}, {count}, {lag} FROM {} WHERE status = 'sent' AND sent_at > {since} AND {} \
             GROUP BY 1 ORDER BY 1",
            self.table,
            self.tenant_filter()
        )
    }

    /// The dead rows among parameter 2's job ids back to `pending` with fresh attempts (as
    /// [`Self::dead_replay`] does for all of a tenant's).
    pub fn dead_replay_ids(&self) -> String {
        format!(
            "UPDATE {} SET status = 'pending', attempts = 0, available_at = {}, error = NULL, locked_until = NULL, lease_token = NULL, unique_key = NULL \
             WHERE status = 'dead' AND {} AND {}",
            self.table,
            self.now(),
            self.tenant_filter(),
            self.job_id_among(),
        )
    }

    /// Deletes the dead rows among parameter 2's job ids.
    pub fn dead_purge_ids(&self) -> String {
        format!(
            "DELETE FROM {} WHERE status = 'dead' AND {} AND {}",
            self.table,
            self.tenant_filter(),
            self.job_id_among(),
        )
    }
}
