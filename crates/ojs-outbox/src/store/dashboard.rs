//! The dashboard's reads and dead-letter actions (`crate::dashboard`), each one statement of
//! `sql/dashboard.rs`, each scoped by a tenant (`None`: every tenant).

use serde::Serialize;
use sqlx::AssertSqlSafe;

use super::{Pool, Store};
use crate::error::Result;

/// What the rows listing is narrowed to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowFilter {
    pub tenant: Option<String>,
    pub status: Option<String>,
    pub job_type: Option<String>,
    pub queue: Option<String>,
    /// A UUID's text, checked by the caller.
    pub job_id: Option<String>,
    pub limit: i64,
}

/// A row as the dashboard lists it (no args, options or meta).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowSummary {
    pub job_id: String,
    pub job_type: String,
    pub queue: String,
    pub tenant_id: Option<String>,
    pub status: String,
    pub attempts: i32,
    pub error: Option<String>,
    pub created_at_ms: i64,
    pub sent_at_ms: Option<i64>,
}

/// One row in full; the JSON columns as stored (encrypted args stay encrypted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowDetail {
    #[serde(flatten)]
    pub summary: RowSummary,
    pub available_at_ms: i64,
    pub args: String,
    pub options: String,
    pub meta: String,
    pub order_key: Option<String>,
}

/// Rows by type, queue, tenant and status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowGroup {
    pub job_type: String,
    pub queue: String,
    pub tenant_id: Option<String>,
    pub status: String,
    pub rows: i64,
}

/// Rows sent in one minute, and their mean creation-to-delivery time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Minute {
    /// Milliseconds since the epoch at the minute's start.
    pub at_ms: i64,
    pub sent: i64,
    pub lag_ms: i64,
}

type SummaryTuple = (
    String,
    String,
    String,
    Option<String>,
    String,
    i32,
    Option<String>,
    i64,
    Option<i64>,
);

fn summary(t: SummaryTuple) -> RowSummary {
    RowSummary {
        job_id: t.0,
        job_type: t.1,
        queue: t.2,
        tenant_id: t.3,
        status: t.4,
        attempts: t.5,
        error: t.6,
        created_at_ms: t.7,
        sent_at_ms: t.8,
    }
}

impl Store {
    pub async fn dashboard_rows(&self, filter: &RowFilter) -> Result<Vec<RowSummary>> {
        let sql = self.sql.dashboard_rows();
        let rows: Vec<SummaryTuple> = on_pool!(&self.pool, |pool| sqlx::query_as(AssertSqlSafe(
            sql.clone()
        ))
        .bind(filter.tenant.as_deref())
        .bind(filter.status.as_deref())
        .bind(filter.job_type.as_deref())
        .bind(filter.queue.as_deref())
        .bind(filter.job_id.as_deref())
        .bind(filter.limit)
        .fetch_all(pool)
        .await?);
        Ok(rows.into_iter().map(summary).collect())
    }

    pub async fn dashboard_row(
        &self,
        tenant: Option<&str>,
        job_id: &str,
    ) -> Result<Option<RowDetail>> {
        type DetailTuple = (
            String,
            String,
            String,
            Option<String>,
            String,
            i32,
            Option<String>,
            i64,
            Option<i64>,
            i64,
            String,
            String,
            String,
            Option<String>,
        );
        let sql = self.sql.dashboard_row();
        let row: Option<DetailTuple> = on_pool!(&self.pool, |pool| sqlx::query_as(AssertSqlSafe(
            sql.clone()
        ))
        .bind(tenant)
        .bind(job_id)
        .fetch_optional(pool)
        .await?);
        Ok(row.map(|t| RowDetail {
            summary: summary((t.0, t.1, t.2, t.3, t.4, t.5, t.6, t.7, t.8)),
            available_at_ms: t.9,
            args: t.10,
            options: t.11,
            meta: t.12,
            order_key: t.13,
        }))
    }

    pub async fn dashboard_groups(&self, tenant: Option<&str>) -> Result<Vec<RowGroup>> {
        let (sql, binds) = self.sql.dashboard_groups();
        let rows: Vec<(String, String, Option<String>, String, i64)> =
            on_pool!(&self.pool, |pool| {
                let mut query = sqlx::query_as(AssertSqlSafe(sql.clone()));
                for _ in 0..binds {
                    query = query.bind(tenant);
                }
                query.fetch_all(pool).await?
            });
        Ok(rows
            .into_iter()
            .map(|(job_type, queue, tenant_id, status, rows)| RowGroup {
                job_type,
                queue,
                tenant_id,
                status,
                rows,
            })
            .collect())
    }

    /// `(status, rows, oldest_age_ms)` in the tenant's scope.
    pub async fn dashboard_counts(&self, tenant: Option<&str>) -> Result<Vec<(String, i64, i64)>> {
        let (sql, binds) = self.sql.dashboard_counts();
        Ok(on_pool!(&self.pool, |pool| {
            let mut query = sqlx::query_as(AssertSqlSafe(sql.clone()));
            for _ in 0..binds {
                query = query.bind(tenant);
            }
            query.fetch_all(pool).await?
        }))
    }

    pub async fn dashboard_minutes(&self, tenant: Option<&str>) -> Result<Vec<Minute>> {
        let sql = self.sql.dashboard_minutes();
        let rows: Vec<(i64, i64, i64)> = on_pool!(&self.pool, |pool| sqlx::query_as(
            AssertSqlSafe(sql.clone())
        )
        .bind(tenant)
        .fetch_all(pool)
        .await?);
        Ok(rows
            .into_iter()
            .map(|(minute, sent, lag_ms)| Minute {
                at_ms: minute * 60_000,
                sent,
                lag_ms,
            })
            .collect())
    }

    /// Puts the dead rows among `job_ids` back to `pending`; returns how many.
    pub async fn dead_replay_ids(&self, tenant: Option<&str>, job_ids: &[String]) -> Result<u64> {
        self.dead_ids_statement(self.sql.dead_replay_ids(), tenant, job_ids)
            .await
    }

    /// Deletes the dead rows among `job_ids`; returns how many.
    pub async fn dead_purge_ids(&self, tenant: Option<&str>, job_ids: &[String]) -> Result<u64> {
        self.dead_ids_statement(self.sql.dead_purge_ids(), tenant, job_ids)
            .await
    }

    async fn dead_ids_statement(
        &self,
        sql: String,
        tenant: Option<&str>,
        job_ids: &[String],
    ) -> Result<u64> {
        Ok(match &self.pool {
            Pool::Postgres(pool) => sqlx::query(AssertSqlSafe(sql))
                .bind(tenant)
                .bind(job_ids)
                .execute(pool)
                .await?
                .rows_affected(),
            Pool::Mysql(pool) => sqlx::query(AssertSqlSafe(sql))
                .bind(tenant)
                .bind(serde_json::to_string(job_ids).expect("strings serialize"))
                .execute(pool)
                .await?
                .rows_affected(),
            Pool::Sqlite(pool) => {
                let _running = crate::sqlite_fork::statement().await;
                let ids = serde_json::to_string(job_ids).expect("strings serialize");
                sqlx::query(AssertSqlSafe(sql))
                    .bind(tenant)
                    .bind(ids)
                    .execute(pool)
                    .await?
                    .rows_affected()
            }
        })
    }
}
