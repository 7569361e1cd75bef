//! `NativeAdapter`: one configured core adapter (`bridge::Adapter`) per `createOjs` call.
//! Method names and order follow `bridge::Adapter`.

use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::{AsyncTask, ToNapiValue, TypeName};
use napi::{Env, Task};
use napi_derive::napi;
use ojs_outbox::ErrorCode;
use ojs_outbox::bridge::Adapter;

use crate::error::to_js;

/// One statement for the host connection: SQL text and its parameters (text or null).
#[napi(object)]
pub struct NativeStatement {
    pub sql: String,
    pub params: Vec<Option<String>>,
}

/// Validated jobs: their ids (UUIDv7) and the INSERT statements that stage them.
#[napi(object)]
pub struct NativeStaged {
    pub job_ids: Vec<String>,
    pub statements: Vec<NativeStatement>,
}

type Work<T> = Box<dyn FnOnce() -> ojs_outbox::Result<T> + Send>;

/// A blocking core call run on libuv's thread pool; its promise resolves with the result.
pub struct Blocking<T: Send + 'static> {
    work: Option<Work<T>>,
}

impl<T: ToNapiValue + TypeName + Send + 'static> Blocking<T> {
    fn task(work: impl FnOnce() -> ojs_outbox::Result<T> + Send + 'static) -> AsyncTask<Self> {
        AsyncTask::new(Blocking {
            work: Some(Box::new(work)),
        })
    }
}

impl<T: ToNapiValue + TypeName + Send + 'static> Task for Blocking<T> {
    type Output = T;
    type JsValue = T;

    fn compute(&mut self) -> napi::Result<T> {
        let work = self
            .work
            .take()
            .ok_or_else(|| napi::Error::from_reason("task already ran"))?;
        work().map_err(to_js)
    }

    fn resolve(&mut self, _env: Env, output: T) -> napi::Result<T> {
        Ok(output)
    }
}

/// The core adapter behind a JavaScript handle. `close` stops the relay and lets the runtime
/// and its database pool go (once calls still running have finished); later calls fail with
/// `RELAY_SHUT_DOWN`.
#[napi]
pub struct NativeAdapter {
    inner: Mutex<Option<Arc<Adapter>>>,
}

fn closed() -> ojs_outbox::Error {
    ojs_outbox::Error::new(ErrorCode::RelayShutDown, "the adapter is closed")
}

impl NativeAdapter {
    fn adapter(&self) -> Option<Arc<Adapter>> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn sync<T>(&self, work: impl FnOnce(&Adapter) -> ojs_outbox::Result<T>) -> napi::Result<T> {
        let adapter = self.adapter().ok_or_else(|| to_js(closed()))?;
        work(&adapter).map_err(to_js)
    }

    fn blocking<T: ToNapiValue + TypeName + Send + 'static>(
        &self,
        work: impl FnOnce(&Adapter) -> ojs_outbox::Result<T> + Send + 'static,
    ) -> AsyncTask<Blocking<T>> {
        let adapter = self.adapter();
        Blocking::task(move || {
            let adapter = adapter.ok_or_else(closed)?;
            work(&adapter)
        })
    }
}

#[napi]
impl NativeAdapter {
    /// Parses the spec §5.2 configuration (JSON text); no I/O.
    #[napi(constructor)]
    pub fn new(config_json: String) -> napi::Result<Self> {
        Adapter::new(&config_json)
            .map(|adapter| NativeAdapter {
                inner: Mutex::new(Some(Arc::new(adapter))),
            })
            .map_err(to_js)
    }

    #[napi(getter)]
    pub fn table_name(&self) -> napi::Result<String> {
        self.sync(|adapter| Ok(adapter.table_name().to_owned()))
    }

    #[napi(getter)]
    pub fn relay_in_process(&self) -> napi::Result<bool> {
        self.sync(|adapter| Ok(adapter.relay_in_process()))
    }

    #[napi]
    pub fn create_table_sql(&self, dialect: String) -> napi::Result<Vec<String>> {
        self.sync(|adapter| adapter.create_table_sql(&dialect))
    }

    #[napi]
    pub fn stage(
        &self,
        dialect: String,
        placeholder: String,
        jobs_json: String,
        context_json: Option<String>,
    ) -> napi::Result<NativeStaged> {
        let staged = self.sync(|adapter| {
            adapter.stage(&dialect, &placeholder, &jobs_json, context_json.as_deref())
        })?;
        Ok(NativeStaged {
            job_ids: staged.job_ids,
            statements: staged
                .statements
                .into_iter()
                .map(|statement| NativeStatement {
                    sql: statement.sql,
                    params: statement.params,
                })
                .collect(),
        })
    }

    #[napi]
    pub fn start_relay(&self) -> AsyncTask<Blocking<()>> {
        self.blocking(|adapter| adapter.start_relay())
    }

    #[napi]
    pub fn stop_relay(&self) -> AsyncTask<Blocking<()>> {
        self.blocking(|adapter| {
            adapter.stop_relay();
            Ok(())
        })
    }

    /// Never fails: a closed adapter has no relay to wake, and the poller finds the rows.
    #[napi]
    pub fn notify_committed(&self, job_ids: Vec<String>) {
        if let Some(adapter) = self.adapter() {
            adapter.notify_committed(job_ids);
        }
    }

    #[napi]
    pub fn enqueue_now(
        &self,
        job_json: String,
        context_json: Option<String>,
    ) -> AsyncTask<Blocking<String>> {
        self.blocking(move |adapter| adapter.enqueue_now(&job_json, context_json.as_deref()))
    }

    #[napi]
    pub fn metrics_json(&self) -> AsyncTask<Blocking<String>> {
        self.blocking(|adapter| Ok(adapter.metrics_json()))
    }

    #[napi]
    pub fn migrate(&self) -> AsyncTask<Blocking<()>> {
        self.blocking(|adapter| adapter.migrate())
    }

    #[napi]
    pub fn status_json(&self) -> AsyncTask<Blocking<String>> {
        self.blocking(|adapter| adapter.status_json())
    }

    #[napi]
    pub fn dead_list_json(
        &self,
        tenant: Option<String>,
        limit: Option<u32>,
    ) -> AsyncTask<Blocking<String>> {
        self.blocking(move |adapter| adapter.dead_list_json(tenant.as_deref(), limit))
    }

    #[napi]
    pub fn dead_replay(&self, tenant: Option<String>) -> AsyncTask<Blocking<i64>> {
        self.blocking(move |adapter| adapter.dead_replay(tenant.as_deref()).map(saturate))
    }

    #[napi]
    pub fn dead_purge(&self, tenant: Option<String>) -> AsyncTask<Blocking<i64>> {
        self.blocking(move |adapter| adapter.dead_purge(tenant.as_deref()).map(saturate))
    }

    #[napi]
    pub fn prune(&self, older_than: String) -> AsyncTask<Blocking<i64>> {
        self.blocking(move |adapter| adapter.prune(&older_than).map(saturate))
    }

    #[napi]
    pub fn rows_json(&self, job_ids: Vec<String>) -> AsyncTask<Blocking<String>> {
        self.blocking(move |adapter| adapter.rows_json(job_ids))
    }

    #[napi]
    pub fn run_relay_until_signal(&self) -> AsyncTask<Blocking<()>> {
        self.blocking(|adapter| adapter.run_relay_until_signal())
    }

    /// Stops the relay (gracefully) and releases the handle; idempotent.
    #[napi]
    pub fn close(&self) -> AsyncTask<Blocking<()>> {
        let adapter = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        Blocking::task(move || {
            if let Some(adapter) = adapter {
                adapter.stop_relay();
            }
            Ok(())
        })
    }
}

/// Row counts as JavaScript numbers.
fn saturate(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}
