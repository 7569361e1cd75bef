//! The relays' registry (`sql/relays.rs`): heartbeats written by each relay, read by the
//! dashboard.

use serde::Serialize;
use sqlx::AssertSqlSafe;

use super::{Pool, Store};
use crate::error::Result;

/// Who a relay is, for its heartbeat.
#[derive(Debug, Clone)]
pub struct RelayIdentity {
    pub relay_id: String,
    pub host: String,
    pub pid: i64,
    pub started_ms: i64,
}

/// A relay as its last heartbeat left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RelaySeen {
    pub relay_id: String,
    pub host: String,
    pub pid: i64,
    pub started_ms: i64,
    pub heartbeat_ms: i64,
    pub sent: i64,
}

/// A relay's row is forgotten an hour after its last heartbeat.
const FORGET_AFTER_MS: i64 = 3_600_000;

impl Store {
    /// Creates `<table>_relays` if needed (idempotent; when two relays race on PostgreSQL, the
    /// loser's error is ignored once the registry is there).
    pub async fn ensure_relay_registry(&self) -> Result<()> {
        let created = self.execute(&self.sql.create_relay_registry()).await;
        if let Err(error) = created
            && self.relays().await.is_err()
        {
            return Err(error);
        }
        Ok(())
    }

    /// Records a heartbeat at `now_ms`, and forgets relays silent for an hour.
    pub async fn relay_heartbeat(&self, me: &RelayIdentity, now_ms: i64, sent: i64) -> Result<()> {
        let sql = self.sql.relay_heartbeat();
        on_pool!(&self.pool, |pool| sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(&me.relay_id)
            .bind(&me.host)
            .bind(me.pid)
            .bind(me.started_ms)
            .bind(now_ms)
            .bind(sent)
            .execute(pool)
            .await?
            .rows_affected());
        let sql = self.sql.forget_silent_relays();
        on_pool!(&self.pool, |pool| sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(now_ms - FORGET_AFTER_MS)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(())
    }

    /// Removes this relay's row (a graceful stop).
    pub async fn relay_gone(&self, relay_id: &str) -> Result<()> {
        let sql = self.sql.relay_gone();
        on_pool!(&self.pool, |pool| sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(relay_id)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(())
    }

    pub async fn relays(&self) -> Result<Vec<RelaySeen>> {
        let sql = self.sql.relays();
        let rows: Vec<(String, String, i64, i64, i64, i64)> =
            on_pool!(&self.pool, |pool| sqlx::query_as(AssertSqlSafe(
                sql.clone()
            ))
            .fetch_all(pool)
            .await?);
        Ok(rows
            .into_iter()
            .map(
                |(relay_id, host, pid, started_ms, heartbeat_ms, sent)| RelaySeen {
                    relay_id,
                    host,
                    pid,
                    started_ms,
                    heartbeat_ms,
                    sent,
                },
            )
            .collect())
    }
}
