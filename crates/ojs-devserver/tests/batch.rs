//! Batch enqueue: atomic, ordered, and present only when the manifest says so.

mod common;

use common::{
    Client, assert_batch_created, assert_error, assert_ojs_headers, job, job_id, received_ids,
    start,
};
use ojs_devserver::{DevServer, DevServerConfig};
use serde_json::json;

#[tokio::test]
async fn batch_success_returns_jobs_in_request_order() {
    let (server, client) = start().await;
    assert_eq!(client.enqueue(&job(100, "first")).await.status, 201);

    let jobs = vec![
        job(3, "c"),
        job(1, "a"),
        json!({"type": "no.id", "args": [], "options": {"queue": "low"}}),
        job(2, "b"),
    ];
    let answer = client.enqueue_batch(&jobs).await;
    let echoed = assert_batch_created(&answer);
    assert_eq!(echoed.len(), 4);
    assert_eq!(echoed[0]["id"], job_id(3));
    assert_eq!(echoed[1]["id"], job_id(1));
    assert_eq!(echoed[2]["type"], "no.id");
    assert_eq!(echoed[2]["queue"], "low");
    assert_eq!(echoed[3]["id"], job_id(2));
    assert!(
        echoed
            .iter()
            .all(|j| j["state"] == "available" && j["attempt"] == 0)
    );
    assert!(
        echoed
            .iter()
            .all(|j| j["created_at"] == echoed[0]["created_at"])
    );
    let generated = echoed[2]["id"].as_str().expect("generated id").to_string();

    let received = server.snapshot();
    let ids: Vec<&str> = received.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(
        ids,
        vec![
            job_id(100).as_str(),
            job_id(3).as_str(),
            job_id(1).as_str(),
            generated.as_str(),
            job_id(2).as_str()
        ]
    );
    let seqs: Vec<u64> = received.jobs.iter().map(|j| j.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
    let requests: Vec<u64> = received.jobs.iter().map(|j| j.batch_request).collect();
    assert_eq!(requests, vec![0, 1, 1, 1, 1]);
    assert_eq!(received.requests.single, 1);
    assert_eq!(received.requests.batch, 1);

    // Every batch job can be fetched singly.
    let fetched = client.get(&format!("/ojs/v1/jobs/{generated}")).await;
    assert_eq!(fetched.status, 200);
    assert_eq!(fetched.body["job"]["queue"], "low");
}

#[tokio::test]
async fn batch_with_one_invalid_job_stores_nothing() {
    let (server, client) = start().await;
    let jobs = vec![
        job(1, "a"),
        job(2, "a"),
        json!({"id": job_id(3), "type": "Bad.Type", "args": []}),
        job(4, "a"),
    ];
    let answer = client.enqueue_batch(&jobs).await;
    let error = assert_error(&answer, 400, "invalid_request");
    assert_eq!(error["details"]["index"], 2);
    assert_eq!(error["details"]["field"], "type");

    let not_object = client.enqueue_batch(&[job(5, "a"), json!("nope")]).await;
    let error = assert_error(&not_object, 400, "invalid_request");
    assert_eq!(error["details"]["index"], 1);

    let received = server.snapshot();
    assert!(received.jobs.is_empty(), "atomic: nothing stored");
    // The backend did read those jobs: each carried id counts as one delivery.
    assert_eq!(received.deliveries.get(&job_id(1)), Some(&1));
    assert_eq!(received.deliveries.get(&job_id(3)), Some(&1));
    assert_eq!(
        client
            .get(&format!("/ojs/v1/jobs/{}", job_id(1)))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn batch_with_an_id_repeated_inside_stores_nothing() {
    let (server, client) = start().await;
    let jobs = vec![job(1, "a"), job(2, "a"), job(1, "a")];
    let answer = client.enqueue_batch(&jobs).await;
    let error = assert_error(&answer, 409, "duplicate");
    assert_eq!(error["details"]["index"], 2);
    assert_eq!(error["details"]["existing_job_id"], job_id(1));
    let received = server.snapshot();
    assert!(received.jobs.is_empty());
    assert_eq!(received.deliveries.get(&job_id(1)), Some(&2));

    // The same jobs without the repeat go through.
    let answer = client.enqueue_batch(&jobs[..2]).await;
    assert_eq!(answer.status, 201);
    assert_eq!(server.snapshot().jobs.len(), 2);
}

#[tokio::test]
async fn batch_with_an_already_stored_id_stores_nothing() {
    let (server, client) = start().await;
    assert_eq!(client.enqueue(&job(2, "a")).await.status, 201);
    let answer = client
        .enqueue_batch(&[job(1, "a"), job(2, "a"), job(3, "a")])
        .await;
    assert_eq!(answer.status, 409);
    assert_eq!(answer.body["error"]["details"]["index"], 1);
    assert_eq!(received_ids(&client.received().await), vec![job_id(2)]);
    assert_eq!(server.snapshot().deliveries.get(&job_id(2)), Some(&2));
}

#[tokio::test]
async fn batch_shape_errors_and_size_limit() {
    let (server, client) = start().await;
    let empty = client.enqueue_batch(&[]).await;
    let error = assert_error(&empty, 400, "invalid_request");
    assert_eq!(error["details"]["field"], "jobs");

    let not_array = client
        .post("/ojs/v1/jobs/batch", &json!({"jobs": {"a": 1}}))
        .await;
    assert_error(&not_array, 400, "invalid_request");
    let missing = client.post("/ojs/v1/jobs/batch", &json!({})).await;
    assert_error(&missing, 400, "invalid_request");
    let array_body = client
        .post("/ojs/v1/jobs/batch", &json!([[job(1, "a")]]))
        .await;
    assert_error(&array_body, 400, "invalid_request");
    let array_element = client
        .post(
            "/ojs/v1/jobs/batch",
            &json!({"jobs": [job(1, "a"), [job_id(2), "a", []]]}),
        )
        .await;
    let error = assert_error(&array_element, 400, "invalid_request");
    assert_eq!(error["details"]["index"], 1);

    // 20 jobs of 60 KiB each: about 1.2 MiB in one batch.
    let big: Vec<_> = (0..20)
        .map(|n| json!({"id": job_id(n), "type": "a", "args": ["x".repeat(60 * 1024)]}))
        .collect();
    let too_large = client.enqueue_batch(&big).await;
    let error = assert_error(&too_large, 400, "invalid_request");
    assert_eq!(error["details"]["max_bytes"], 1_048_576);
    assert!(server.snapshot().jobs.is_empty());
    // Half of it fits.
    assert_eq!(client.enqueue_batch(&big[..10]).await.status, 201);
    assert_eq!(server.snapshot().jobs.len(), 10);
}

/// The manifest claims exactly what the devserver implements. Its shape by the manifest rules
/// (`ojs-http-binding.md` §21, `manifest.schema.json`): `ojs_version`, `implementation` with
/// name, version and language, `conformance_level` 0..=4, `protocols` holding `http`,
/// `backend`, boolean `capabilities`.
fn assert_manifest(manifest: &common::Answer) {
    assert_ojs_headers(manifest);
    let m = &manifest.body;
    assert_eq!(m["ojs_version"], "1.0");
    assert_eq!(m["specversion"], "1.0", "the reference servers' key");
    let implementation = m["implementation"].as_object().expect("implementation");
    assert_eq!(implementation["name"], "ojs-devserver");
    assert!(implementation["version"].is_string());
    assert_eq!(implementation["language"], "rust");
    assert!(
        implementation
            .keys()
            .all(|k| ["name", "version", "language", "homepage"].contains(&k.as_str()))
    );
    assert!(m["protocols"].as_array().unwrap().contains(&json!("http")));
    assert_eq!(m["backend"], "memory");
    // The level 0 operations (push, fetch, ack, nack, health, manifest) and batch, info,
    // heartbeat, but no other level 1 operation (cancel, activate, dead letter): level 0. Workers
    // run jobs through it: the `runtime` tier.
    assert_eq!(m["conformance_level"], 0);
    assert_eq!(m["conformance_tier"], "runtime");
    let capabilities = m["capabilities"].as_object().expect("capabilities");
    for (name, value) in capabilities {
        if name != "unique_jobs_strength" {
            assert!(value.is_boolean(), "{name}: {value}");
        }
    }
    for implemented in ["unique_jobs", "delayed_jobs", "priority_queues"] {
        assert_eq!(capabilities[implemented], true, "{implemented}");
    }
    assert_eq!(capabilities["unique_jobs_strength"], "strong");
    for missing in [
        "schema_validation",
        "job_ttl",
        "cron_jobs",
        "dead_letter",
        "workflows",
        "rate_limiting",
        "pause_resume",
    ] {
        assert_eq!(capabilities[missing], false, "{missing}");
    }
}

#[tokio::test]
async fn manifest_reports_batch_and_the_toggle_removes_the_endpoint() {
    let (server, client) = start().await;
    let manifest = client.get("/ojs/manifest").await;
    assert_eq!(manifest.status, 200);
    assert_manifest(&manifest);
    assert_eq!(manifest.body["capabilities"]["batch_enqueue"], true);

    let toggled = client
        .post("/_dev/manifest", &json!({"batch_enqueue": false}))
        .await;
    assert_eq!(toggled.status, 200);
    let manifest = client.get("/ojs/manifest").await;
    assert_eq!(manifest.body["capabilities"]["batch_enqueue"], false);
    let answer = client.enqueue_batch(&[job(1, "a")]).await;
    assert_error(&answer, 404, "not_found");
    let received = server.snapshot();
    assert!(received.jobs.is_empty());
    assert_eq!(received.requests.batch, 1, "the refused request is counted");
    assert!(received.deliveries.is_empty(), "no job was read");

    // Single enqueue still works; the library toggle and reset restore batch.
    assert_eq!(client.enqueue(&job(1, "a")).await.status, 201);
    server.set_batch_enqueue(true);
    assert_eq!(client.enqueue_batch(&[job(2, "a")]).await.status, 201);
    server.set_batch_enqueue(false);
    server.reset();
    let manifest = client.get("/ojs/manifest").await;
    assert_eq!(manifest.body["capabilities"]["batch_enqueue"], true);

    let bad_toggle = client
        .post("/_dev/manifest", &json!({"batch": false}))
        .await;
    assert_eq!(bad_toggle.status, 400);
}

#[tokio::test]
async fn server_started_without_batch_keeps_it_off_after_reset() {
    let server = DevServer::start_with(DevServerConfig {
        batch_enqueue: false,
        ..DevServerConfig::default()
    })
    .await
    .expect("start");
    let client = Client::new(&server);
    let manifest = client.get("/ojs/manifest").await;
    assert_eq!(manifest.body["capabilities"]["batch_enqueue"], false);
    assert_eq!(client.enqueue_batch(&[job(1, "a")]).await.status, 404);
    server.set_batch_enqueue(true);
    assert_eq!(client.enqueue_batch(&[job(1, "a")]).await.status, 201);
    server.reset();
    assert_eq!(client.enqueue_batch(&[job(2, "a")]).await.status, 404);
}
