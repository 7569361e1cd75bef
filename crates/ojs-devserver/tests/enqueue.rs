//! Single enqueue, get, health: the OJS HTTP binding as the devserver speaks it.

mod common;

use common::{OJS_JSON, job, job_id, received_ids, start};
use serde_json::{Value, json};

#[tokio::test]
async fn single_create_returns_201_location_and_the_job() {
    let (server, client) = start().await;
    let id = job_id(1);
    let answer = client
        .enqueue(&json!({
            "id": id, "type": "email.welcome", "args": [42, "x"],
            "meta": {"traceparent": "00-abc-def-01"},
            "options": {"queue": "email", "priority": 5}
        }))
        .await;

    assert_eq!(answer.status, 201);
    assert_eq!(
        answer.header("location"),
        Some(format!("/ojs/v1/jobs/{id}").as_str())
    );
    assert_eq!(answer.header("content-type"), Some(OJS_JSON));
    let created = &answer.body["job"];
    assert_eq!(created["id"], id);
    assert_eq!(created["type"], "email.welcome");
    assert_eq!(created["args"], json!([42, "x"]));
    assert_eq!(created["meta"], json!({"traceparent": "00-abc-def-01"}));
    assert_eq!(created["options"], json!({"queue": "email", "priority": 5}));
    assert_eq!(created["state"], "available");
    assert_eq!(created["queue"], "email");
    let created_at = created["created_at"].as_str().expect("created_at");
    assert!(
        created_at.len() == 27 && created_at.ends_with('Z') && created_at.as_bytes()[10] == b'T',
        "RFC 3339 UTC timestamp, got {created_at}"
    );

    let received = server.snapshot();
    assert_eq!(received.jobs.len(), 1);
    assert_eq!(received.jobs[0].id, id);
    assert_eq!(received.jobs[0].job_type, "email.welcome");
    assert_eq!(received.requests.single, 1);
}

#[tokio::test]
async fn created_job_can_be_fetched_back_and_unknown_ids_are_404() {
    let (server, client) = start().await;
    let created = client.enqueue(&job(7, "report.build")).await;
    assert_eq!(created.status, 201);

    let fetched = client.get(&format!("/ojs/v1/jobs/{}", job_id(7))).await;
    assert_eq!(fetched.status, 200);
    assert_eq!(fetched.body["job"], created.body["job"]);
    assert_eq!(fetched.body["job"]["queue"], "default");
    assert_eq!(fetched.body["job"]["meta"], Value::Null);

    let missing = client.get(&format!("/ojs/v1/jobs/{}", job_id(8))).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.error_code(), "not_found");
    assert_eq!(missing.body["error"]["retryable"], false);
    assert_eq!(missing.header("content-type"), Some(OJS_JSON));

    let not_an_id = client.get("/ojs/v1/jobs/not-an-id").await;
    assert_eq!(not_an_id.status, 404);
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
    assert_eq!(again.status, 409);
    assert_eq!(again.error_code(), "duplicate");
    assert_eq!(again.body["error"]["retryable"], false);
    assert_eq!(again.body["error"]["details"]["existing_job_id"], job_id(1));

    let received = server.snapshot();
    assert_eq!(received.jobs.len(), 1);
    assert_eq!(received.jobs[0].job_type, "a", "the first job is kept");
    assert_eq!(received.deliveries.get(&job_id(1)), Some(&2));
    assert_eq!(received.requests.single, 2);
}

#[tokio::test]
async fn validation_errors_name_the_field_and_store_nothing() {
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
    ];
    for (body, field) in &cases {
        assert_refused(&client, body, field).await;
    }
    let received = server.snapshot();
    assert!(received.jobs.is_empty());
    assert_eq!(received.requests.single, cases.len() as u64);
}

async fn assert_refused(client: &common::Client, body: &Value, field: &str) {
    let answer = client.enqueue(body).await;
    assert_eq!(answer.status, 400, "{body}");
    assert_eq!(answer.error_code(), "validation_error", "{body}");
    assert_eq!(answer.body["error"]["retryable"], false, "{body}");
    assert_eq!(answer.body["error"]["details"]["field"], field, "{body}");
    assert_eq!(answer.header("content-type"), Some(OJS_JSON));
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
            json!({"retry": {"non_retryable_errors": ["A", "A"]}}),
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
            json!({"retry": {"max_attempts": 0, "backoff_coefficient": 1}}),
            json!({"retry": {"backoff_coefficient": 0.5}}),
            "options.retry.backoff_coefficient",
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
    for (accepted, refused, field) in &rules {
        let answer = client
            .enqueue(&json!({"type": "a", "args": [], "options": accepted}))
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
async fn body_over_1_mib_is_413_and_exactly_1_mib_is_accepted() {
    let (server, client) = start().await;
    let at_limit = job_of_size(1, 1_048_576);
    assert_eq!(at_limit.len(), 1_048_576);
    let answer = client.post_raw("/ojs/v1/jobs", OJS_JSON, at_limit).await;
    assert_eq!(answer.status, 201);

    let over = job_of_size(2, 1_048_577);
    let answer = client.post_raw("/ojs/v1/jobs", OJS_JSON, over).await;
    assert_eq!(answer.status, 413);
    assert_eq!(answer.error_code(), "payload_too_large");
    assert_eq!(answer.body["error"]["retryable"], false);

    let way_over = job_of_size(3, 5 * 1_048_576);
    let answer = client.post_raw("/ojs/v1/jobs", OJS_JSON, way_over).await;
    assert_eq!(answer.status, 413);

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
    assert_eq!(health.body, json!({"status": "ok"}));

    let unknown = client.get("/ojs/v2/nothing").await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.error_code(), "not_found");

    let wrong_method = client.get("/ojs/v1/jobs").await;
    assert_eq!(wrong_method.status, 405);
    assert_eq!(wrong_method.header("allow"), Some("POST"));
}
