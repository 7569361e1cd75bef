//! OpenTelemetry tracing (issue 29, docs/tracing.md) end to end, against a real OTLP/HTTP
//! receiver (an axum server on port 0 that decodes each `POST /v1/traces` body as an
//! `ExportTraceServiceRequest` with `opentelemetry-proto`), the real devserver over HTTP, the
//! real relay and the core's worker loop, on a real SQLite file and on PostgreSQL when
//! `OJS_TEST_DATABASE_URL` is set: a job staged under a request's trace context yields a
//! `create` span (a child of the request), the relay's `send` spans link to it, the worker's
//! `process` span links to it and is the context its handler gets; no args anywhere in the
//! exported bytes. With tracing off nothing is exported and the meta is what it always was.
//!
//! The tracer provider is one per process: the tests of this file take turns (`TURN`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ojs_devserver::{DevServer, Fault};
use ojs_outbox::backend::Backend;
use ojs_outbox::job::RequestContext;
use ojs_outbox::worker_loop::{Outcome, WorkerLoop, WorkerOptions};
use ojs_outbox::{Config, NewJob, Outbox, RowStatus, otel};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};

/// What must never be exported: it is in every job's args.
const MARKER: &str = "args-marker-7f3a91";
/// The application's request span, as a framework's middleware would pass it.
const PARENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";
const TRACESTATE: &str = "vendor=abc";
const WAIT: Duration = Duration::from_secs(30);

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn parent_traceparent() -> String {
    format!("00-{PARENT_TRACE}-{PARENT_SPAN}-01")
}

fn databases(name: &str) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("ojs-tracing-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut urls = vec![format!("sqlite://{}", dir.join("outbox.db").display())];
    match std::env::var("OJS_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => urls.push(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "OJS_TEST_DATABASE_URL is unset under CI"
            );
            eprintln!("SKIP postgres: OJS_TEST_DATABASE_URL is unset (scripts/test.sh sets it)");
        }
    }
    urls
}

async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the OTLP receiver got: every request body as it came, and every span decoded.
#[derive(Default)]
struct Received {
    bodies: Vec<Vec<u8>>,
    spans: Vec<Span>,
}

type Shared = Arc<Mutex<Received>>;

/// A real OTLP/HTTP traces receiver on a free port; its `/v1/traces` URL.
async fn receiver() -> (String, Shared) {
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode, header};
    async fn traces(
        State(received): State<Shared>,
        headers: HeaderMap,
        body: axum::body::Bytes,
    ) -> (StatusCode, [(header::HeaderName, &'static str); 1], Vec<u8>) {
        let protobuf = headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v == "application/x-protobuf");
        let Ok(request) = ExportTraceServiceRequest::decode(body.as_ref()) else {
            return (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "text/plain")],
                b"not an ExportTraceServiceRequest".to_vec(),
            );
        };
        assert!(protobuf, "OTLP/HTTP protobuf: {headers:?}");
        let mut received = received.lock().unwrap();
        received.bodies.push(body.to_vec());
        for resource in request.resource_spans {
            for scope in resource.scope_spans {
                received.spans.extend(scope.spans);
            }
        }
        let empty = opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse {
            partial_success: None,
        };
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            empty.encode_to_vec(),
        )
    }
    let received = Shared::default();
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(traces))
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An attribute's value as text (strings as they are, integers in decimal).
fn attr(
    attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue],
    key: &str,
) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    match value.value.as_ref()? {
        AnyValue::StringValue(text) => Some(text.clone()),
        AnyValue::IntValue(n) => Some(n.to_string()),
        AnyValue::BoolValue(b) => Some(b.to_string()),
        other => Some(format!("{other:?}")),
    }
}

fn span_attr(span: &Span, key: &str) -> Option<String> {
    attr(&span.attributes, key)
}

/// `(trace id, span id)` of a span, hex.
fn ids(span: &Span) -> (String, String) {
    (hex(&span.trace_id), hex(&span.span_id))
}

fn links(span: &Span) -> Vec<(String, String)> {
    span.links
        .iter()
        .map(|link| (hex(&link.trace_id), hex(&link.span_id)))
        .collect()
}

/// `(trace id, span id)` of a `traceparent`.
fn parse_traceparent(text: &str) -> (String, String) {
    let parts: Vec<&str> = text.split('-').collect();
    (parts[1].to_owned(), parts[2].to_owned())
}

const SPAN_KIND_CLIENT: i32 = 3;
const SPAN_KIND_PRODUCER: i32 = 4;
const SPAN_KIND_CONSUMER: i32 = 5;
const STATUS_OK: i32 = 1;
const STATUS_ERROR: i32 = 2;

fn config(url: &str, backend: &DevServer, table: &str, tracing: Option<bool>) -> Config {
    let mut adapter = json!({
        "database_url": url,
        "ojs_url": backend.url(),
        "outbox": {"table_name": table, "poll_interval": "PT0.05S"},
        "relay": {"max_attempts": 2, "initial_backoff": "PT0.05S", "max_backoff": "PT0.05S",
                  "skip_recent": "PT0S"}});
    if let Some(tracing) = tracing {
        adapter["tracing"] = json!(tracing);
    }
    Config::from_value(&json!({ "adapter": adapter })).unwrap()
}

async fn fresh_outbox(config: Config) -> Outbox {
    let outbox = Outbox::connect(config).await.unwrap();
    let table = outbox.config().outbox.table_name.clone();
    if let Some(pool) = outbox.store().postgres_pool() {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP TABLE IF EXISTS {table}; DROP TABLE IF EXISTS {table}_events"
        )))
        .execute(pool)
        .await
        .unwrap();
    }
    outbox.store().migrate().await.unwrap();
    outbox
}

fn request_context() -> RequestContext {
    RequestContext {
        traceparent: Some(parent_traceparent()),
        tracestate: Some(TRACESTATE.into()),
        request_id: Some("req-1".into()),
        ..RequestContext::default()
    }
}

fn job(job_type: &str, n: u32) -> NewJob {
    NewJob::new(job_type, json!([{"secret": MARKER, "n": n}]))
        .with_options(json!({"queue": "mail"}))
}

fn worker(backend: &DevServer) -> WorkerLoop {
    let config = Config::from_value(&json!({"adapter": {"ojs_url": backend.url()}})).unwrap();
    let options = WorkerOptions::from_json(
        &json!({"queues": ["mail"], "worker_id": "tracing-w1", "idle_poll_ms": 50}).to_string(),
    )
    .unwrap();
    WorkerLoop::start(Backend::new(&config).unwrap(), None, options)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_traced_from_the_request_through_the_relay_to_its_handler() {
    let _turn = TURN.lock().await;
    let backend = DevServer::start(0).await.unwrap();
    for url in databases("on") {
        backend.reset();
        let (endpoint, received) = receiver().await;
        otel::install(otel::Options {
            traces_endpoint: Some(endpoint),
            sample_ratio: None,
        })
        .unwrap();
        assert!(otel::enabled());
        let outbox = fresh_outbox(config(&url, &backend, "tracing_on", Some(true))).await;
        outbox.start_relay();
        // The flaky job's every enqueue answers 500: the batch holding it is refused, it is
        // tried alone, retried once, and dead after its second attempt (max_attempts 2).
        backend.push_fault(
            serde_json::from_value::<Fault>(json!({"status": 500, "code": "internal_error",
                "match_type": "mail.flaky"}))
            .unwrap(),
        );
        let mut tx = outbox.begin().await.unwrap();
        tx.set_context(Some(request_context()));
        let good = tx.enqueue_after_commit(job("mail.send", 1)).await.unwrap();
        let failing = tx.enqueue_after_commit(job("mail.send", 2)).await.unwrap();
        let flaky = tx.enqueue_after_commit(job("mail.flaky", 3)).await.unwrap();
        tx.commit().await.unwrap();
        eventually("two sent, one dead", async || {
            let ids = [good.clone(), failing.clone(), flaky.clone()];
            let rows = outbox.store().rows_by_job_id(&ids).await.ok()?;
            (rows.get(&good)?.status == RowStatus::Sent
                && rows.get(&failing)?.status == RowStatus::Sent
                && rows.get(&flaky)?.status == RowStatus::Dead)
                .then_some(())
        })
        .await;

        // The worker: one job completes, the other fails; each handler gets its process span.
        let worker = worker(&backend);
        let mut handed = Vec::new();
        for _ in 0..2 {
            let assignment = worker.next(WAIT).await.expect("a job for the handler");
            let outcome = if assignment.job_id == good {
                Outcome::Completed(None)
            } else {
                Outcome::Failed {
                    code: "smtp_down".into(),
                    message: format!("could not send {MARKER}"),
                    retryable: Some(false),
                    details: None,
                }
            };
            assert!(worker.finish(&assignment.job_id, outcome));
            handed.push(assignment);
        }
        worker.stop(Duration::from_secs(5)).await;
        outbox.stop_relay().await;
        otel::flush();

        let stored = backend.snapshot();
        let meta_of = |id: &str| {
            let job = stored.jobs.iter().find(|job| job.id == id).expect("stored");
            job.meta.clone().unwrap_or(Value::Null)
        };
        let spans = eventually("the spans of three jobs", async || {
            let received = received.lock().unwrap();
            let count = |operation: &str| {
                received
                    .spans
                    .iter()
                    .filter(|s| {
                        span_attr(s, "messaging.operation.type").as_deref() == Some(operation)
                    })
                    .count()
            };
            (count("create") == 3 && count("process") == 2 && count("send") >= 4)
                .then(|| received.spans.clone())
        })
        .await;
        let of_type = |operation: &str| -> Vec<&Span> {
            spans
                .iter()
                .filter(|s| span_attr(s, "messaging.operation.type").as_deref() == Some(operation))
                .collect()
        };

        // create: one per job, PRODUCER, a child of the request's span in its trace; its
        // context is what the backend holds in the job's meta (tracestate carried along).
        let mut created = std::collections::HashMap::new();
        for span in of_type("create") {
            let id = span_attr(span, "messaging.message.id").expect("message id");
            assert_eq!(span.kind, SPAN_KIND_PRODUCER, "{url}");
            assert_eq!(
                hex(&span.trace_id),
                PARENT_TRACE,
                "{url}: the request's trace"
            );
            assert_eq!(
                hex(&span.parent_span_id),
                PARENT_SPAN,
                "{url}: a child of the request"
            );
            assert_eq!(span.name, "create mail");
            assert_eq!(span_attr(span, "messaging.system").as_deref(), Some("ojs"));
            assert_eq!(
                span_attr(span, "messaging.operation.name").as_deref(),
                Some("create")
            );
            assert_eq!(
                span_attr(span, "messaging.destination.name").as_deref(),
                Some("mail")
            );
            assert_eq!(span_attr(span, "ojs.job.id").as_deref(), Some(id.as_str()));
            created.insert(id, ids(span));
        }
        for id in [&good, &failing, &flaky] {
            let context = created.get(id).expect("a create span per job").clone();
            if id != &flaky {
                let meta = meta_of(id);
                let stored_context = parse_traceparent(meta["traceparent"].as_str().unwrap());
                assert_eq!(
                    stored_context, context,
                    "{url}: meta carries the create span"
                );
                assert_eq!(meta["tracestate"], json!(TRACESTATE));
                assert_eq!(meta["ojs.context.request_id"], json!("req-1"));
            }
        }

        // send: CLIENT, a root, linked to each job's creation context; the first request was
        // the batch of all three (refused: the flaky job), the others single sends.
        let sends = of_type("send");
        for span in &sends {
            assert_eq!(span.kind, SPAN_KIND_CLIENT, "{url}");
            assert!(
                span.parent_span_id.is_empty(),
                "{url}: the relay's request is a root"
            );
            assert_eq!(span_attr(span, "messaging.system").as_deref(), Some("ojs"));
            assert_eq!(
                span_attr(span, "messaging.operation.name").as_deref(),
                Some("send")
            );
            assert_eq!(
                span_attr(span, "server.address").as_deref(),
                Some("127.0.0.1")
            );
        }
        let batch = sends
            .iter()
            .find(|s| span_attr(s, "messaging.batch.message_count").as_deref() == Some("3"))
            .expect("the batch's send span");
        let batch_links = links(batch);
        for id in [&good, &failing, &flaky] {
            assert!(
                batch_links.contains(&created[id]),
                "{url}: the batch links {id}"
            );
        }
        assert_eq!(batch.name, "send mail");
        assert_eq!(
            span_attr(batch, "messaging.destination.name").as_deref(),
            Some("mail")
        );
        assert_eq!(span_attr(batch, "messaging.message.id"), None);
        assert_eq!(batch.status.as_ref().map(|s| s.code), Some(STATUS_ERROR));
        assert_eq!(span_attr(batch, "error.type").as_deref(), Some("500"));
        // The two good jobs went out together once the backend named the flaky one.
        for id in [&good, &failing] {
            let delivering = sends
                .iter()
                .find(|s| {
                    links(s).contains(&created[id])
                        && span_attr(s, "ojs.relay.outcome").as_deref() == Some("delivered")
                })
                .unwrap_or_else(|| panic!("{url}: the delivering send of {id}"));
            let status = span_attr(delivering, "http.response.status_code").unwrap();
            assert!(status.starts_with('2'), "{url}: {status}");
            assert_eq!(span_attr(delivering, "error.type"), None);
            assert_ne!(
                delivering.status.as_ref().map(|s| s.code),
                Some(STATUS_ERROR)
            );
        }
        // The flaky job: a retry, then a dead letter, each an event of its send's span.
        let flaky_sends: Vec<&&Span> = sends
            .iter()
            .filter(|s| span_attr(s, "messaging.message.id").as_deref() == Some(flaky.as_str()))
            .collect();
        let events: Vec<&str> = flaky_sends
            .iter()
            .flat_map(|s| s.events.iter().map(|e| e.name.as_str()))
            .collect();
        assert!(events.contains(&"ojs.job.retry"), "{url}: {events:?}");
        assert!(
            events.contains(&"ojs.job.dead_lettered"),
            "{url}: {events:?}"
        );
        assert!(
            flaky_sends.len() >= 2,
            "{url}: two single sends of the flaky job"
        );
        for span in &flaky_sends {
            assert_eq!(span_attr(span, "messaging.batch.message_count"), None);
            assert_eq!(span_attr(span, "ojs.job.id"), Some(flaky.clone()));
            assert_eq!(span.status.as_ref().map(|s| s.code), Some(STATUS_ERROR));
            assert_eq!(span_attr(span, "error.type").as_deref(), Some("500"));
            assert_eq!(links(span), vec![created[&flaky].clone()]);
        }

        // process: CONSUMER, linked to the creation context (a trace of its own, per the OJS
        // tracing spec); the handler ran in it: its traceparent is the span's.
        let processes = of_type("process");
        for assignment in &handed {
            let id = &assignment.job_id;
            let span = processes
                .iter()
                .find(|s| span_attr(s, "messaging.message.id").as_deref() == Some(id.as_str()))
                .unwrap_or_else(|| panic!("{url}: the process span of {id}"));
            assert_eq!(span.kind, SPAN_KIND_CONSUMER);
            assert_eq!(span.name, "process mail");
            assert_eq!(
                links(span),
                vec![created[id].clone()],
                "{url}: linked to create"
            );
            assert!(span.parent_span_id.is_empty());
            assert_eq!(
                span_attr(span, "messaging.destination.name").as_deref(),
                Some("mail")
            );
            assert_eq!(span_attr(span, "messaging.system").as_deref(), Some("ojs"));
            assert_eq!(
                span_attr(span, "messaging.operation.name").as_deref(),
                Some("process")
            );
            assert_eq!(
                span_attr(span, "ojs.worker.id").as_deref(),
                Some("tracing-w1")
            );
            let handler = parse_traceparent(assignment.traceparent.as_deref().unwrap());
            assert_eq!(
                handler,
                ids(span),
                "{url}: the handler runs inside the process span"
            );
            // The job itself still carries its creation context.
            let meta_context = parse_traceparent(assignment.meta["traceparent"].as_str().unwrap());
            assert_eq!(meta_context, created[id]);
            let status = span.status.as_ref().map(|s| s.code);
            if *id == good {
                assert_eq!(status, Some(STATUS_OK));
            } else {
                assert_eq!(status, Some(STATUS_ERROR));
                assert_eq!(span_attr(span, "error.type").as_deref(), Some("smtp_down"));
            }
        }

        // No args (nor a handler's message quoting them) in anything exported.
        let received = received.lock().unwrap();
        for body in &received.bodies {
            let text = String::from_utf8_lossy(body);
            assert!(!text.contains(MARKER), "{url}: args in an OTLP request");
        }
        drop(received);
        otel::shutdown();
        assert!(!otel::enabled());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tracing_off_nothing_is_exported_and_the_meta_is_unchanged() {
    let _turn = TURN.lock().await;
    // A provider that exported to this receiver, then tracing turned off: from here on
    // nothing may reach it.
    let (endpoint, received) = receiver().await;
    otel::install(otel::Options {
        traces_endpoint: Some(endpoint),
        sample_ratio: None,
    })
    .unwrap();
    otel::shutdown();
    assert!(!otel::enabled());
    // The setting off wins over everything: nothing is installed.
    assert!(!otel::install_if_wanted(Some(false)).unwrap());
    let backend = DevServer::start(0).await.unwrap();
    // The same bytes as before tracing existed: the context's entries, in order.
    let prepared = ojs_outbox::prepare(job("mail.send", 1), Some(&request_context())).unwrap();
    assert_eq!(
        prepared.meta_json,
        format!(
            r#"{{"ojs.context.request_id":"req-1","traceparent":"{}","tracestate":"{TRACESTATE}"}}"#,
            parent_traceparent()
        )
    );
    let plain = ojs_outbox::prepare(job("mail.send", 1), None).unwrap();
    assert_eq!(plain.meta_json, "{}");
    for url in databases("off") {
        backend.reset();
        // `adapter.tracing` unset, no OTEL_TRACES_EXPORTER: the default, off.
        let outbox = fresh_outbox(config(&url, &backend, "tracing_off", None)).await;
        outbox.start_relay();
        let mut tx = outbox.begin().await.unwrap();
        tx.set_context(Some(request_context()));
        let id = tx.enqueue_after_commit(job("mail.send", 1)).await.unwrap();
        tx.commit().await.unwrap();
        let worker = worker(&backend);
        let assignment = worker.next(WAIT).await.expect("the job");
        assert_eq!(assignment.job_id, id);
        // The handler gets the request's context itself, as before.
        assert_eq!(assignment.traceparent, Some(parent_traceparent()));
        assert_eq!(assignment.tracestate.as_deref(), Some(TRACESTATE));
        assert!(worker.finish(&id, Outcome::Completed(None)));
        worker.stop(Duration::from_secs(5)).await;
        outbox.stop_relay().await;
        let stored = backend.snapshot();
        let job = stored.jobs.iter().find(|job| job.id == id).expect("stored");
        assert_eq!(
            job.meta.clone().unwrap(),
            json!({"ojs.context.request_id": "req-1", "traceparent": parent_traceparent(),
                   "tracestate": TRACESTATE}),
            "{url}"
        );
        assert!(!otel::enabled());
    }
    otel::flush();
    let received = received.lock().unwrap();
    assert!(received.bodies.is_empty() && received.spans.is_empty());
}
