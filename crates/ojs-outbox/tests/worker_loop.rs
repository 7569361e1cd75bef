//! The core's worker loop (`worker_loop.rs`) against the real devserver over HTTP: acks,
//! concurrency, handler failure, unknown type, timeout, graceful stop, backend outage,
//! heartbeat, trace context and encrypted args. Tests wait for conditions with a deadline.

use std::sync::Arc;
use std::time::Duration;

use ojs_devserver::{DevServer, Fault};
use ojs_outbox::backend::Backend;
use ojs_outbox::codec::Codec;
use ojs_outbox::worker::WorkerCommand;
use ojs_outbox::worker_loop::{Outcome, WorkerLoop, WorkerOptions};
use ojs_outbox::{Config, ErrorCode, PreparedJob};
use serde_json::{Value, json};
use tokio::time::Instant;

const K1: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
const K3: &str = "AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=";
const WAIT: Duration = Duration::from_secs(10);

fn backend(url: &str, encryption: Option<Value>) -> Backend {
    let mut adapter = json!({"ojs_url": url});
    if let Some(encryption) = encryption {
        adapter["encryption"] = encryption;
    }
    Backend::new(&Config::from_value(&json!({ "adapter": adapter })).unwrap()).unwrap()
}

fn options(extra: Value) -> WorkerOptions {
    let mut all = json!({"queues": ["work"], "worker_id": "w1", "idle_poll_ms": 50});
    for (key, value) in extra.as_object().unwrap() {
        all[key] = value.clone();
    }
    WorkerOptions::from_json(&all.to_string()).unwrap()
}

fn start(server: &DevServer, extra: Value) -> WorkerLoop {
    WorkerLoop::start(backend(&server.url(), None), None, options(extra))
}

fn prepared(job_type: &str, args: &str, options: Value, meta: Option<Value>) -> PreparedJob {
    let mut all = json!({"queue": "work"});
    for (key, value) in options.as_object().unwrap() {
        all[key] = value.clone();
    }
    let meta = meta.map(|m| m.to_string());
    ojs_outbox::job::prepare_json(
        job_type,
        args,
        Some(&all.to_string()),
        meta.as_deref(),
        None,
    )
    .unwrap()
}

async fn push_job(url: &str, job: &PreparedJob) -> String {
    let answer = reqwest::Client::new()
        .post(format!("{url}/ojs/v1/jobs"))
        .header("content-type", "application/openjobspec+json")
        .body(job.wire_json())
        .send()
        .await
        .unwrap();
    assert!(
        answer.status().is_success(),
        "{}",
        answer.text().await.unwrap()
    );
    job.job_id.clone()
}

async fn push(url: &str, args: &str, options: Value) -> String {
    push_job(url, &prepared("mail.send", args, options, None)).await
}

async fn job(url: &str, id: &str) -> Value {
    let get = WorkerCommand::from_json(&json!({"op": "get", "job_id": id}).to_string()).unwrap();
    backend(url, None).worker(&get).await.unwrap()["job"].clone()
}

/// Polls the job until `check` holds; the job as last seen.
async fn until_job(url: &str, id: &str, check: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + WAIT;
    loop {
        let job = job(url, id).await;
        if check(&job) {
            return job;
        }
        assert!(Instant::now() < until, "condition not reached: {job}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The recorded error's code (the devserver records it as `type`, as the servers do).
fn error_code(job: &Value) -> Value {
    let error = &job["error"];
    error
        .get("type")
        .or(error.get("code"))
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_handed_out_and_acked_with_their_results() {
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(push(&url, &format!("[{n}]"), json!({})).await);
    }
    let worker = start(&server, json!({"concurrency": 2}));
    for _ in 0..3 {
        let a = worker.next(WAIT).await.expect("a job");
        assert_eq!(a.job_type, "mail.send");
        assert!(worker.finish(
            &a.job_id,
            Outcome::Completed(Some(json!({"ran": a.args[0]})))
        ));
    }
    for (n, id) in ids.iter().enumerate() {
        let done = until_job(&url, id, |j| j["state"] == "completed").await;
        assert_eq!(done["result"], json!({"ran": n}), "{done}");
    }
    worker.stop(Duration::from_secs(1)).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_jobs_are_held_than_slots() {
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(push(&url, &format!("[{n}]"), json!({})).await);
    }
    let worker = start(&server, json!({"concurrency": 2}));
    let first = worker.next(WAIT).await.unwrap();
    let second = worker.next(WAIT).await.unwrap();
    assert!(
        worker.next(Duration::from_millis(300)).await.is_none(),
        "a third slot"
    );
    assert_eq!(worker.in_flight(), 2);
    let mut active = 0;
    for id in &ids {
        active += usize::from(job(&url, id).await["state"] == "active");
    }
    assert_eq!(active, 2, "the backend holds only two jobs as active");
    assert!(worker.finish(&first.job_id, Outcome::Completed(None)));
    let third = worker
        .next(WAIT)
        .await
        .expect("a freed slot takes one more");
    assert_ne!(third.job_id, second.job_id);
    assert!(worker.finish(&second.job_id, Outcome::Completed(None)));
    assert!(worker.finish(&third.job_id, Outcome::Completed(None)));
    assert!(
        !worker.finish(&third.job_id, Outcome::Completed(None)),
        "twice"
    );
    worker.stop(Duration::from_secs(1)).await;
    server.shutdown().await;
}

/// Nacks one job with `outcome` and checks that the backend hands it out again, one failed
/// attempt later, with the error recorded.
async fn nacked_and_retried(outcome: Outcome, code: &str) {
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    let id = push(&url, "[1]", json!({})).await;
    let worker = start(&server, json!({}));
    let a = worker.next(WAIT).await.unwrap();
    assert_eq!((a.job_id.as_str(), a.attempt), (id.as_str(), 0));
    assert!(worker.finish(&id, outcome));
    let failed = until_job(&url, &id, |j| j["state"] != "active").await;
    assert_eq!(failed["state"], "retryable", "{failed}");
    assert_eq!(failed["attempt"], 1, "{failed}");
    assert_eq!(error_code(&failed), code, "{failed}");
    let again = worker.next(WAIT).await.expect("retried by the backend");
    assert_eq!((again.job_id.as_str(), again.attempt), (id.as_str(), 1));
    assert!(worker.finish(&id, Outcome::Completed(None)));
    until_job(&url, &id, |j| j["state"] == "completed").await;
    worker.stop(Duration::from_secs(1)).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failure_is_nacked_and_retried() {
    let failure = Outcome::Failed {
        code: "RuntimeError".into(),
        message: "boom".into(),
        retryable: None,
        details: Some(json!({"stack": "at line 1"})),
    };
    nacked_and_retried(failure, "RuntimeError").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_type_is_retried_not_discarded() {
    nacked_and_retried(Outcome::UnknownType, "unknown_type").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_timeout_is_nacked_and_its_late_finish_ignored() {
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    let id = push(&url, "[1]", json!({"timeout_ms": 300})).await;
    let worker = start(&server, json!({}));
    let a = worker.next(WAIT).await.unwrap();
    assert!(a.deadline.is_some());
    let nacked = until_job(&url, &id, |j| j["state"] != "active").await;
    assert_eq!(nacked["state"], "retryable", "{nacked}");
    assert_eq!(error_code(&nacked), "timeout", "{nacked}");
    assert_eq!(worker.in_flight(), 0, "the slot is free again");
    assert!(!worker.finish(&id, Outcome::Completed(None)), "too late");
    worker.stop(Duration::from_secs(1)).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_acks_what_finishes_and_requeues_the_rest() {
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    push(&url, "[1]", json!({})).await;
    push(&url, "[2]", json!({})).await;
    let worker = Arc::new(start(&server, json!({"concurrency": 2})));
    let quick = worker.next(WAIT).await.unwrap();
    let slow = worker.next(WAIT).await.unwrap();
    let stopping = tokio::spawn({
        let worker = worker.clone();
        // Long enough that `quick` finishes first on a busy machine; `slow` never finishes.
        async move { worker.stop(Duration::from_secs(5)).await }
    });
    // Nothing new is handed out once stopping.
    assert!(worker.next(Duration::from_millis(200)).await.is_none());
    assert!(worker.finish(&quick.job_id, Outcome::Completed(Some(json!("done")))));
    stopping.await.unwrap();
    let done = job(&url, &quick.job_id).await;
    assert_eq!(
        (&done["state"], &done["result"]),
        (&json!("completed"), &json!("done"))
    );
    let given_back = job(&url, &slow.job_id).await;
    assert_eq!(given_back["state"], "available", "{given_back}");
    assert_eq!(given_back["attempt"], 0, "a requeue uses no attempt");
    assert!(!worker.finish(&slow.job_id, Outcome::Completed(None)));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_stop_ends_the_first_at_once() {
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    let id = push(&url, "[1]", json!({})).await;
    let worker = Arc::new(start(&server, json!({})));
    let held = worker.next(WAIT).await.unwrap();
    assert_eq!(held.job_id, id);
    // The first stop would wait a minute for the handler; the second (a second signal) gives
    // the job back at once, and the first returns with it.
    let first = tokio::spawn({
        let worker = worker.clone();
        async move { worker.stop(Duration::from_secs(60)).await }
    });
    until(|| worker.stopping()).await;
    worker.stop(Duration::ZERO).await;
    tokio::time::timeout(WAIT, first)
        .await
        .expect("the first stop ended with the second")
        .unwrap();
    let given_back = job(&url, &id).await;
    assert_eq!(given_back["state"], "available", "{given_back}");
    let said = worker.drain_log();
    assert!(
        said.iter().any(|e| e.job_id.as_deref() == Some(&id)),
        "{said:?}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_fetched_while_the_stop_came_is_still_run() {
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    let id = push(&url, "[1]", json!({})).await;
    // The fetch for the waiting slot is answered late: the stop comes while it is in flight.
    server.push_fault(Fault::latency(400).on_all_requests().times(1));
    let worker = Arc::new(start(&server, json!({})));
    let slot = tokio::spawn({
        let worker = worker.clone();
        async move { worker.next(WAIT).await }
    });
    until(|| server.faults().is_empty()).await;
    let stopping = tokio::spawn({
        let worker = worker.clone();
        async move { worker.stop(WAIT).await }
    });
    until(|| worker.stopping()).await;
    let late = slot
        .await
        .unwrap()
        .expect("the slot still gets the job fetched for it");
    assert_eq!(late.job_id, id);
    assert!(worker.finish(&id, Outcome::Completed(Some(json!("ran")))));
    stopping.await.unwrap();
    let done = job(&url, &id).await;
    assert_eq!(
        (&done["state"], &done["result"]),
        (&json!("completed"), &json!("ran"))
    );
    assert!(
        worker.next(Duration::from_millis(50)).await.is_none(),
        "then the slot ends"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_wait_takes_jobs_for_several_slots() {
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(push(&url, &format!("[{n}]"), json!({})).await);
    }
    let worker = start(&server, json!({"concurrency": 4}));
    let mut got: Vec<String> = Vec::new();
    let deadline = Instant::now() + WAIT;
    while got.len() < 3 {
        assert!(Instant::now() < deadline, "only {got:?}");
        let jobs = worker.next_up_to(3, WAIT).await;
        assert!(jobs.len() <= 3);
        got.extend(jobs.into_iter().map(|a| a.job_id));
    }
    got.sort();
    ids.sort();
    assert_eq!(got, ids);
    assert_eq!(worker.in_flight(), 3);
    for id in &ids {
        assert!(worker.finish(id, Outcome::Completed(None)));
    }
    worker.stop(WAIT).await;
    server.shutdown().await;
}

/// Until `check` holds (tests wait for conditions, never for times).
async fn until(check: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "the condition never held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_outage_is_waited_out_with_backoff() {
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    let id = push(&url, "[1]", json!({})).await;
    server.push_fault(Fault::status_code(503).on_all_requests().times(1000));
    let worker = start(&server, json!({}));
    assert!(worker.next(Duration::from_millis(1500)).await.is_none());
    let left = server.faults()[0].count.unwrap();
    assert!(
        1000 - left <= 8,
        "{} fetches in 1.5 s: no backoff",
        1000 - left
    );
    assert!(worker.backend_down(), "the outage is known");
    server.clear_faults();
    let a = worker.next(WAIT).await.expect("fetching resumes");
    assert_eq!(a.job_id, id);
    assert!(!worker.backend_down());
    // Said once each, for the binding's logger.
    let said: Vec<String> = worker.drain_log().into_iter().map(|e| e.message).collect();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said[0].contains("unavailable") && said[1].contains("answers again"),
        "{said:?}"
    );
    // An ack that meets the outage is tried again. Stopping first, so that the fetcher (its
    // one slot taken) sends nothing and the ack alone meets the two faults.
    let worker = Arc::new(worker);
    let stopping = tokio::spawn({
        let worker = worker.clone();
        async move { worker.stop(WAIT).await }
    });
    server.push_fault(Fault::status_code(503).on_all_requests().times(2));
    assert!(worker.finish(&id, Outcome::Completed(None)));
    // Both faults meet the ack (this test's reads wait until they are gone).
    let until = Instant::now() + WAIT;
    while !server.faults().is_empty() {
        assert!(
            Instant::now() < until,
            "the ack was not tried again: faults left {:?}, the worker said {:?}",
            server.faults(),
            worker.drain_log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    until_job(&url, &id, |j| j["state"] == "completed").await;
    stopping.await.unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_keeps_a_long_job_reserved() {
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    let id = push(&url, "[1]", json!({})).await;
    // Heartbeats go at a quarter of it: a busy machine would have to stall one for 1.5 s.
    let worker = start(&server, json!({"visibility_timeout_ms": 2000}));
    let a = worker.next(WAIT).await.unwrap();
    let other = backend(&url, None);
    let fetch = WorkerCommand::from_json(
        &json!({"op": "fetch", "queues": ["work"], "worker_id": "w2"}).to_string(),
    )
    .unwrap();
    // The handler holds the job 5 s, more than twice the visibility timeout.
    let until = Instant::now() + Duration::from_millis(5000);
    while Instant::now() < until {
        let answer = other.worker(&fetch).await.unwrap();
        assert_eq!(answer["jobs"], json!([]), "re-delivered: {answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(worker.finish(&a.job_id, Outcome::Completed(None)));
    until_job(&url, &id, |j| j["state"] == "completed").await;
    worker.stop(Duration::from_secs(1)).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_comes_from_meta() {
    let server = DevServer::start(0).await.unwrap();
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let meta = json!({"traceparent": traceparent, "tracestate": "vendor=1"});
    let job = prepared("mail.send", "[1]", json!({}), Some(meta));
    push_job(&server.url(), &job).await;
    let worker = start(&server, json!({}));
    let a = worker.next(WAIT).await.unwrap();
    assert_eq!(a.traceparent.as_deref(), Some(traceparent));
    assert_eq!(a.tracestate.as_deref(), Some("vendor=1"));
    assert_eq!(a.meta["traceparent"], traceparent);
    assert!(worker.finish(&a.job_id, Outcome::Completed(None)));
    worker.stop(Duration::from_secs(1)).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_args_are_decoded_and_undecodable_jobs_never_handed_out() {
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    let ring = json!({"key_id": "k1", "keys": {"k1": K1}});
    let codec = Codec::from_value(&ring).unwrap();
    let foreign = Codec::from_value(&json!({"key_id": "k3", "keys": {"k3": K3}})).unwrap();
    let mut lost = prepared("mail.send", r#"["lost"]"#, json!({}), None);
    foreign.seal(&mut lost).unwrap();
    let mut sealed = prepared("mail.send", r#"[{"to": "a@example.com"}]"#, json!({}), None);
    codec.seal(&mut sealed).unwrap();
    push_job(&url, &lost).await;
    push_job(&url, &sealed).await;
    let worker = WorkerLoop::start(
        backend(&url, Some(ring)),
        Some(Arc::new(codec)),
        options(json!({"concurrency": 2})),
    );
    let a = worker.next(WAIT).await.unwrap();
    assert_eq!(a.job_id, sealed.job_id);
    assert_eq!(a.args, json!([{"to": "a@example.com"}]));
    assert!(worker.next(Duration::from_millis(300)).await.is_none());
    let discarded = until_job(&url, &lost.job_id, |j| j["state"] == "discarded").await;
    assert_eq!(error_code(&discarded), "decode_failed", "{discarded}");
    let said = worker.drain_log();
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0].job_id.as_deref(), Some(lost.job_id.as_str()));
    assert!(said[0].message.contains("decode_failed"), "{said:?}");
    assert!(worker.finish(&a.job_id, Outcome::Completed(None)));
    worker.stop(Duration::from_secs(1)).await;
    server.shutdown().await;
}

#[test]
fn options_are_checked() {
    let code = |text: &str| {
        WorkerOptions::from_json(text)
            .err()
            .map(|e| (e.code, e.field))
    };
    assert_eq!(code(r#"{"queues": ["a"]}"#), None);
    let defaults = WorkerOptions::from_json(r#"{"queues": ["a"]}"#).unwrap();
    assert_eq!(defaults.concurrency, 1);
    assert_eq!(defaults.visibility_timeout, Duration::from_secs(30));
    assert_eq!(defaults.stop_deadline, Duration::from_secs(25));
    let given = WorkerOptions::from_json(r#"{"queues": ["a"], "stop_deadline_ms": 0}"#).unwrap();
    assert_eq!(given.stop_deadline, Duration::ZERO);
    assert_eq!(
        code(r#"{"queues": ["a"], "stop_deadline_ms": 1.5}"#),
        Some((ErrorCode::InvalidConfig, Some("stop_deadline_ms".into())))
    );
    assert_eq!(
        code(r#"{"queues": ["a"], "concurency": 2}"#),
        Some((ErrorCode::InvalidConfig, Some("concurency".into())))
    );
    assert_eq!(
        code(r#"{"queues": []}"#),
        Some((ErrorCode::InvalidConfig, Some("queues".into())))
    );
    assert_eq!(
        code(r#"{"queues": ["a"], "concurrency": 0}"#),
        Some((ErrorCode::InvalidConfig, Some("concurrency".into())))
    );
    assert_eq!(
        code(r#"{"queues": ["a"], "visibility_timeout_ms": -1}"#),
        Some((
            ErrorCode::InvalidConfig,
            Some("visibility_timeout_ms".into())
        ))
    );
}
