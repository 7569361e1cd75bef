//! Transactional job enqueue for the Open Job Spec (the Framework Adapter extension, FA-001..FA-003).
//!
//! The domain (no I/O): [`job`] (validation, wire form), [`id`] (job ids), [`config`], [`duration`],
//! [`backoff`], [`classify`], [`sql`] (every statement, per dialect).
//! The I/O: [`store`] (sqlx), [`backend`] (OJS HTTP), [`relay`] (the engine, tokio; its log
//! lines for the bindings go through [`log_feed`]),
//! [`outbox`] (the Rust-native adapter). See docs/architecture.md.

pub mod admin;
pub mod backend;
mod backoff;
pub mod classify;
pub mod codec;
pub mod config;
pub mod dashboard;
pub mod duration;
pub mod error;
pub mod event_client;
pub mod events;
mod hot_drops;
pub mod id;
pub mod job;
pub mod ledger;
pub mod log_feed;
pub mod otel;
pub mod outbox;
pub mod prometheus;
mod relay;
pub mod relay_metrics;
mod split;
pub mod sql;
mod sqlite_busy;
mod sqlite_fork;
pub mod stop_signal;
pub mod store;
pub mod surface;
mod wake;
pub mod worker;
pub mod worker_loop;

pub use config::{Config, DEVELOPMENT_OJS_URL, Host, Loaded, RelayMode};
pub use error::{Error, ErrorCode, ErrorFamily, Result};
pub use job::{NewJob, PreparedJob, RequestContext, prepare};
pub use outbox::{Outbox, OutboxTransaction};
pub use relay::Relay;
pub use relay_metrics::{Histograms, Metrics};
pub use sql::{Dialect, OutboxSql, Placeholder, Statement};
pub use store::{OutboxStatus, RowStatus, Store};
