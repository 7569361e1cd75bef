//! The worker endpoints (`/ojs/v1/workers/fetch|ack|nack|heartbeat`) over real HTTP: fetch
//! order, the `scheduled` wait, ack and nack transitions, retries to discard, reservations that
//! run out, heartbeats, and the refusals. Every wait polls for its condition under a deadline;
//! nothing sleeps for a fixed time to prove a point.

mod common;

use std::time::{Duration, Instant};

use common::{Answer, Client, assert_envelope, assert_error, job, job_id, start, utc_ms_after};
use ojs_devserver::Fault;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

async fn fetch(client: &Client, body: Value) -> Answer {
    let answer = client.post("/ojs/v1/workers/fetch", &body).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    answer
}

fn fetched_ids(answer: &Answer) -> Vec<String> {
    answer.body["jobs"]
        .as_array()
        .expect("jobs array")
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Fetches until a job comes back; fails after the deadline.
async fn fetch_until_one(client: &Client, body: Value) -> Value {
    let give_up = Instant::now() + DEADLINE;
    loop {
        let answer = fetch(client, body.clone()).await;
        if let Some(job) = answer.body["jobs"].get(0) {
            return job.clone();
        }
        assert!(
            Instant::now() < give_up,
            "no job came back within the deadline"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn enqueue_with(client: &Client, n: u64, options: Value) {
    let mut pushed = job(n, "work.item");
    pushed["options"] = options;
    let answer = client.enqueue(&pushed).await;
    assert_eq!(answer.status, 201, "{:?}", answer.body);
}

async fn get_job(client: &Client, n: u64) -> Value {
    let answer = client.get(&format!("/ojs/v1/jobs/{}", job_id(n))).await;
    assert_eq!(answer.status, 200);
    answer.body["job"].clone()
}

#[tokio::test]
async fn fetch_takes_the_queues_in_order_then_priority_then_arrival() {
    let (server, client) = start().await;
    for (n, priority) in [(1, 0), (2, 5), (3, 0), (4, -3), (5, 5)] {
        enqueue_with(&client, n, json!({ "queue": "q", "priority": priority })).await;
    }
    enqueue_with(&client, 6, json!({ "queue": "first" })).await;
    enqueue_with(&client, 7, json!({ "queue": "elsewhere" })).await;

    let answer = fetch(
        &client,
        json!({ "queues": ["first", "q"], "count": 10, "worker_id": "w-1" }),
    )
    .await;
    let expected: Vec<String> = [6, 2, 5, 1, 3, 4].map(job_id).to_vec();
    assert_eq!(fetched_ids(&answer), expected);
    // The servers also name the first job alone.
    assert_eq!(answer.body["job"], answer.body["jobs"][0]);
    for fetched in answer.body["jobs"].as_array().unwrap() {
        assert_envelope(fetched, &["active"]);
        assert_eq!(fetched["attempt"], 0, "a fetch uses no attempt: {fetched}");
        assert_eq!(fetched["worker_id"], "w-1");
        assert!(common::is_utc_timestamp(
            fetched["started_at"].as_str().unwrap()
        ));
    }
    // The others and the received document see the same state.
    assert_eq!(get_job(&client, 2).await["state"], "active");
    let received = server.snapshot();
    let states: Vec<(&str, &str)> = received
        .jobs
        .iter()
        .map(|j| (j.id.as_str(), j.state.as_str()))
        .collect();
    assert!(
        states.contains(&(job_id(4).as_str(), "active")),
        "{states:?}"
    );
    assert!(
        states.contains(&(job_id(7).as_str(), "available")),
        "{states:?}"
    );

    // Nothing left in those queues: an empty list, no `job`.
    let empty = fetch(&client, json!({ "queues": ["q", "first"] })).await;
    assert_eq!(empty.body, json!({ "jobs": [] }));
    // Default count 1.
    let one = fetch(&client, json!({ "queues": ["elsewhere"], "count": 0 })).await;
    assert_eq!(fetched_ids(&one), vec![job_id(7)]);
    server.shutdown().await;
}

#[tokio::test]
async fn a_scheduled_job_is_handed_out_only_once_it_is_due() {
    let (server, client) = start().await;
    let due_at = utc_ms_after(800);
    enqueue_with(&client, 1, json!({ "delay_until": due_at })).await;
    enqueue_with(
        &client,
        2,
        json!({ "scheduled_at": utc_ms_after(3_600_000) }),
    )
    .await;

    let got = fetch_until_one(&client, json!({ "queues": ["default"], "count": 5 })).await;
    assert_eq!(got["id"], job_id(1));
    let started_at = got["started_at"].as_str().unwrap();
    assert!(
        started_at >= due_at.as_str(),
        "handed out at {started_at}, due at {due_at}"
    );
    assert_eq!(get_job(&client, 2).await["state"], "scheduled");
    let again = fetch(&client, json!({ "queues": ["default"], "count": 5 })).await;
    assert_eq!(again.body, json!({ "jobs": [] }));
    server.shutdown().await;
}

#[tokio::test]
async fn ack_completes_an_active_job_and_refuses_anything_else() {
    let (server, client) = start().await;
    enqueue_with(&client, 1, json!({})).await;
    enqueue_with(&client, 2, json!({})).await;
    fetch(&client, json!({ "queues": ["default"] })).await;

    let result = json!({ "sent": true, "n": [1, 2] });
    let acked = client
        .post(
            "/ojs/v1/workers/ack",
            &json!({ "job_id": job_id(1), "result": result }),
        )
        .await;
    assert_eq!(acked.status, 200, "{:?}", acked.body);
    common::assert_ojs_headers(&acked);
    assert_eq!(acked.body["acknowledged"], true);
    assert_eq!(acked.body["job_id"], job_id(1));
    assert_eq!(acked.body["state"], "completed");
    let completed_at = acked.body["completed_at"].as_str().unwrap();
    assert_eq!(acked.body["job"]["completed_at"], completed_at);
    let stored = get_job(&client, 1).await;
    assert_eq!(stored["state"], "completed");
    assert_eq!(stored["result"], result);
    assert_eq!(stored["attempt"], 0);
    assert!(stored.get("worker_id").is_none(), "{stored}");

    // Again: no longer active.
    let again = client
        .post("/ojs/v1/workers/ack", &json!({ "job_id": job_id(1) }))
        .await;
    let error = assert_error(&again, 409, "invalid_request");
    assert_eq!(
        error["details"],
        json!({ "job_id": job_id(1), "current_state": "completed", "expected_state": "active" })
    );
    // Never fetched.
    let available = client
        .post(
            "/ojs/v1/workers/nack",
            &json!({ "job_id": job_id(2), "error": {"message": "x"} }),
        )
        .await;
    let error = assert_error(&available, 409, "invalid_request");
    assert_eq!(error["details"]["current_state"], "available");
    // Unknown ids, valid or not.
    for unknown in [job_id(99), "nope".to_owned()] {
        for path in ["/ojs/v1/workers/ack", "/ojs/v1/workers/nack"] {
            let answer = client.post(path, &json!({ "job_id": unknown })).await;
            let error = assert_error(&answer, 404, "not_found");
            assert_eq!(
                error["details"],
                json!({ "resource_type": "job", "resource_id": unknown })
            );
        }
    }
    // Bodies the servers cannot read.
    for path in ["/ojs/v1/workers/ack", "/ojs/v1/workers/nack"] {
        assert_error(&client.post(path, &json!({})).await, 400, "invalid_request");
        let broken = client.post_raw(path, common::OJS_JSON, "{".into()).await;
        assert_error(&broken, 400, "invalid_request");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn nack_retries_after_the_backoff_and_discards_when_attempts_run_out() {
    let (server, client) = start().await;
    let retry =
        json!({ "max_attempts": 3, "initial_interval": "PT0.3S", "backoff_coefficient": 1.0 });
    enqueue_with(&client, 1, json!({ "queue": "r", "retry": retry })).await;
    let fetch_body = json!({ "queues": ["r"], "worker_id": "w" });
    fetch(&client, fetch_body.clone()).await;

    let error = json!({ "code": "handler_error", "message": "boom", "details": {"k": 1} });
    for failures in 1..=3u64 {
        let nacked = client
            .post(
                "/ojs/v1/workers/nack",
                &json!({ "job_id": job_id(1), "error": error }),
            )
            .await;
        assert_eq!(nacked.status, 200, "{:?}", nacked.body);
        let body = &nacked.body;
        assert_eq!(body["job_id"], job_id(1));
        assert_eq!(body["attempt"], failures);
        assert_eq!(body["max_attempts"], 3);
        // The error as the servers record it: type from the code, the failed attempt 0-based.
        let recorded = json!({ "message": "boom", "type": "handler_error",
                               "details": {"k": 1}, "attempt": failures - 1 });
        assert_eq!(body["job"]["error"], recorded);
        assert_eq!(
            body["job"]["errors"].as_array().unwrap().len() as u64,
            failures
        );
        if failures < 3 {
            assert_eq!(body["state"], "retryable");
            assert_eq!(body["job"]["retry_delay_ms"], 300);
            let next = body["next_attempt_at"].as_str().unwrap().to_owned();
            // Not handed out before its time, then handed out again.
            let again = fetch_until_one(&client, fetch_body.clone()).await;
            assert_eq!(again["id"], job_id(1));
            assert_eq!(again["attempt"], failures);
            let started_at = again["started_at"].as_str().unwrap();
            assert!(started_at >= next.as_str(), "{started_at} before {next}");
        } else {
            assert_eq!(body["state"], "discarded");
            assert!(body.get("next_attempt_at").is_none());
            assert_eq!(body["discarded_at"], body["job"]["completed_at"]);
        }
    }
    let stored = get_job(&client, 1).await;
    assert_eq!(stored["state"], "discarded");
    assert_eq!(stored["attempt"], 3);
    let empty = fetch(&client, fetch_body).await;
    assert_eq!(empty.body, json!({ "jobs": [] }));
    server.shutdown().await;
}

#[tokio::test]
async fn a_non_retryable_error_discards_at_once_and_requeue_gives_the_job_back() {
    let (server, client) = start().await;
    let retry = json!({ "max_attempts": 5, "non_retryable_errors": ["ValidationError"] });
    for n in 1..=3 {
        enqueue_with(&client, n, json!({ "retry": retry })).await;
    }
    fetch(&client, json!({ "queues": ["default"], "count": 3 })).await;
    let nack = |n: u64, body: Value| {
        let client = &client;
        async move {
            let mut body = body;
            body["job_id"] = json!(job_id(n));
            let answer = client.post("/ojs/v1/workers/nack", &body).await;
            assert_eq!(answer.status, 200, "{:?}", answer.body);
            answer.body
        }
    };
    let told = nack(
        1,
        json!({ "error": { "message": "bad", "retryable": false } }),
    )
    .await;
    assert_eq!(
        (told["state"].as_str(), told["attempt"].as_u64()),
        (Some("discarded"), Some(1))
    );
    let listed = nack(
        2,
        json!({ "error": { "type": "ValidationError", "message": "x" } }),
    )
    .await;
    assert_eq!(listed["state"], "discarded");

    let requeued = nack(3, json!({ "requeue": true })).await;
    assert_eq!(requeued["state"], "available");
    assert_eq!(requeued["attempt"], 0);
    assert!(requeued["job"].get("started_at").is_none(), "{requeued}");
    let again = fetch(&client, json!({ "queues": ["default"] })).await;
    assert_eq!(fetched_ids(&again), vec![job_id(3)]);
    server.shutdown().await;
}

#[tokio::test]
async fn an_expired_reservation_returns_on_a_later_fetch_and_a_heartbeat_extends_one() {
    let (server, client) = start().await;
    enqueue_with(&client, 1, json!({ "queue": "v" })).await;
    enqueue_with(&client, 2, json!({ "queue": "v" })).await;
    // Long enough for the heartbeat below to come first on a busy machine; job 2's return
    // is waited for.
    let first = fetch(
        &client,
        json!({ "queues": ["v"], "count": 2, "worker_id": "w-1", "visibility_timeout_ms": 2000 }),
    )
    .await;
    assert_eq!(fetched_ids(&first), vec![job_id(1), job_id(2)]);

    // Job 1 is kept alive; job 2 is left to run out.
    let beat = client
        .post(
            "/ojs/v1/workers/heartbeat",
            &json!({ "worker_id": "w-1", "active_jobs": [job_id(1), job_id(99)],
                     "visibility_timeout_ms": 60_000 }),
        )
        .await;
    assert_eq!(beat.status, 200, "{:?}", beat.body);
    assert_eq!(beat.body["state"], "active");
    assert_eq!(beat.body["directive"], "continue");
    assert_eq!(beat.body["jobs_extended"], json!([job_id(1)]));
    assert!(common::is_utc_timestamp(
        beat.body["server_time"].as_str().unwrap()
    ));

    let back = fetch_until_one(&client, json!({ "queues": ["v"], "worker_id": "w-2" })).await;
    assert_eq!(back["id"], job_id(2));
    assert_eq!(
        back["attempt"], 0,
        "a reservation that ran out uses no attempt"
    );
    assert_eq!(back["worker_id"], "w-2");
    // Job 1's first reservation ran out at the same time, but the heartbeat extended it.
    let one = get_job(&client, 1).await;
    assert_eq!(one["state"], "active");
    assert_eq!(one["worker_id"], "w-1");
    let acked = client
        .post("/ojs/v1/workers/ack", &json!({ "job_id": job_id(1) }))
        .await;
    assert_eq!(acked.status, 200);

    // Nothing to extend, and a heartbeat without a worker id.
    let idle = client
        .post(
            "/ojs/v1/workers/heartbeat",
            &json!({ "worker_id": "w-1", "job_id": job_id(1) }),
        )
        .await;
    assert_eq!(idle.status, 200);
    assert!(idle.body.get("jobs_extended").is_none(), "{:?}", idle.body);
    let anonymous = client
        .post(
            "/ojs/v1/workers/heartbeat",
            &json!({ "active_jobs": [job_id(2)] }),
        )
        .await;
    assert_error(&anonymous, 400, "invalid_request");
    server.shutdown().await;
}

#[tokio::test]
async fn worker_requests_are_refused_as_the_servers_refuse_them() {
    let (server, client) = start().await;
    for body in [json!({}), json!({ "queues": [] }), json!({ "count": 2 })] {
        let answer = client.post("/ojs/v1/workers/fetch", &body).await;
        assert_error(&answer, 400, "invalid_request");
    }
    let typed = client
        .post(
            "/ojs/v1/workers/fetch",
            &json!({ "queues": ["q"], "count": "2" }),
        )
        .await;
    assert_error(&typed, 400, "invalid_request");
    let wrong_method = client.get("/ojs/v1/workers/fetch").await;
    assert_error(&wrong_method, 405, "invalid_request");
    assert_eq!(wrong_method.header("allow"), Some("POST"));
    let unknown = client.post("/ojs/v1/workers/steal", &json!({})).await;
    assert_error(&unknown, 404, "not_found");
    // Faults that apply to every OJS request hit the worker endpoints; enqueue-only ones do not.
    server.push_fault(Fault::status_code(503));
    server.push_fault(Fault::status_code(500).on_all_requests().times(1));
    let faulted = client
        .post("/ojs/v1/workers/fetch", &json!({ "queues": ["q"] }))
        .await;
    assert_eq!(faulted.status, 500);
    fetch(&client, json!({ "queues": ["q"] })).await;
    server.shutdown().await;
}

#[tokio::test]
async fn delete_cancels_a_job_that_is_not_terminal_as_the_servers_do() {
    let (server, client) = start().await;
    enqueue_with(&client, 1, json!({})).await;
    enqueue_with(&client, 2, json!({})).await;
    enqueue_with(
        &client,
        3,
        json!({ "scheduled_at": utc_ms_after(3_600_000) }),
    )
    .await;
    enqueue_with(&client, 4, json!({})).await;

    // An available job: cancelled at once, answered with its envelope, never handed out.
    let cancelled = client.delete(&format!("/ojs/v1/jobs/{}", job_id(1))).await;
    assert_eq!(cancelled.status, 200, "{:?}", cancelled.body);
    common::assert_ojs_headers(&cancelled);
    assert_envelope(&cancelled.body["job"], &["cancelled"]);
    assert!(
        cancelled.body["job"]["cancelled_at"].is_string(),
        "{:?}",
        cancelled.body
    );
    assert_eq!(get_job(&client, 1).await["state"], "cancelled");
    // A scheduled job too.
    let scheduled = client.delete(&format!("/ojs/v1/jobs/{}", job_id(3))).await;
    assert_eq!(scheduled.body["job"]["state"], "cancelled");

    // An active job: its worker can no longer ack, nack or extend it.
    let held = fetch_until_one(&client, json!({ "queues": ["default"], "count": 1 })).await;
    assert_eq!(held["id"], job_id(2), "the cancelled job 1 was handed out");
    let active = client.delete(&format!("/ojs/v1/jobs/{}", job_id(2))).await;
    assert_eq!(active.status, 200, "{:?}", active.body);
    assert_eq!(active.body["job"]["state"], "cancelled");
    let ack = client
        .post("/ojs/v1/workers/ack", &json!({ "job_id": job_id(2) }))
        .await;
    let error = assert_error(&ack, 409, "invalid_request");
    assert_eq!(error["details"]["current_state"], "cancelled");
    let beat = client
        .post(
            "/ojs/v1/workers/heartbeat",
            &json!({ "worker_id": "w", "active_jobs": [job_id(2)] }),
        )
        .await;
    assert_eq!(beat.status, 200, "{:?}", beat.body);
    assert!(beat.body.get("jobs_extended").is_none(), "{:?}", beat.body);

    // The rest is handed out; the cancelled ones never are.
    let rest = fetch(&client, json!({ "queues": ["default"], "count": 10 })).await;
    assert_eq!(fetched_ids(&rest), [job_id(4)]);

    // Terminal jobs are refused with the state they are in; unknown ids are 404.
    let acked = client
        .post("/ojs/v1/workers/ack", &json!({ "job_id": job_id(4) }))
        .await;
    assert_eq!(acked.status, 200, "{:?}", acked.body);
    for (n, state) in [(1, "cancelled"), (4, "completed")] {
        let again = client.delete(&format!("/ojs/v1/jobs/{}", job_id(n))).await;
        let error = assert_error(&again, 409, "invalid_request");
        assert_eq!(error["details"]["current_state"], state, "{error}");
    }
    let unknown = client.delete(&format!("/ojs/v1/jobs/{}", job_id(99))).await;
    assert_error(&unknown, 404, "not_found");
    let put = client
        .send(
            client
                .http
                .put(format!("{}/ojs/v1/jobs/{}", client.base, job_id(4))),
        )
        .await;
    assert_error(&put, 405, "invalid_request");
    assert_eq!(put.header("allow"), Some("GET, DELETE"));

    // A client's cancel keeps the job among those received (only a unique `replace` moves
    // a job to `replaced`).
    let received = client.received().await;
    assert_eq!(common::received_ids(&received).len(), 4, "{received}");
    assert_eq!(received["replaced"], json!([]));
    server.shutdown().await;
}
