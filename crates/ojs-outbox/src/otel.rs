//! OpenTelemetry tracing of a job's way through the outbox (docs/tracing.md): a `create` span
//! at staging, a `send` span per HTTP request of the relay, a `process` span per job a worker
//! loop hands out, exported over OTLP/HTTP (protobuf).
//!
//! Off by default, and off costs one relaxed atomic load per place a span could start
//! ([`enabled`]): no provider, no span, no attribute, no change to a job's meta. On when
//! [`wanted`] says so (`adapter.tracing` and the standard `OTEL_*` variables) and
//! [`install`] ran, which the relay, the bridge and the worker do at start.
//!
//! One provider per process, this module's own: it never touches the `opentelemetry` global
//! provider (a Rust application keeps its own). A forked child (pre-fork servers) has none of
//! its parent's export thread, so a child builds its own on first use, with the same options.
//!
//! What never goes into a span, an attribute or an event: a job's args (plaintext or
//! encrypted), and the free text of an error (a backend's message, a handler's message), which
//! may quote them. Errors are described by low-cardinality codes (`error.type`).

use std::borrow::Cow;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, Span};

use crate::error::{Error, ErrorCode, Result};

/// `messaging.system` of every span.
pub const MESSAGING_SYSTEM: &str = "ojs";
/// The instrumentation scope's name.
pub const SCOPE: &str = "ojs-outbox";

static ENABLED: AtomicBool = AtomicBool::new(false);
static INSTALLED: RwLock<Option<Installed>> = RwLock::new(None);

struct Installed {
    /// `id::fork_generation()` of the process that built `provider` (its export thread).
    generation: u64,
    options: Options,
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

/// Whether spans are made now: one relaxed atomic load. Every span site checks this before
/// it reads or builds anything.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// How the provider is built. `Default`: everything from the standard variables
/// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`, `_HEADERS`,
/// `_TIMEOUT`, `OTEL_TRACES_SAMPLER` / `_ARG`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
/// `OTEL_BSP_*`); a field set here wins over its variable (tests, the benchmark).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    /// The full URL spans are POSTed to (e.g. `http://127.0.0.1:4318/v1/traces`).
    pub traces_endpoint: Option<String>,
    /// `ParentBased(TraceIdRatioBased(ratio))`; `None`: `OTEL_TRACES_SAMPLER` (default
    /// `parentbased_always_on`).
    pub sample_ratio: Option<f64>,
}

/// Whether tracing should be on for a configuration whose `adapter.tracing` is `setting`,
/// under this process's environment:
///
/// - `OTEL_SDK_DISABLED=true`, or `OTEL_TRACES_EXPORTER=none`: off, whatever the setting;
/// - `adapter.tracing: false`: off; `true`: on (the exporter is OTLP/HTTP; an
///   `OTEL_TRACES_EXPORTER` naming only other exporters turns it off, with a warning);
/// - unset: on only when `OTEL_TRACES_EXPORTER` names `otlp` (an operator's switch for a
///   process whose configuration says nothing, e.g. a separate relay).
pub fn wanted(setting: Option<bool>) -> bool {
    wanted_in(setting, |name| std::env::var(name).ok())
}

fn wanted_in(setting: Option<bool>, env: impl Fn(&str) -> Option<String>) -> bool {
    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if disabled || setting == Some(false) {
        return false;
    }
    let exporters: Option<Vec<String>> = env("OTEL_TRACES_EXPORTER").map(|value| {
        value
            .split(',')
            .map(|e| e.trim().to_ascii_lowercase())
            .filter(|e| !e.is_empty())
            .collect()
    });
    let names_otlp = exporters
        .as_ref()
        .is_some_and(|list| list.iter().any(|e| e == "otlp"));
    match (setting, exporters.as_deref()) {
        (_, Some(list)) if list.iter().any(|e| e == "none") => false,
        (Some(true), None) | (Some(true), Some([])) => true,
        (Some(true), Some(list)) if !names_otlp => {
            tracing::warn!(
                target: "ojs_outbox::otel",
                "adapter.tracing is on but OTEL_TRACES_EXPORTER={} names no exporter this adapter has (otlp): no spans are made",
                list.join(",")
            );
            false
        }
        _ => names_otlp,
    }
}

/// Installs this process's provider when [`wanted`]`(setting)`; a provider already installed
/// stays (one per process). Returns whether tracing is on. The relay, the bridge and the
/// worker call this when they start; nothing else is needed.
pub fn install_if_wanted(setting: Option<bool>) -> Result<bool> {
    if !wanted(setting) {
        return Ok(enabled());
    }
    if enabled() {
        return Ok(true);
    }
    install(Options::default())?;
    Ok(true)
}

/// Builds and installs the provider with `options`, replacing one installed before (which is
/// flushed and shut down first). Tracing is on from here until [`shutdown`].
pub fn install(options: Options) -> Result<()> {
    let built = build(&options)?;
    let previous = {
        let mut installed = INSTALLED.write().unwrap_or_else(|p| p.into_inner());
        let previous = installed.replace(built);
        ENABLED.store(true, Ordering::Release);
        previous
    };
    if let Some(previous) = previous {
        stop_provider(previous);
    }
    Ok(())
}

fn build(options: &Options) -> Result<Installed> {
    use opentelemetry_otlp::WithExportConfig;
    let mut exporter = opentelemetry_otlp::SpanExporter::builder().with_http();
    if let Some(endpoint) = &options.traces_endpoint {
        exporter = exporter.with_endpoint(endpoint.clone());
    }
    let exporter = exporter.build().map_err(|e| {
        Error::field(
            ErrorCode::InvalidConfig,
            "adapter.tracing",
            format!("cannot build the OTLP/HTTP span exporter: {e}"),
        )
    })?;
    let mut provider = SdkTracerProvider::builder().with_batch_exporter(exporter);
    if let Some(ratio) = options.sample_ratio {
        provider = provider.with_sampler(Sampler::ParentBased(Box::new(
            Sampler::TraceIdRatioBased(ratio),
        )));
    }
    let provider = provider.build();
    let scope = InstrumentationScope::builder(SCOPE)
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let tracer = provider.tracer_with_scope(scope);
    Ok(Installed {
        generation: crate::id::fork_generation(),
        options: options.clone(),
        provider,
        tracer,
    })
}

/// Sends what the provider holds, waiting for the export (the relay's and the worker's stop).
pub fn flush() {
    let provider = {
        let installed = INSTALLED.read().unwrap_or_else(|p| p.into_inner());
        match installed.as_ref() {
            Some(i) if i.generation == crate::id::fork_generation() => Some(i.provider.clone()),
            _ => None,
        }
    };
    if let Some(provider) = provider
        && let Err(error) = provider.force_flush()
    {
        tracing::debug!(target: "ojs_outbox::otel", %error, "spans not flushed");
    }
}

/// Turns tracing off: no span is made from here on; the provider sends what it holds and
/// stops. A later [`install`] starts afresh.
pub fn shutdown() {
    let previous = {
        let mut installed = INSTALLED.write().unwrap_or_else(|p| p.into_inner());
        ENABLED.store(false, Ordering::Release);
        installed.take()
    };
    if let Some(previous) = previous {
        stop_provider(previous);
    }
}

fn stop_provider(installed: Installed) {
    if installed.generation != crate::id::fork_generation() {
        // A parent's provider: its export thread does not exist here, so waiting on it
        // would wait for nothing. Leaked, as the bridge leaks a parent's runtime.
        std::mem::forget(installed);
        return;
    }
    if let Err(error) = installed.provider.shutdown() {
        tracing::debug!(target: "ojs_outbox::otel", %error, "span provider shutdown");
    }
}

/// Runs `work` with this process's tracer; `None` when tracing is off. A forked child
/// builds its own provider first (the parent's export thread is not in the child).
fn with_tracer<R>(work: impl FnOnce(&SdkTracer) -> R) -> Option<R> {
    if !enabled() {
        return None;
    }
    let generation = crate::id::fork_generation();
    {
        let installed = INSTALLED.read().unwrap_or_else(|p| p.into_inner());
        match installed.as_ref() {
            None => return None,
            Some(i) if i.generation == generation => return Some(work(&i.tracer)),
            Some(_) => {}
        }
    }
    let mut installed = INSTALLED.write().unwrap_or_else(|p| p.into_inner());
    let stale = installed.as_ref()?;
    if stale.generation != generation {
        let fresh = build(&stale.options).ok()?;
        if let Some(parent) = installed.replace(fresh) {
            std::mem::forget(parent);
        }
    }
    installed.as_ref().map(|i| work(&i.tracer))
}

/// A W3C trace context as the job's meta carries it.
struct Carrier<'a> {
    traceparent: Option<&'a str>,
    tracestate: Option<&'a str>,
}

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.traceparent,
            "tracestate" => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// The span context of a `traceparent` (and `tracestate`), when it is a valid W3C one.
pub fn span_context(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<SpanContext> {
    let traceparent = traceparent?;
    let carrier = Carrier {
        traceparent: Some(traceparent),
        tracestate,
    };
    let context = TraceContextPropagator::new().extract(&carrier);
    let span_context = context.span().span_context().clone();
    span_context.is_valid().then_some(span_context)
}

/// The `traceparent` and `tracestate` (`None` when empty) of a span context.
pub fn header(span_context: &SpanContext) -> (String, Option<String>) {
    let traceparent = format!(
        "00-{}-{}-{:02x}",
        span_context.trace_id(),
        span_context.span_id(),
        span_context.trace_flags().to_u8()
    );
    let tracestate = span_context.trace_state().header();
    (traceparent, (!tracestate.is_empty()).then_some(tracestate))
}

fn common(operation: &'static str) -> [KeyValue; 3] {
    [
        KeyValue::new("messaging.system", MESSAGING_SYSTEM),
        KeyValue::new("messaging.operation.type", operation),
        KeyValue::new("messaging.operation.name", operation),
    ]
}

fn span_name(operation: &'static str, queue: Option<&str>) -> Cow<'static, str> {
    match queue {
        Some(queue) => Cow::Owned(format!("{operation} {queue}")),
        None => Cow::Borrowed(operation),
    }
}

/// Staging (`job::prepare`): the `create` span of one job, PRODUCER, a child of the context the
/// job's meta carries (the application's request, which the bindings pass as the request
/// context's `traceparent`/`tracestate`), or of the caller's current OpenTelemetry context
/// when the meta carries none. Ended at once; its context is the job's creation context, which
/// the caller stores in the job's meta in place of the one given. `None`: tracing is off.
pub(crate) fn create(
    job_id: &str,
    job_type: &str,
    queue: &str,
    traceparent: Option<&str>,
    tracestate: Option<&str>,
) -> Option<(String, Option<String>)> {
    with_tracer(|tracer| {
        let parent = match span_context(traceparent, tracestate) {
            Some(remote) => Context::new().with_remote_span_context(remote),
            None => Context::current(),
        };
        // A span the sampler dropped gets no name, attributes or links built: only its ids.
        let mut span = tracer
            .span_builder("create")
            .with_kind(SpanKind::Producer)
            .start_with_context(tracer, &parent);
        if span.is_recording() {
            span.update_name(span_name("create", Some(queue)));
            span.set_attributes(common("create"));
            span.set_attributes([
                KeyValue::new("messaging.destination.name", queue.to_owned()),
                KeyValue::new("messaging.message.id", job_id.to_owned()),
                KeyValue::new("ojs.job.id", job_id.to_owned()),
                KeyValue::new("ojs.job.type", job_type.to_owned()),
                KeyValue::new("ojs.job.queue", queue.to_owned()),
            ]);
        }
        let created = header(span.span_context());
        span.end();
        created
    })
}

/// One job of a relay request: what its span needs from the row.
pub(crate) struct SentJob<'a> {
    pub job_id: &'a str,
    pub job_type: &'a str,
    pub queue: &'a str,
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
}

/// The relay's `send` span of one HTTP request (a batch, or one job): CLIENT (its context is
/// no job's creation context), a root, linked to each job's creation context. Ends when
/// dropped, or at [`SendSpan::end`].
pub(crate) struct SendSpan(Option<Span>);

impl SendSpan {
    /// No span (tracing off).
    pub(crate) fn none() -> SendSpan {
        SendSpan(None)
    }

    /// The span, unnamed yet (`send`); [`SendSpan::describe`] it when [`SendSpan::recording`]
    /// (a span the sampler dropped gets nothing built: the rows are not even read).
    pub(crate) fn start() -> SendSpan {
        SendSpan(with_tracer(|tracer| {
            tracer
                .span_builder("send")
                .with_kind(SpanKind::Client)
                .start_with_context(tracer, &Context::new())
        }))
    }

    /// Whether the span records (tracing on, and sampled).
    pub(crate) fn is_recording(&self) -> bool {
        self.0.as_ref().is_some_and(|span| span.is_recording())
    }

    /// Names the span and gives it the request's attributes and its jobs' links.
    pub(crate) fn describe(&mut self, jobs: &[SentJob], batch: bool, server: Server) {
        let Some(span) = self.recording() else {
            return;
        };
        let queue = jobs.first().map(|job| job.queue);
        // One destination when every job goes to one queue; several: none named
        // (`messaging.destination.name` is for a value that applies to all messages).
        let queue = queue.filter(|q| jobs.iter().all(|job| job.queue == *q));
        let mut attributes = Vec::with_capacity(10);
        attributes.extend(common("send"));
        if let Some(queue) = queue {
            span.update_name(span_name("send", Some(queue)));
            attributes.push(KeyValue::new(
                "messaging.destination.name",
                queue.to_owned(),
            ));
        }
        if batch {
            attributes.push(KeyValue::new(
                "messaging.batch.message_count",
                jobs.len() as i64,
            ));
        } else if let Some(job) = jobs.first() {
            attributes.extend([
                KeyValue::new("messaging.message.id", job.job_id.to_owned()),
                KeyValue::new("ojs.job.id", job.job_id.to_owned()),
                KeyValue::new("ojs.job.type", job.job_type.to_owned()),
                KeyValue::new("ojs.job.queue", job.queue.to_owned()),
            ]);
        }
        if let Some(host) = server.host {
            attributes.push(KeyValue::new("server.address", host));
        }
        if let Some(port) = server.port {
            attributes.push(KeyValue::new("server.port", i64::from(port)));
        }
        span.set_attributes(attributes);
        for job in jobs {
            if let Some(context) = span_context(job.traceparent, job.tracestate) {
                span.add_link(context, Vec::new());
            }
        }
    }

    fn recording(&mut self) -> Option<&mut Span> {
        self.0.as_mut().filter(|span| span.is_recording())
    }

    /// What the request's answer meant: `ojs.relay.outcome`, the HTTP status, and for a
    /// failure the span's status Error and `error.type` (the HTTP status code, or the
    /// transport failure: `timeout`, `connect`, `transport`).
    pub(crate) fn answered(&mut self, outcome: &'static str, answer: &crate::backend::Answer) {
        let Some(span) = self.recording() else {
            return;
        };
        span.set_attribute(KeyValue::new("ojs.relay.outcome", outcome));
        if let Some(status) = answer.status {
            span.set_attribute(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
        }
        let failed = !matches!(outcome, "delivered" | "deduplicated" | "duplicate");
        if failed {
            let error_type = match (answer.status, answer.transport) {
                (Some(status), _) => status.to_string(),
                (None, Some(kind)) => kind.to_owned(),
                (None, None) => "_OTHER".to_owned(),
            };
            span.set_status(Status::error(format!(
                "the backend did not take the job(s): {outcome}"
            )));
            span.set_attribute(KeyValue::new("error.type", error_type));
        }
    }

    /// The relay's decision for one job of this request, as a span event: `ojs.job.retry`
    /// (a failed attempt, due again after `retry_in`), `ojs.job.deferred` (no attempt
    /// used), `ojs.job.dead_lettered` (it will not be sent again), `ojs.job.released` (the
    /// relay paused before its verdict).
    pub(crate) fn decided(
        &mut self,
        event: &'static str,
        job_id: &str,
        attempts: i64,
        retry_in: Option<std::time::Duration>,
    ) {
        let Some(span) = self.recording() else {
            return;
        };
        let mut attributes = vec![
            KeyValue::new("ojs.job.id", job_id.to_owned()),
            KeyValue::new("ojs.job.attempt", attempts),
        ];
        if let Some(delay) = retry_in {
            attributes.push(KeyValue::new(
                "ojs.job.retry_in_ms",
                delay.as_millis() as i64,
            ));
        }
        span.add_event(event, attributes);
    }

    pub(crate) fn end(self) {
        drop(self);
    }
}

impl Drop for SendSpan {
    fn drop(&mut self) {
        if let Some(mut span) = self.0.take() {
            span.end();
        }
    }
}

/// The backend's host and port, for `server.address` / `server.port`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Server {
    host: Option<String>,
    port: Option<u16>,
}

impl Server {
    pub(crate) fn of_url(url: &str) -> Server {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Server::default();
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !port.contains(']') => (host, port.parse().ok()),
            _ => (authority, None),
        };
        let port = port.or(match scheme {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        });
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Server {
            host: (!host.is_empty()).then(|| host.to_owned()),
            port,
        }
    }
}

/// A worker's `process` span of one job: CONSUMER, linked to the job's creation context (the
/// OJS tracing spec's DT-002 and the messaging conventions' default: a link, not a parent),
/// so it starts a trace of its own; the handler runs inside it (its context is the
/// `traceparent` the handler gets). Ends when dropped, or at [`ProcessSpan::finish`].
pub(crate) struct ProcessSpan(Span);

impl ProcessSpan {
    /// `None` when tracing is off.
    pub(crate) fn start(
        job: &serde_json::Value,
        job_id: &str,
        job_type: &str,
        attempt: u32,
        worker_id: &str,
        traceparent: Option<&str>,
        tracestate: Option<&str>,
    ) -> Option<ProcessSpan> {
        with_tracer(|tracer| {
            let mut span = tracer
                .span_builder("process")
                .with_kind(SpanKind::Consumer)
                .start_with_context(tracer, &Context::new());
            if span.is_recording() {
                let queue = job
                    .get("queue")
                    .or_else(|| job.pointer("/options/queue"))
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("default");
                span.update_name(span_name("process", Some(queue)));
                span.set_attributes(common("process"));
                span.set_attributes([
                    KeyValue::new("messaging.destination.name", queue.to_owned()),
                    KeyValue::new("messaging.message.id", job_id.to_owned()),
                    KeyValue::new("messaging.client.id", worker_id.to_owned()),
                    KeyValue::new("ojs.job.id", job_id.to_owned()),
                    KeyValue::new("ojs.job.type", job_type.to_owned()),
                    KeyValue::new("ojs.job.queue", queue.to_owned()),
                    // The spec's attempt is 1-indexed: failed attempts so far, plus this one.
                    KeyValue::new("ojs.job.attempt", i64::from(attempt) + 1),
                    KeyValue::new("ojs.worker.id", worker_id.to_owned()),
                ]);
                if let Some(context) = span_context(traceparent, tracestate) {
                    span.add_link(context, Vec::new());
                }
            }
            ProcessSpan(span)
        })
    }

    /// The span's `traceparent` and `tracestate`: what the handler runs in.
    pub(crate) fn header(&self) -> (String, Option<String>) {
        header(self.0.span_context())
    }

    /// How the job ended. `error_type`: `None` for a completed job (status Ok); else the
    /// failure's code (the handler's error code, `timeout`, `unknown_type`), status Error.
    /// `event`: a span event for what is neither (`ojs.job.requeued`).
    pub(crate) fn finish(mut self, error_type: Option<&str>, event: Option<&'static str>) {
        let span = &mut self.0;
        if span.is_recording() {
            if let Some(event) = event {
                span.add_event(event, Vec::new());
            }
            match error_type {
                Some(kind) => {
                    span.set_attribute(KeyValue::new("error.type", kind.to_owned()));
                    span.set_status(Status::error(format!("the job failed: {kind}")));
                }
                None if event.is_none() => span.set_status(Status::Ok),
                None => {}
            }
        }
        span.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn tracing_is_off_unless_the_setting_or_the_exporter_variable_says_otlp() {
        assert!(!wanted_in(None, env(&[])));
        assert!(wanted_in(Some(true), env(&[])));
        assert!(!wanted_in(
            Some(false),
            env(&[("OTEL_TRACES_EXPORTER", "otlp")])
        ));
        assert!(wanted_in(None, env(&[("OTEL_TRACES_EXPORTER", "otlp")])));
        assert!(wanted_in(
            None,
            env(&[("OTEL_TRACES_EXPORTER", "console, otlp")])
        ));
        assert!(!wanted_in(
            Some(true),
            env(&[("OTEL_TRACES_EXPORTER", "none")])
        ));
        assert!(!wanted_in(
            Some(true),
            env(&[("OTEL_TRACES_EXPORTER", "zipkin")])
        ));
        assert!(!wanted_in(
            Some(true),
            env(&[("OTEL_SDK_DISABLED", "TRUE")])
        ));
        assert!(wanted_in(
            Some(true),
            env(&[("OTEL_SDK_DISABLED", "false")])
        ));
    }

    #[test]
    fn a_traceparent_round_trips_and_a_malformed_one_is_none() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = span_context(Some(text), Some("ojs=p:8")).unwrap();
        assert_eq!(
            header(&context),
            (text.to_owned(), Some("ojs=p:8".to_owned()))
        );
        assert!(span_context(Some("00-nothex-00f067aa0ba902b7-01"), None).is_none());
        assert!(span_context(None, None).is_none());
    }

    #[test]
    fn the_server_of_a_backend_url() {
        let s = Server::of_url("http://127.0.0.1:8080/base");
        assert_eq!((s.host.as_deref(), s.port), (Some("127.0.0.1"), Some(8080)));
        let s = Server::of_url("https://user:pw@ojs.example.com");
        assert_eq!(
            (s.host.as_deref(), s.port),
            (Some("ojs.example.com"), Some(443))
        );
        let s = Server::of_url("http://[::1]:9/");
        assert_eq!((s.host.as_deref(), s.port), (Some("::1"), Some(9)));
    }
}
