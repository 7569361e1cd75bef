//! `GET /v1/events/stream` (RFC-0005) read by a real HTTP client: the CloudEvents envelope,
//! the order of a job's events, filters, replay from `Last-Event-ID` after `/_dev/events/drop`
//! and from `since`, the failed → discarded path, and the control API's refusals. Every wait
//! has a deadline; nothing sleeps for a fixed time.

mod common;

use std::time::Duration;

use common::{BINDING_ERROR_CODES, Client, is_utc_timestamp, is_uuid_v7, job, job_id, start};
use ojs_devserver::DevServer;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

/// One SSE frame as received.
#[derive(Debug, Clone)]
struct Frame {
    id: Option<String>,
    event: String,
    data: Value,
}

impl Frame {
    fn subject(&self) -> &str {
        self.data["subject"].as_str().unwrap_or("")
    }
}

/// A subscriber: reads frames off one `GET /v1/events/stream` response.
struct Stream {
    response: reqwest::Response,
    buffer: String,
}

impl Stream {
    async fn open(client: &Client, query: &str, last_event_id: Option<&str>) -> Stream {
        let mut request = client
            .http
            .get(format!("{}/v1/events/stream{query}", client.base))
            .header("Accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.expect("subscribe");
        assert_eq!(response.status().as_u16(), 200);
        let content_type = response.headers()["content-type"].to_str().unwrap();
        assert_eq!(content_type, "text/event-stream");
        Stream {
            response,
            buffer: String::new(),
        }
    }

    /// The next frame, or `None` once the server ended the stream. Panics after the deadline.
    async fn next(&mut self) -> Option<Frame> {
        tokio::time::timeout(DEADLINE, self.next_inner())
            .await
            .expect("no event stream frame within the deadline")
    }

    async fn next_inner(&mut self) -> Option<Frame> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut frame = Frame {
                    id: None,
                    event: String::new(),
                    data: Value::Null,
                };
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        frame.id = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        frame.event = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        frame.data = serde_json::from_str(v).expect("data is JSON");
                    }
                }
                if frame.data.is_null() {
                    continue; // a comment or a retry line
                }
                return Some(frame);
            }
            match self.response.chunk().await {
                Ok(Some(bytes)) => self.buffer.push_str(std::str::from_utf8(&bytes).unwrap()),
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Frames until (and with) the first whose subject is `subject` and type is `kind`.
    async fn until(&mut self, kind: &str, subject: &str) -> Vec<Frame> {
        let mut frames = Vec::new();
        loop {
            let frame = self.next().await.expect("the stream ended early");
            let done = frame.event == kind && frame.subject() == subject;
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// Exactly `n` frames.
    async fn take(&mut self, n: usize) -> Vec<Frame> {
        let mut frames = Vec::new();
        for _ in 0..n {
            frames.push(self.next().await.expect("the stream ended early"));
        }
        frames
    }
}

async fn control(client: &Client, id: &str, action: &str, body: Option<Value>) -> common::Answer {
    let url = format!("{}/_dev/jobs/{id}/{action}", client.base);
    let request = client.http.post(url);
    let request = match body {
        Some(body) => request
            .header("Content-Type", "application/json")
            .body(body.to_string()),
        None => request,
    };
    client.send(request).await
}

fn kinds(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(|f| f.event.as_str()).collect()
}

fn ids(frames: &[Frame]) -> Vec<String> {
    frames.iter().map(|f| f.id.clone().expect("id")).collect()
}

#[tokio::test]
async fn a_job_is_enqueued_started_and_completed_in_order_as_cloudevents() {
    let (server, client) = start().await;
    let mut stream = Stream::open(&client, "", None).await;
    let id = job_id(1);
    let mut pushed = job(1, "email.send");
    pushed["options"] = json!({ "queue": "email" });
    assert_eq!(client.enqueue(&pushed).await.status, 201);
    let started = control(&client, &id, "start", Some(json!({ "worker_id": "w-7" }))).await;
    assert_eq!(started.status, 200, "{:?}", started.body);
    assert_eq!(started.body["job"]["state"], "active");
    let completed = control(&client, &id, "complete", None).await;
    assert_eq!(completed.status, 200, "{:?}", completed.body);

    let frames = stream.take(3).await;
    assert_eq!(
        kinds(&frames),
        ["job.enqueued", "job.started", "job.completed"]
    );
    for frame in &frames {
        let e = &frame.data;
        assert_eq!(e["specversion"], "1.0");
        assert_eq!(frame.id.as_deref(), e["id"].as_str());
        assert!(is_uuid_v7(e["id"].as_str().unwrap()), "{e}");
        assert_eq!(e["type"], frame.event.as_str());
        assert_eq!(e["source"], "/ojs/backend/devserver");
        let time = e["time"].as_str().unwrap();
        assert!(is_utc_timestamp(time) && time.len() == 24, "{time}");
        assert_eq!(e["subject"], id.as_str());
        assert_eq!(e["datacontenttype"], "application/json");
        assert_eq!(e["data"]["job_id"], id.as_str());
        assert_eq!(e["data"]["type"], "email.send");
        assert_eq!(e["data"]["queue"], "email");
    }
    assert_eq!(frames[0].data["data"]["state"], "available");
    let started = &frames[1].data["data"];
    assert_eq!(started["state"], "active");
    assert_eq!(started["attempt"], 1);
    assert_eq!(started["worker_id"], "w-7");
    let done = &frames[2].data["data"];
    assert_eq!(done["state"], "completed");
    assert_eq!(done["attempt"], 1);
    assert!(done["duration_ms"].as_u64().is_some(), "{done}");

    let info = client.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(info.body["job"]["state"], "completed");
    // `attempt` counts failed attempts, as the reference servers count it; the events number
    // the attempt they are about.
    assert_eq!(info.body["job"]["attempt"], 0);
    assert!(is_utc_timestamp(
        info.body["job"]["completed_at"].as_str().unwrap()
    ));
    server.shutdown().await;
}

#[tokio::test]
async fn a_clients_cancel_emits_job_cancelled() {
    let (server, client) = start().await;
    let mut stream = Stream::open(&client, "?types=job.*", None).await;
    let id = job_id(1);
    assert_eq!(client.enqueue(&job(1, "email.send")).await.status, 201);
    let cancelled = client.delete(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(cancelled.status, 200, "{:?}", cancelled.body);

    let frames = stream.take(2).await;
    assert_eq!(kinds(&frames), ["job.enqueued", "job.cancelled"]);
    let data = &frames[1].data["data"];
    assert_eq!(data["job_id"], id.as_str());
    assert_eq!(data["state"], "cancelled");
    assert_eq!(data["cancelled_by"], "client");
    server.shutdown().await;
}

#[tokio::test]
async fn batch_push_and_a_unique_replace_emit_enqueued_and_cancelled() {
    let (server, client) = start().await;
    let mut stream = Stream::open(&client, "?types=job.*", None).await;
    let unique = json!({ "keys": ["type"], "on_conflict": "replace" });
    let mut first = job(1, "report.build");
    first["options"] = json!({ "unique": unique });
    let mut second = job(2, "report.build");
    second["options"] = json!({ "unique": unique });
    let answer = client.enqueue_batch(&[job(3, "a.b"), first]).await;
    assert_eq!(answer.status, 201, "{:?}", answer.body);
    assert_eq!(client.enqueue(&second).await.status, 201);
    let frames = stream.until("job.cancelled", &job_id(1)).await;
    assert_eq!(
        kinds(&frames),
        [
            "job.enqueued",
            "job.enqueued",
            "job.enqueued",
            "job.cancelled"
        ]
    );
    let subjects: Vec<&str> = frames.iter().map(Frame::subject).collect();
    assert_eq!(subjects, [job_id(3), job_id(1), job_id(2), job_id(1)]);
    let cancelled = &frames[3].data["data"];
    assert_eq!(cancelled["state"], "cancelled");
    assert_eq!(cancelled["replaced_by"], job_id(2).as_str());
    assert!(cancelled["cancelled_by"].is_string());
    server.shutdown().await;
}

#[tokio::test]
async fn filters_select_types_by_prefix_queues_and_job_types() {
    let (server, client) = start().await;
    let mut by_type = Stream::open(&client, "?types=job.start*,job.completed", None).await;
    let mut by_queue = Stream::open(&client, "?queues=email%2Cother", None).await;
    let mut by_job_type = Stream::open(&client, "?job_types=report.build", None).await;
    let mut all_three = Stream::open(
        &client,
        "?types=job.enqueued&queues=email&job_types=email.send",
        None,
    )
    .await;

    let mut email = job(1, "email.send");
    email["options"] = json!({ "queue": "email" });
    assert_eq!(client.enqueue(&email).await.status, 201);
    assert_eq!(client.enqueue(&job(2, "report.build")).await.status, 201);
    let mut sms = job(3, "email.send");
    sms["options"] = json!({ "queue": "sms" });
    assert_eq!(client.enqueue(&sms).await.status, 201);
    for id in [job_id(1), job_id(2), job_id(3)] {
        assert_eq!(control(&client, &id, "start", None).await.status, 200);
    }
    // The marker every filter lets through, last.
    let mut marker = job(4, "report.build");
    marker["options"] = json!({ "queue": "email" });
    assert_eq!(client.enqueue(&marker).await.status, 201);
    assert_eq!(
        control(&client, &job_id(4), "start", None).await.status,
        200
    );
    assert_eq!(
        control(&client, &job_id(4), "complete", None).await.status,
        200
    );

    let frames = by_type.until("job.completed", &job_id(4)).await;
    assert_eq!(
        kinds(&frames),
        [
            "job.started",
            "job.started",
            "job.started",
            "job.started",
            "job.completed"
        ]
    );

    let frames = by_queue.until("job.completed", &job_id(4)).await;
    assert!(frames.iter().all(|f| f.data["data"]["queue"] == "email"));
    let subjects: Vec<&str> = frames.iter().map(Frame::subject).collect();
    assert_eq!(
        subjects,
        [job_id(1), job_id(1), job_id(4), job_id(4), job_id(4)]
    );

    let frames = by_job_type.until("job.completed", &job_id(4)).await;
    let subjects: Vec<&str> = frames.iter().map(Frame::subject).collect();
    assert_eq!(
        subjects,
        [job_id(2), job_id(2), job_id(4), job_id(4), job_id(4)]
    );

    // All three dimensions at once: only job 1's enqueue matches; the marker's enqueue is
    // report.build, so end on a second email.send job.
    let mut last = job(5, "email.send");
    last["options"] = json!({ "queue": "email" });
    assert_eq!(client.enqueue(&last).await.status, 201);
    let frames = all_three.until("job.enqueued", &job_id(5)).await;
    let subjects: Vec<&str> = frames.iter().map(Frame::subject).collect();
    assert_eq!(subjects, [job_id(1), job_id(5)]);
    server.shutdown().await;
}

#[tokio::test]
async fn a_dropped_stream_resumes_from_last_event_id_without_loss_or_repeat() {
    let (server, client) = start().await;
    let mut stream = Stream::open(&client, "", None).await;
    for n in 1..=3 {
        assert_eq!(client.enqueue(&job(n, "a.b")).await.status, 201);
    }
    let before = stream.take(3).await;

    // Over HTTP: every open stream ends now.
    let dropped = client
        .send(
            client
                .http
                .post(format!("{}/_dev/events/drop", client.base)),
        )
        .await;
    assert_eq!(dropped.status, 200);
    assert_eq!(dropped.body["dropped"], 1);
    assert!(stream.next().await.is_none(), "the stream must end");

    // Events made while nobody listens.
    for n in 4..=5 {
        assert_eq!(client.enqueue(&job(n, "a.b")).await.status, 201);
    }
    let last = before.last().unwrap().id.clone().unwrap();
    let mut resumed = Stream::open(&client, "", Some(&last)).await;
    assert_eq!(
        control(&client, &job_id(5), "start", None).await.status,
        200
    );
    let after = resumed.take(3).await;
    assert_eq!(
        kinds(&after),
        ["job.enqueued", "job.enqueued", "job.started"]
    );

    // The Rust API ends it too.
    assert_eq!(server.drop_event_streams(), 1);
    assert!(resumed.next().await.is_none());

    let mut seen = ids(&before);
    seen.extend(ids(&after));
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "an id came twice: {seen:?}");
    // Nothing lost: the whole history, replayed from the start, is exactly what was seen.
    let mut everything = Stream::open(&client, "?since=1970-01-01T00:00:00Z", None).await;
    assert_eq!(ids(&everything.take(6).await), seen);
    let subjects: Vec<String> = before
        .iter()
        .chain(&after)
        .map(|f| f.subject().to_owned())
        .collect();
    assert_eq!(
        subjects,
        [
            job_id(1),
            job_id(2),
            job_id(3),
            job_id(4),
            job_id(5),
            job_id(5)
        ]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn since_replays_the_events_at_or_after_a_time() {
    let (server, client) = start().await;
    assert_eq!(client.enqueue(&job(1, "a.b")).await.status, 201);
    let mut all = Stream::open(&client, "?since=2000-01-01T00:00:00.000Z", None).await;
    let first = all.take(1).await.remove(0);
    let first_time = first.data["time"].as_str().unwrap().to_owned();
    // Wait (with a deadline) until the clock has passed the first event's millisecond.
    let deadline = std::time::Instant::now() + DEADLINE;
    let cut = loop {
        let now = chrono_like_now();
        if now > first_time {
            break now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the clock does not move"
        );
        tokio::task::yield_now().await;
    };
    assert_eq!(client.enqueue(&job(2, "a.b")).await.status, 201);
    assert_eq!(client.enqueue(&job(3, "a.b")).await.status, 201);
    let mut later = Stream::open(&client, &format!("?since={cut}"), None).await;
    let frames = later.take(2).await;
    let subjects: Vec<&str> = frames.iter().map(Frame::subject).collect();
    assert_eq!(subjects, [job_id(2), job_id(3)]);
    // And then live events follow on the same stream.
    assert_eq!(client.enqueue(&job(4, "a.b")).await.status, 201);
    assert_eq!(later.take(1).await[0].subject(), job_id(4));

    let refused = client.get("/v1/events/stream?since=yesterday").await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.error_code(), "invalid_request");
    server.shutdown().await;
}

/// Now as `YYYY-MM-DDTHH:MM:SS.mmmZ`, the form the devserver writes (so strings compare as
/// times).
fn chrono_like_now() -> String {
    common::utc_ms_after(0)
}

#[tokio::test]
async fn a_failed_job_retries_then_is_discarded_and_wrong_transitions_are_refused() {
    let (server, client) = start().await;
    let mut stream = Stream::open(&client, "", None).await;
    let id = job_id(1);
    let mut pushed = job(1, "a.b");
    // A minute of backoff: the job stays `retryable` while the test looks at it.
    pushed["options"] = json!({ "retry": { "max_attempts": 2, "initial_interval": "PT1M" } });
    assert_eq!(client.enqueue(&pushed).await.status, 201);
    let error = json!({ "code": "handler_error", "message": "boom", "retryable": true });

    // Not active yet: complete and fail are refused.
    for action in ["complete", "fail"] {
        let refused = control(&client, &id, action, Some(json!({ "error": error }))).await;
        assert_eq!(refused.status, 409, "{action}: {:?}", refused.body);
        let e = &refused.body["error"];
        assert!(BINDING_ERROR_CODES.contains(&refused.error_code()));
        assert_eq!(e["code"], "invalid_request");
        assert_eq!(e["retryable"], false);
        assert_eq!(e["details"]["current_state"], "available");
        assert_eq!(e["details"]["expected_state"], "active");
        assert_eq!(e["details"]["job_id"], id.as_str());
        assert_eq!(e["request_id"], refused.header("x-request-id").unwrap());
        assert_eq!(
            e["doc_url"],
            "https://openjobspec.org/errors/INVALID_STATE_TRANSITION"
        );
    }

    assert_eq!(control(&client, &id, "start", None).await.status, 200);
    let failed = control(&client, &id, "fail", Some(json!({ "error": error }))).await;
    assert_eq!(failed.status, 200, "{:?}", failed.body);
    let info = client.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(info.body["job"]["state"], "retryable");
    assert_eq!(info.body["job"]["attempt"], 1);
    assert_eq!(info.body["job"]["error"], error);

    // The second attempt, through the Rust API (the control API starts a retryable job before
    // its backoff ran out).
    let active = server.start_job_as(&id, "rust-worker").unwrap();
    assert_eq!(active["state"], "active");
    assert_eq!(active["attempt"], 1, "one failed attempt so far");
    assert_eq!(active["worker_id"], "rust-worker");
    let discarded = server.fail_job(&id, error.clone()).unwrap();
    assert_eq!(discarded["state"], "discarded");
    let info = client.get(&format!("/ojs/v1/jobs/{id}")).await;
    assert_eq!(info.body["job"]["state"], "discarded");
    assert_eq!(info.body["job"]["attempt"], 2);

    let frames = stream.until("job.discarded", &id).await;
    assert_eq!(
        kinds(&frames),
        [
            "job.enqueued",
            "job.started",
            "job.failed",
            "job.retrying",
            "job.started",
            "job.failed",
            "job.discarded"
        ]
    );
    let data: Vec<&Value> = frames.iter().map(|f| &f.data["data"]).collect();
    assert_eq!(data[2]["state"], "retryable");
    assert_eq!(data[2]["attempt"], 1);
    assert_eq!(data[2]["error"], error);
    assert_eq!(data[3]["attempt"], 1);
    assert!(is_utc_timestamp(
        data[3]["next_attempt_at"].as_str().unwrap()
    ));
    assert_eq!(data[4]["worker_id"], "rust-worker");
    assert_eq!(data[4]["attempt"], 2);
    assert_eq!(data[5]["state"], "discarded");
    assert_eq!(data[6]["state"], "discarded");
    assert_eq!(data[6]["attempt"], 2);
    assert_eq!(data[6]["error"], error);

    // Terminal: nothing moves it any more.
    let refused = control(&client, &id, "start", None).await;
    assert_eq!(refused.status, 409);
    assert_eq!(
        refused.body["error"]["details"]["current_state"],
        "discarded"
    );
    assert!(matches!(
        server.complete_job(&id),
        Err(ojs_devserver::JobControlError::InvalidTransition { .. })
    ));
    // Unknown job, bad bodies.
    let unknown = control(&client, &job_id(99), "start", None).await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.error_code(), "not_found");
    let no_error = control(&client, &id, "fail", Some(json!({}))).await;
    assert_eq!(no_error.status, 400);
    assert_eq!(no_error.error_code(), "invalid_request");
    assert_eq!(
        control(&client, &id, "explode", None).await.status,
        404,
        "unknown action"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_manifest_names_the_event_extension_and_a_slow_stream_never_blocks_enqueue() {
    let server = DevServer::start(0).await.unwrap();
    let client = Client::new(&server);
    let manifest = client.get("/ojs/manifest").await;
    assert_eq!(manifest.body["extensions"], json!(["ext_events"]));

    // A subscriber that never reads: enqueues go on (its buffer fills, then it is cut off).
    let _idle = Stream::open(&client, "", None).await;
    let jobs: Vec<Value> = (0..500)
        .map(|n| json!({ "type": "a.b", "args": [n, "x".repeat(200)] }))
        .collect();
    for _ in 0..40 {
        let answer = tokio::time::timeout(DEADLINE, client.enqueue_batch(&jobs))
            .await
            .expect("an enqueue waited for a subscriber");
        assert_eq!(answer.status, 201);
    }
    server.shutdown().await;
}

/// The data of a job's events without what differs between two runs of the same life (ids,
/// times, durations) or between the two recorders of an error.
fn comparable(frames: &[Frame]) -> Vec<(String, Value)> {
    frames
        .iter()
        .map(|frame| {
            let mut data = frame.data["data"].clone();
            let map = data.as_object_mut().unwrap();
            for varying in ["job_id", "duration_ms", "next_attempt_at", "error"] {
                if let Some(value) = map.get_mut(varying) {
                    *value = json!(varying);
                }
            }
            (frame.event.clone(), data)
        })
        .collect()
}

#[tokio::test]
async fn the_worker_endpoints_emit_the_events_of_the_control_api() {
    let (server, client) = start().await;
    let mut stream = Stream::open(&client, "", None).await;
    let options =
        json!({ "queue": "w", "retry": { "max_attempts": 2, "initial_interval": "PT0.2S" } });
    for n in 1..=4 {
        let mut pushed = job(n, "a.b");
        pushed["options"] = options.clone();
        assert_eq!(client.enqueue(&pushed).await.status, 201);
    }
    let error = json!({ "code": "handler_error", "message": "boom" });
    let worker = json!({ "worker_id": "w-9" });

    // Job 1 fails twice and job 2 completes, through the control API.
    for _ in 0..2 {
        assert_eq!(
            control(&client, &job_id(1), "start", Some(worker.clone()))
                .await
                .status,
            200
        );
        let failed = control(&client, &job_id(1), "fail", Some(json!({ "error": error }))).await;
        assert_eq!(failed.status, 200);
    }
    assert_eq!(
        control(&client, &job_id(2), "start", Some(worker.clone()))
            .await
            .status,
        200
    );
    assert_eq!(
        control(&client, &job_id(2), "complete", None).await.status,
        200
    );

    // Jobs 3 and 4 live the same lives through the worker endpoints.
    let fetch = |ids: Vec<String>| {
        let client = &client;
        async move {
            let deadline = std::time::Instant::now() + DEADLINE;
            let mut got = Vec::new();
            while got.len() < ids.len() {
                assert!(std::time::Instant::now() < deadline, "fetch deadline");
                let answer = client
                    .post(
                        "/ojs/v1/workers/fetch",
                        &json!({ "queues": ["w"], "worker_id": "w-9" }),
                    )
                    .await;
                match answer.body["jobs"][0]["id"].as_str() {
                    Some(id) => got.push(id.to_owned()),
                    None => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            assert_eq!(got, ids);
        }
    };
    let post = |path: &'static str, body: Value| {
        let client = &client;
        async move {
            let answer = client.post(path, &body).await;
            assert_eq!(answer.status, 200, "{:?}", answer.body);
        }
    };
    fetch(vec![job_id(3), job_id(4)]).await;
    post(
        "/ojs/v1/workers/nack",
        json!({ "job_id": job_id(3), "error": error }),
    )
    .await;
    post("/ojs/v1/workers/ack", json!({ "job_id": job_id(4) })).await;
    fetch(vec![job_id(3)]).await;
    post(
        "/ojs/v1/workers/nack",
        json!({ "job_id": job_id(3), "error": error }),
    )
    .await;

    let frames = stream.until("job.discarded", &job_id(3)).await;
    let of = |n: u64| -> Vec<Frame> {
        frames
            .iter()
            .filter(|f| f.subject() == job_id(n))
            .cloned()
            .collect()
    };
    assert_eq!(
        kinds(&of(3)),
        [
            "job.enqueued",
            "job.started",
            "job.failed",
            "job.retrying",
            "job.started",
            "job.failed",
            "job.discarded"
        ]
    );
    assert_eq!(comparable(&of(1)), comparable(&of(3)));
    assert_eq!(comparable(&of(2)), comparable(&of(4)));
    // The control API records the error as sent; a nack as the servers record it.
    let nack_errors: Vec<Value> = of(3)
        .iter()
        .filter(|f| f.event == "job.failed")
        .map(|f| f.data["data"]["error"].clone())
        .collect();
    assert_eq!(
        nack_errors,
        [0, 1].map(|a| json!({ "message": "boom", "type": "handler_error", "attempt": a }))
    );
    let info = client.get(&format!("/ojs/v1/jobs/{}", job_id(3))).await;
    assert_eq!(info.body["job"]["state"], "discarded");
    server.shutdown().await;
}
