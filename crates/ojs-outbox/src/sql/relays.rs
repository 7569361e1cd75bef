//! `<table>_relays`: the relays working on the table, each with its last heartbeat, written by
//! every relay (created at its start, as the event log is, and refreshed with its metrics every
//! few seconds; its row deleted when it stops gracefully) and read by the dashboard. A row whose
//! heartbeat is an hour old belongs to a relay that died without stopping: the next heartbeat
//! of any relay deletes it.

use super::{Dialect, OutboxSql};

impl OutboxSql {
    /// `<table>_relays`.
    pub fn relay_registry(&self) -> String {
        format!("{}_relays", self.table)
    }

    pub fn create_relay_registry(&self) -> String {
        let (big, id) = match self.dialect {
            Dialect::Postgres => ("BIGINT", "TEXT"),
            Dialect::Sqlite => ("INTEGER", "TEXT"),
            // A key's type needs a length on MySQL.
            Dialect::Mysql => ("BIGINT", "VARCHAR(64)"),
        };
        format!(
            "CREATE TABLE IF NOT EXISTS {} (relay_id {id} PRIMARY KEY, host TEXT NOT NULL, pid {big} NOT NULL, \
             started_ms {big} NOT NULL, heartbeat_ms {big} NOT NULL, sent {big} NOT NULL)",
            self.relay_registry()
        )
    }

    /// Parameters: relay id, host, pid, started (ms), now (ms), rows sent so far.
    pub fn relay_heartbeat(&self) -> String {
        let p = |i| self.param(i);
        let upsert = match self.dialect {
            Dialect::Mysql => {
                "ON DUPLICATE KEY UPDATE heartbeat_ms = VALUES(heartbeat_ms), sent = VALUES(sent)"
            }
            _ => {
                "ON CONFLICT (relay_id) DO UPDATE SET heartbeat_ms = excluded.heartbeat_ms, sent = excluded.sent"
            }
        };
        format!(
            "INSERT INTO {} (relay_id, host, pid, started_ms, heartbeat_ms, sent) VALUES ({}, {}, {}, {}, {}, {}) {upsert}",
            self.relay_registry(),
            p(1),
            p(2),
            p(3),
            p(4),
            p(5),
            p(6)
        )
    }

    /// Rows whose heartbeat is older than parameter 1 (ms since the epoch).
    pub fn forget_silent_relays(&self) -> String {
        format!(
            "DELETE FROM {} WHERE heartbeat_ms < {}",
            self.relay_registry(),
            self.param(1)
        )
    }

    /// The row of relay parameter 1.
    pub fn relay_gone(&self) -> String {
        format!(
            "DELETE FROM {} WHERE relay_id = {}",
            self.relay_registry(),
            self.param(1)
        )
    }

    /// Every relay's row, the oldest first. Returns `relay_id, host, pid, started_ms,
    /// heartbeat_ms, sent`.
    pub fn relays(&self) -> String {
        format!(
            "SELECT relay_id, host, pid, started_ms, heartbeat_ms, sent FROM {} ORDER BY started_ms, relay_id",
            self.relay_registry()
        )
    }
}
