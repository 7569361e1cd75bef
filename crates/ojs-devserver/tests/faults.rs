//! Fault injection: statuses with Retry-After, counts, type matching, latency, and accepting a
//! request then dropping the connection without a response.

mod common;

use std::time::{Duration, Instant};

use common::{job, job_id, new_http_client, start};
use ojs_devserver::{Fault, FaultScope};
use serde_json::json;

#[tokio::test]
async fn status_fault_answers_count_times_with_retry_after_then_clears() {
    let (server, client) = start().await;
    server.push_fault(Fault::status_code(429).with_retry_after("2").times(2));

    for attempt in 0..2 {
        let answer = client.enqueue(&job(1, "a")).await;
        assert_eq!(answer.status, 429, "attempt {attempt}");
        assert_eq!(answer.error_code(), "rate_limited");
        assert_eq!(answer.body["error"]["retryable"], true);
        assert_eq!(answer.header("retry-after"), Some("2"));
    }
    let snapshot = server.snapshot();
    assert!(snapshot.jobs.is_empty(), "nothing stored while faulted");
    assert!(
        snapshot.deliveries.is_empty(),
        "refused before processing: no delivery"
    );
    assert_eq!(
        snapshot.requests.single, 2,
        "faulted requests reached the handler"
    );
    assert!(server.faults().is_empty(), "used up");

    let answer = client.enqueue(&job(1, "a")).await;
    assert_eq!(answer.status, 201);
    let snapshot = server.snapshot();
    assert_eq!(snapshot.jobs.len(), 1);
    assert_eq!(snapshot.jobs[0].batch_request, 2);
    assert_eq!(snapshot.deliveries.get(&job_id(1)), Some(&1));
}

#[tokio::test]
async fn status_fault_codes_default_by_status_and_can_be_overridden() {
    let (server, client) = start().await;
    server.push_fault(Fault::status_code(503).times(1));
    server.push_fault(Fault::status_code(500).times(1));
    server.push_fault(Fault::status_code(401).times(1));
    server.push_fault(Fault::status_code(409).with_code("queue_paused").times(1));
    let expected = [
        (503, "backend_unavailable", true),
        (500, "internal_error", true),
        (401, "unauthorized", false),
        (409, "queue_paused", false),
    ];
    for (status, code, retryable) in expected {
        let answer = client.enqueue_batch(&[job(1, "a")]).await;
        assert_eq!(answer.status, status);
        assert_eq!(answer.error_code(), code);
        assert_eq!(answer.body["error"]["retryable"], retryable);
        assert_eq!(answer.header("retry-after"), None);
    }
    assert_eq!(client.enqueue_batch(&[job(1, "a")]).await.status, 201);
}

#[tokio::test]
async fn fault_until_cleared_and_fault_list_over_http() {
    let (server, client) = start().await;
    let added = client
        .post(
            "/_dev/faults",
            &json!({"status": 503, "retry_after": "1", "match_type": null}),
        )
        .await;
    assert_eq!(added.status, 200);
    assert_eq!(added.body["faults"][0]["status"], 503);
    assert_eq!(added.body["faults"][0]["count"], serde_json::Value::Null);
    assert_eq!(added.body["faults"][0]["applies_to"], "enqueue");

    for n in 0..5 {
        assert_eq!(client.enqueue(&job(n, "a")).await.status, 503);
    }
    let listed = client.get("/_dev/faults").await;
    assert_eq!(listed.body["faults"].as_array().map(Vec::len), Some(1));

    let cleared = client.delete("/_dev/faults").await;
    assert_eq!(cleared.status, 200);
    assert_eq!(cleared.body["faults"], json!([]));
    assert_eq!(client.enqueue(&job(9, "a")).await.status, 201);
    assert_eq!(server.snapshot().jobs.len(), 1);

    // Faults that could never work are refused.
    for bad in [
        json!({"status": 200}),
        json!({"status": 503, "count": 0}),
        json!({}),
        json!({"status": "503"}),
    ] {
        let answer = client.post("/_dev/faults", &bad).await;
        assert_eq!(answer.status, 400, "{bad}");
    }
    assert!(server.faults().is_empty());

    // A conformance step can be posted as is: unknown keys such as "op" are ignored.
    let step = json!({"op": "backend_fault", "status": 500, "code": "backend_error", "count": 1});
    assert_eq!(client.post("/_dev/faults", &step).await.status, 200);
    let answer = client.enqueue(&job(10, "a")).await;
    assert_eq!(answer.status, 500);
    assert_eq!(answer.error_code(), "backend_error");
}

#[tokio::test]
async fn match_type_fault_hits_only_requests_carrying_that_type() {
    let (server, client) = start().await;
    server.push_fault(Fault::status_code(500).matching_type("email.send"));

    assert_eq!(client.enqueue(&job(1, "report.build")).await.status, 201);
    assert_eq!(client.enqueue(&job(2, "email.send")).await.status, 500);
    // A batch carrying one matching job is hit as a whole.
    assert_eq!(
        client
            .enqueue_batch(&[job(3, "report.build"), job(4, "email.send")])
            .await
            .status,
        500
    );
    assert_eq!(
        client
            .enqueue_batch(&[job(5, "report.build"), job(6, "sms.send")])
            .await
            .status,
        201
    );
    // GETs never carry a type.
    assert_eq!(
        client
            .get(&format!("/ojs/v1/jobs/{}", job_id(1)))
            .await
            .status,
        200
    );
    let received = server.snapshot();
    let ids: Vec<&str> = received.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, vec![job_id(1), job_id(5), job_id(6)]);
    assert_eq!(server.faults().len(), 1, "an unlimited fault stays");
}

#[tokio::test]
async fn faults_apply_in_fifo_order_first_match_wins() {
    let (server, client) = start().await;
    server.push_fault(Fault::status_code(503).matching_type("b").times(1));
    server.push_fault(Fault::status_code(429).times(1));
    // "a" skips the first fault (wrong type) and takes the second.
    assert_eq!(client.enqueue(&job(1, "a")).await.status, 429);
    // "b" takes the first.
    assert_eq!(client.enqueue(&job(2, "b")).await.status, 503);
    assert!(server.faults().is_empty());
    assert_eq!(client.enqueue(&job(3, "b")).await.status, 201);
}

#[tokio::test]
async fn enqueue_faults_leave_other_endpoints_alone_unless_applies_to_all() {
    let (server, client) = start().await;
    server.push_fault(Fault::status_code(503));
    assert_eq!(client.get("/ojs/v1/health").await.status, 200);
    assert_eq!(client.get("/ojs/manifest").await.status, 200);
    assert_eq!(client.get("/_dev/received").await.status, 200);
    server.clear_faults();

    server.push_fault(Fault::status_code(503).on_all_requests().times(2));
    assert_eq!(server.faults()[0].applies_to, FaultScope::All);
    assert_eq!(client.get("/ojs/v1/health").await.status, 503);
    assert_eq!(
        client
            .get(&format!("/ojs/v1/jobs/{}", job_id(1)))
            .await
            .status,
        503
    );
    assert_eq!(
        client.get("/_dev/received").await.status,
        200,
        "control API is never faulted"
    );
    assert_eq!(client.get("/ojs/v1/health").await.status, 200);
    assert_eq!(server.snapshot().requests.get, 1);
}

#[tokio::test]
async fn latency_fault_delays_then_handles_normally() {
    let (server, client) = start().await;
    server.push_fault(Fault::latency(300).times(1));
    let started = Instant::now();
    let answer = client.enqueue(&job(1, "a")).await;
    let slow = started.elapsed();
    assert_eq!(answer.status, 201);
    assert!(
        slow >= Duration::from_millis(300),
        "took {slow:?}, expected >= 300ms"
    );
    assert!(server.faults().is_empty(), "count 1: used up");
    assert_eq!(client.enqueue(&job(2, "a")).await.status, 201);
    assert_eq!(server.snapshot().jobs.len(), 2);

    // Latency combined with a status: slow, then refused.
    server.push_fault(Fault::status_code(503).with_latency_ms(200).times(1));
    let started = Instant::now();
    assert_eq!(client.enqueue(&job(3, "a")).await.status, 503);
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(server.snapshot().jobs.len(), 2);
}

#[tokio::test]
async fn drop_after_accept_stores_the_job_but_sends_no_response() {
    let (server, client) = start().await;
    // Warm a keep-alive connection first, so the drop happens on a reused connection.
    assert_eq!(client.enqueue(&job(0, "warm")).await.status, 201);
    server.push_fault(Fault::accept_then_drop().times(1));

    let error = client
        .post_expecting_no_response("/ojs/v1/jobs", &job(1, "a"))
        .await;
    assert!(
        !error.is_status() && !error.is_timeout(),
        "a transport error, got {error:?}"
    );

    let received = server.snapshot();
    let ids: Vec<&str> = received.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, vec![job_id(0), job_id(1)], "accepted before the drop");
    assert_eq!(received.deliveries.get(&job_id(1)), Some(&1));

    // The client re-sends the same id: the backend already has it.
    let again = client.enqueue(&job(1, "a")).await;
    assert_eq!(again.status, 409);
    assert_eq!(again.error_code(), "duplicate");
    let received = server.snapshot();
    assert_eq!(received.jobs.len(), 2);
    assert_eq!(received.deliveries.get(&job_id(1)), Some(&2));
    assert_eq!(received.requests.single, 3);
}

#[tokio::test]
async fn drop_after_accept_on_a_batch_stores_the_whole_batch() {
    let (server, client) = start().await;
    server.push_fault(Fault::accept_then_drop().times(1));
    let jobs = [job(1, "a"), job(2, "a"), job(3, "a")];
    client
        .post_expecting_no_response("/ojs/v1/jobs/batch", &json!({ "jobs": jobs }))
        .await;
    assert_eq!(server.snapshot().jobs.len(), 3);

    // Settling row by row, as a relay would: every row is already there.
    for row in &jobs {
        let answer = client.enqueue(row).await;
        assert_eq!(answer.status, 409);
        let fetched = client
            .get(&format!("/ojs/v1/jobs/{}", row["id"].as_str().unwrap()))
            .await;
        assert_eq!(fetched.status, 200);
    }
    let received = server.snapshot();
    assert_eq!(received.jobs.len(), 3);
    assert!(received.deliveries.values().all(|&n| n == 2));
}

#[tokio::test]
async fn drop_with_a_status_refuses_and_closes_without_response() {
    let (server, client) = start().await;
    server.push_fault(Fault {
        status: Some(503),
        drop_after_accept: true,
        count: Some(1),
        ..Fault::default()
    });
    client
        .post_expecting_no_response("/ojs/v1/jobs", &job(1, "a"))
        .await;
    let received = server.snapshot();
    assert!(received.jobs.is_empty());
    assert!(received.deliveries.is_empty());
    assert_eq!(client.enqueue(&job(1, "a")).await.status, 201);
}

#[tokio::test]
async fn drop_sends_no_bytes_at_all() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (server, _client) = start().await;
    server.push_fault(Fault::accept_then_drop());
    let body = job(1, "a").to_string();
    let mut stream = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connect");
    let request = format!(
        "POST /ojs/v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut received))
        .await
        .expect("the server closes the connection");
    // Either a clean close (0 bytes) or a reset; never a response.
    if let Ok(n) = read {
        assert_eq!(n, 0);
    }
    assert!(
        received.is_empty(),
        "got {:?}",
        String::from_utf8_lossy(&received)
    );
    assert_eq!(server.snapshot().jobs.len(), 1);
    // Independent clients keep working while the fault stays armed for enqueues only.
    let health = new_http_client()
        .get(format!("{}/ojs/v1/health", server.url()))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status().as_u16(), 200);
}
