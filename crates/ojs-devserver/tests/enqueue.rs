//! Single enqueue, get, health: the OJS HTTP binding as the devserver speaks it.

mod common;

use common::{
    OJS_JSON, assert_created, assert_error, assert_ojs_headers, is_utc_timestamp, job, job_id,
    received_ids, start,
};
use serde_json::{Value, json};

#[tokio::test]
async fn single_create_returns_201_location_and_the_full_envelope() {
    let (server, client) = start().await;
    let id = job_id(1);
    let answer = client
        .enqueue(&json!({
            "id": id, "type": "email.welcome", "args": [42, "x"],
            "meta": {"traceparent": "00-abc-def-01"},
            "options": {"queue": "email", "priority": 5, "timeout_ms": 1000, "tags": ["t"],
                        "retry": {"max_attempts": 7, "initial_interval": "PT2S"}}
        }))
        .await;

    let created = assert_created(&answer);
    assert_eq!(created["id"], id);
    assert_eq!(created["type"], "email.welcome");
    assert_eq!(created["state"], "available");
    assert_eq!(created["queue"], "email");
    assert_eq!(created["args"], json!([42, "x"]));
    assert_eq!(created["meta"], json!({"traceparent": "00-abc-def-01"}));
    assert_eq!(created["priority"], 5);
    assert_eq!(created["attempt"], 0);
    assert_eq!(created["max_attempts"], 7, "from options.retry");
    assert_eq!(created["timeout_ms"], 1000);
    assert_eq!(created["tags"], json!(["t"]));
    assert_eq!(
        created["retry"],
        json!({"max_attempts": 7, "initial_interval": "PT2S"})
    );
    assert!(created.get("options").is_none(), "options are flattened");
    let created_at = created["created_at"].as_str().expect("created_at");
    assert!(
        is_utc_timestamp(created_at) && created_at.len() == 24,
        "{created_at}"
    );
    assert_eq!(created["enqueued_at"], created["created_at"]);

    let received = server.snapshot();
    assert_eq!(received.jobs.len(), 1);
    assert_eq!(received.jobs[0].id, id);
    assert_eq!(received.jobs[0].job_type, "email.welcome");
    assert_eq!(received.jobs[0].state, "available");
    assert_eq!(received.requests.single, 1);
}

#[tokio::test]
async fn defaults_fill_the_envelope_and_meta_is_absent_not_null() {
    let (_server, client) = start().await;
    let answer = client.enqueue(&job(3, "report.build")).await;
    let created = assert_created(&answer);
    assert_eq!(created["queue"], "default");
    assert_eq!(created["priority"], 0);
    assert_eq!(
        created["max_attempts"], 3,
        "the spec's default retry policy"
    );
    for absent in [
        "meta",
        "tags",
        "timeout_ms",
        "scheduled_at",
        "retry",
        "unique",
    ] {
        assert!(created.get(absent).is_none(), "{absent}: {created}");
    }
    let with_empty_meta = client
        .enqueue(&json!({"type": "a", "args": [], "meta": {}, "options": {}}))
        .await;
    assert_eq!(assert_created(&with_empty_meta)["meta"], json!({}));
}

#[tokio::test]
async fn created_job_can_be_fetched_back_and_unknown_ids_are_404() {
    let (server, client) = start().await;
    let created = client.enqueue(&job(7, "report.build")).await;
    assert_eq!(created.status, 201);

    let fetched = client.get(&format!("/ojs/v1/jobs/{}", job_id(7))).await;
    assert_eq!(fetched.status, 200);
    assert_ojs_headers(&fetched);
    assert_eq!(fetched.body, created.body);
    common::assert_envelope(&fetched.body["job"], &common::JOB_STATES);

    let missing = client.get(&format!("/ojs/v1/jobs/{}", job_id(8))).await;
    let error = assert_error(&missing, 404, "not_found");
    assert_eq!(error["retryable"], false);
    assert_eq!(error["details"]["resource_id"], job_id(8));

    let not_an_id = client.get("/ojs/v1/jobs/not-an-id").await;
    assert_error(&not_an_id, 404, "not_found");
    assert_eq!(server.snapshot().requests.get, 3);
}

#[tokio::test]
async fn server_generates_a_lowercase_uuidv7_when_no_id_is_sent() {
    let (server, client) = start().await;
    let answer = client.enqueue(&json!({"type": "a", "args": []})).await;
    assert_eq!(answer.status, 201);
    let id = answer.body["job"]["id"].as_str().expect("id").to_string();
    let parsed = uuid::Uuid::parse_str(&id).expect("uuid");
    assert_eq!(parsed.get_version_num(), 7);
    assert_eq!(id, id.to_lowercase());
    assert_eq!(
        answer.header("location"),
        Some(format!("/ojs/v1/jobs/{id}").as_str())
    );
    let received = server.snapshot();
    assert_eq!(received.jobs[0].id, id);
    assert_eq!(received.deliveries.get(&id), Some(&1));
}

#[tokio::test]
async fn repeated_id_is_409_duplicate_and_stored_once() {
    let (server, client) = start().await;
    assert_eq!(client.enqueue(&job(1, "a")).await.status, 201);
    let again = client
        .enqueue(&json!({"id": job_id(1), "type": "b", "args": ["other"]}))
        .await;
    let error = assert_error(&again, 409, "duplicate");
    assert_eq!(error["retryable"], false);
    assert_eq!(error["details"]["existing_job_id"], job_id(1));

    let received = server.snapshot();
    assert_eq!(received.jobs.len(), 1);
    assert_eq!(received.jobs[0].job_type, "a", "the first job is kept");
    assert_eq!(received.deliveries.get(&job_id(1)), Some(&2));
    assert_eq!(received.requests.single, 2);
}

#[tokio::test]
async fn field_errors_are_400_invalid_request_naming_the_field_and_store_nothing() {
    let (server, client) = start().await;
    let long_queue = "q".repeat(129);
    let cases: Vec<(Value, &str)> = vec![
        (json!({"type": "-email", "args": []}), "type"),
        (json!({"type": "email.-welcome", "args": []}), "type"),
        (json!({"type": "Email", "args": []}), "type"),
        (json!({"type": "a".repeat(256), "args": []}), "type"),
        (json!({"args": []}), "type"),
        (json!({"type": 5, "args": []}), "type"),
        (json!({"type": "a", "args": {"k": 1}}), "args"),
        (json!({"type": "a", "args": "x"}), "args"),
        (json!({"type": "a"}), "args"),
        (
            json!({"id": "0194FB3E-1C2D-7A4B-8C9D-0123456789AB", "type": "a", "args": []}),
            "id",
        ),
        (
            json!({"id": "0194fb3e-1c2d-4a4b-8c9d-0123456789ab", "type": "a", "args": []}),
            "id",
        ),
        (json!({"id": 12, "type": "a", "args": []}), "id"),
        (json!({"type": "a", "args": [], "meta": [1]}), "meta"),
        (json!({"type": "a", "args": [], "options": "x"}), "options"),
        (
            json!({"type": "a", "args": [], "options": {"queue": "Bad_Queue"}}),
            "options.queue",
        ),
        (
            json!({"type": "a", "args": [], "options": {"queue": "-q"}}),
            "options.queue",
        ),
        (
            json!({"type": "a", "args": [], "options": {"queue": long_queue}}),
            "options.queue",
        ),
        (
            json!({"type": "a", "args": [], "options": {"priority": 101}}),
            "options.priority",
        ),
        (
            json!({"type": "a", "args": [], "options": {"priority": -101}}),
            "options.priority",
        ),
        (
            json!({"type": "a", "args": [], "options": {"priority": 1.5}}),
            "options.priority",
        ),
        (json!({"type": "a", "args": [], "schema": 5}), "schema"),
    ];
    for (body, field) in &cases {
        assert_refused(&client, body, field).await;
    }
    let received = server.snapshot();
    assert!(received.jobs.is_empty());
    assert_eq!(received.requests.single, cases.len() as u64);
}

async fn assert_refused(client: &common::Client, body: &Value, field: &str) {
    assert_refused_with(client, body, field, 400, "invalid_request").await;
}

async fn assert_refused_with(
    client: &common::Client,
    body: &Value,
    field: &str,
    status: u16,
    code: &str,
) {
    let answer = client.enqueue(body).await;
    let error = assert_error(&answer, status, code);
    assert_eq!(error["retryable"], false, "{body}");
    assert_eq!(error["details"]["field"], field, "{body}");
}

/// The option rules the core shares with the devserver (docs/ojs-compat.md): per rule, an
/// options object the devserver stores and one it refuses, naming the field.
#[tokio::test]
async fn option_rules_match_the_core() {
    let (server, client) = start().await;
    let rules: Vec<(Value, Value, &str)> = vec![
        (
            json!({"timeout_ms": 0}),
            json!({"timeout_ms": -1}),
            "options.timeout_ms",
        ),
        (
            json!({"visibility_timeout_ms": 1000}),
            json!({"visibility_timeout_ms": 999}),
            "options.visibility_timeout_ms",
        ),
        (
            json!({"scheduled_at": "2026-03-01T09:00:00+01:00"}),
            json!({"scheduled_at": "+PT5S"}),
            "options.scheduled_at",
        ),
        (
            json!({"delay_until": "2026-03-01t09:00:00.25z"}),
            json!({"delay_until": "2026-03-01 09:00:00Z"}),
            "options.delay_until",
        ),
        (
            json!({"expires_at": "2024-02-29T09:00:00Z"}),
            json!({"expires_at": "2025-02-29T09:00:00Z"}),
            "options.expires_at",
        ),
        (
            json!({"pending": true}),
            json!({"pending": 1}),
            "options.pending",
        ),
        (
            json!({"tags": ["a", "b"]}),
            json!({"tags": ["a", ""]}),
            "options.tags",
        ),
        (
            json!({"tags": []}),
            json!({"tags": ["a", "a"]}),
            "options.tags",
        ),
        (
            json!({"retry": {"non_retryable_errors": ["A"]}}),
            json!({"retry": {"non_retryable_errors": "A"}}),
            "options.retry.non_retryable_errors",
        ),
        (
            json!({"retry": {"initial_interval": "PT1H30M0.5S"}}),
            json!({"retry": {"initial_interval": "P1D"}}),
            "options.retry.initial_interval",
        ),
        (
            json!({"retry": {"max_interval": "PT0.001S"}}),
            json!({"retry": {"max_interval": "PT0S"}}),
            "options.retry.max_interval",
        ),
        (
            json!({"retry": {"max_interval": "PT90S"}}),
            json!({"retry": {"max_interval": "PT1.5M"}}),
            "options.retry.max_interval",
        ),
        (
            json!({"retry": {"initial_interval": "PT1M5S"}}),
            json!({"retry": {"initial_interval": "PT5S1M"}}),
            "options.retry.initial_interval",
        ),
        (
            json!({"unique": {"period": "P1Y2M"}}),
            json!({"unique": {"period": "P1M1Y"}}),
            "options.unique.period",
        ),
        (
            json!({"unique": {"period": "P1WT0.5S"}}),
            json!({"unique": {"period": "PT"}}),
            "options.unique.period",
        ),
        (
            json!({"unique": {"keys": ["type", "queue", "args"]}}),
            json!({"unique": {"keys": ["type", "tenant"]}}),
            "options.unique.keys",
        ),
        (
            json!({"unique": {"states": ["available", "pending"]}}),
            json!({"unique": {"states": ["done"]}}),
            "options.unique.states",
        ),
        (
            json!({"unique": {"args_keys": ["user_id"]}}),
            json!({"unique": {"args_keys": ["x", "x"]}}),
            "options.unique.args_keys",
        ),
        (
            json!({"unique": {"keys": ["meta"], "meta_keys": ["tenant_id"]}}),
            json!({"unique": {"keys": ["type", "meta"]}}),
            "options.unique.meta_keys",
        ),
        (
            json!({"retry": {"max_attempts": 2}}),
            json!({"retry_policy": {"max_attempts": 2}}),
            "options",
        ),
    ];
    for (n, (accepted, refused, field)) in rules.iter().enumerate() {
        // Distinct args: the accepted unique policies must not conflict with each other.
        let answer = client
            .enqueue(&json!({"type": "a", "args": [n], "options": accepted}))
            .await;
        assert_eq!(answer.status, 201, "{accepted}: {}", answer.body);
        assert_refused(
            &client,
            &json!({"type": "a", "args": [], "options": refused}),
            field,
        )
        .await;
    }
    assert_eq!(server.snapshot().jobs.len(), rules.len());
}

/// A retry policy that breaks a rule of the policy is `422 validation_error` with
/// `type: "validation_error"` and `details.expected` / `received` (the reference servers'
/// `validateRetryPolicy`); a value their JSON decoder or duration parser refuses is
/// `400 invalid_request`. In a batch, both are 400 naming the job (their batch handler).
#[tokio::test]
async fn invalid_retry_policies_are_422_validation_error() {
    let (server, client) = start().await;
    let policy_rules: Vec<(Value, &str, Value)> = vec![
        (
            json!({"max_attempts": -1}),
            "options.retry.max_attempts",
            json!(-1),
        ),
        (
            json!({"backoff_coefficient": 0.5}),
            "options.retry.backoff_coefficient",
            json!(0.5),
        ),
        (
            json!({"backoff_coefficient": 0}),
            "options.retry.backoff_coefficient",
            json!(0),
        ),
        (
            json!({"on_exhaustion": "retry_forever"}),
            "options.retry.on_exhaustion",
            json!("retry_forever"),
        ),
        (
            json!({"non_retryable_errors": ["A", "A"]}),
            "options.retry.non_retryable_errors",
            json!(["A", "A"]),
        ),
    ];
    for (retry, field, received) in &policy_rules {
        let body = json!({"type": "a", "args": [], "options": {"retry": retry}});
        let answer = client.enqueue(&body).await;
        let error = assert_error(&answer, 422, "validation_error");
        assert_eq!(error["details"]["field"], *field, "{body}");
        assert_eq!(&error["details"]["received"], received, "{body}");
        assert!(error["details"]["expected"].is_string(), "{body}");
        assert_eq!(
            error["doc_url"],
            "https://openjobspec.org/errors/INVALID_RETRY_POLICY"
        );
    }
    let unknown_key = client
        .enqueue(
            &json!({"type": "a", "args": [], "options": {"retry": {"backoff_type": "linear"}}}),
        )
        .await;
    assert_error(&unknown_key, 422, "validation_error");

    let malformed: Vec<(Value, &str)> = vec![
        (json!({"max_attempts": "3"}), "options.retry.max_attempts"),
        (json!({"max_attempts": 1.5}), "options.retry.max_attempts"),
        (
            json!({"initial_interval": "P1D"}),
            "options.retry.initial_interval",
        ),
        (json!({"max_interval": 30}), "options.retry.max_interval"),
        (json!({"jitter": "yes"}), "options.retry.jitter"),
        (
            json!({"backoff_coefficient": "2"}),
            "options.retry.backoff_coefficient",
        ),
    ];
    for (retry, field) in &malformed {
        assert_refused(
            &client,
            &json!({"type": "a", "args": [], "options": {"retry": retry}}),
            field,
        )
        .await;
    }
    assert_refused(
        &client,
        &json!({"type": "a", "args": [], "options": {"retry": []}}),
        "options.retry",
    )
    .await;

    let batch = client
        .enqueue_batch(&[
            job(1, "a"),
            json!({"type": "a", "args": [], "options": {"retry": {"max_attempts": -2}}}),
        ])
        .await;
    let error = assert_error(&batch, 400, "validation_error");
    assert_eq!(error["details"]["index"], 1);
    assert_eq!(error["details"]["field"], "options.retry.max_attempts");
    assert!(server.snapshot().jobs.is_empty());
}

#[tokio::test]
async fn boundary_values_are_accepted() {
    let (server, client) = start().await;
    let accepted = [
        json!({"type": "a".repeat(255), "args": []}),
        json!({"type": "a.b_1.c2", "args": [], "options": {"priority": 100}}),
        json!({"type": "a", "args": [], "options": {"priority": -100, "queue": "q".repeat(128)}}),
        json!({"type": "a", "args": [], "options": {"queue": "0-high.v2"}, "meta": {}}),
        json!({"type": "a", "args": [], "unknown_field": true}),
        json!({"type": "batch-import_v2", "args": []}),
        json!({"type": "email-welcome.send-now", "args": []}),
    ];
    for body in &accepted {
        let answer = client.enqueue(body).await;
        assert_eq!(answer.status, 201, "{body}: {}", answer.body);
    }
    assert_eq!(server.snapshot().jobs.len(), accepted.len());
}

#[tokio::test]
async fn wrong_or_missing_content_type_is_400_invalid_request() {
    let (server, client) = start().await;
    let body = job(1, "a").to_string();
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let answer = client
            .post_raw("/ojs/v1/jobs", content_type, body.clone())
            .await;
        assert_eq!(answer.status, 400, "{content_type}");
        assert_eq!(answer.error_code(), "invalid_request");
    }
    let no_header = client
        .send(
            client
                .http
                .post(format!("{}/ojs/v1/jobs", client.base))
                .body(body.clone()),
        )
        .await;
    assert_eq!(no_header.status, 400);
    assert_eq!(no_header.error_code(), "invalid_request");
    assert!(server.snapshot().jobs.is_empty());

    let with_charset = client
        .post_raw(
            "/ojs/v1/jobs",
            "application/json; charset=utf-8",
            body.clone(),
        )
        .await;
    assert_eq!(with_charset.status, 201);
    assert_eq!(server.snapshot().jobs.len(), 1);
}

#[tokio::test]
async fn malformed_json_is_400_invalid_request() {
    let (server, client) = start().await;
    for body in ["{not json", "[1,2]", "\"job\"", ""] {
        let answer = client
            .post_raw("/ojs/v1/jobs", OJS_JSON, body.to_string())
            .await;
        assert_eq!(answer.status, 400, "{body:?}");
        assert_eq!(answer.error_code(), "invalid_request", "{body:?}");
    }
    assert!(server.snapshot().jobs.is_empty());
}

/// A job body of exactly `size` bytes.
fn job_of_size(n: u64, size: usize) -> String {
    let skeleton = json!({"id": job_id(n), "type": "big", "args": [""]}).to_string();
    let padding = size - skeleton.len();
    json!({"id": job_id(n), "type": "big", "args": ["x".repeat(padding)]}).to_string()
}

#[tokio::test]
async fn body_over_1_mib_is_400_invalid_request_and_exactly_1_mib_is_accepted() {
    let (server, client) = start().await;
    let at_limit = job_of_size(1, 1_048_576);
    assert_eq!(at_limit.len(), 1_048_576);
    let answer = client.post_raw("/ojs/v1/jobs", OJS_JSON, at_limit).await;
    assert_eq!(answer.status, 201);

    let over = job_of_size(2, 1_048_577);
    let answer = client.post_raw("/ojs/v1/jobs", OJS_JSON, over).await;
    // The reference servers cut the body at 1 MiB and answer the failed read with 400.
    let error = assert_error(&answer, 400, "invalid_request");
    assert_eq!(error["retryable"], false);
    assert_eq!(error["details"]["max_bytes"], 1_048_576);
    assert_eq!(
        error["doc_url"],
        "https://openjobspec.org/errors/PAYLOAD_TOO_LARGE"
    );

    let way_over = job_of_size(3, 5 * 1_048_576);
    let answer = client.post_raw("/ojs/v1/jobs", OJS_JSON, way_over).await;
    assert_error(&answer, 400, "invalid_request");

    // The server is still healthy and stored only the job at the limit.
    assert_eq!(client.enqueue(&job(4, "small")).await.status, 201);
    let received = client.received().await;
    assert_eq!(received_ids(&received), vec![job_id(1), job_id(4)]);
    assert_eq!(server.snapshot().deliveries.get(&job_id(2)), None);
}

#[tokio::test]
async fn health_and_unknown_routes() {
    let (_server, client) = start().await;
    let health = client.get("/ojs/v1/health").await;
    assert_eq!(health.status, 200);
    assert_ojs_headers(&health);
    assert_eq!(health.body["status"], "ok");
    assert_eq!(health.body["version"], "1.0");
    assert_eq!(
        health.body["backend"],
        json!({"type": "memory", "status": "connected"})
    );
    assert!(health.body["uptime_seconds"].is_u64());

    let unknown = client.get("/ojs/v2/nothing").await;
    assert_error(&unknown, 404, "not_found");

    let wrong_method = client.get("/ojs/v1/jobs").await;
    assert_error(&wrong_method, 405, "invalid_request");
    assert_eq!(wrong_method.header("allow"), Some("POST"));
}
