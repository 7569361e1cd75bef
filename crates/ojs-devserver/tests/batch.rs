//! Batch enqueue: atomic, ordered, and present only when the manifest says so.

mod common;

use common::{Client, job, job_id, received_ids, start};
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
    assert_eq!(answer.status, 201, "{}", answer.body);
    assert_eq!(answer.body["count"], 4);
    let echoed = answer.body["jobs"].as_array().expect("jobs");
    assert_eq!(echoed.len(), 4);
    assert_eq!(echoed[0]["id"], job_id(3));
    assert_eq!(echoed[1]["id"], job_id(1));
    assert_eq!(echoed[2]["type"], "no.id");
    assert_eq!(echoed[2]["queue"], "low");
    assert_eq!(echoed[3]["id"], job_id(2));
    assert!(echoed.iter().all(|j| j["state"] == "available"));
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
    assert_eq!(answer.status, 400);
    assert_eq!(answer.error_code(), "validation_error");
    assert_eq!(answer.body["error"]["details"]["index"], 2);
    assert_eq!(answer.body["error"]["details"]["field"], "type");

    let not_object = client.enqueue_batch(&[job(5, "a"), json!("nope")]).await;
    assert_eq!(not_object.status, 400);
    assert_eq!(not_object.body["error"]["details"]["index"], 1);

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
    assert_eq!(answer.status, 409);
    assert_eq!(answer.error_code(), "duplicate");
    assert_eq!(answer.body["error"]["details"]["index"], 2);
    assert_eq!(
        answer.body["error"]["details"]["existing_job_id"],
        job_id(1)
    );
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
    assert_eq!(empty.status, 400);
    assert_eq!(empty.body["error"]["details"]["field"], "jobs");

    let not_array = client
        .post("/ojs/v1/jobs/batch", &json!({"jobs": {"a": 1}}))
        .await;
    assert_eq!(not_array.status, 400);
    let missing = client.post("/ojs/v1/jobs/batch", &json!({})).await;
    assert_eq!(missing.status, 400);
    let array_body = client
        .post("/ojs/v1/jobs/batch", &json!([[job(1, "a")]]))
        .await;
    assert_eq!(array_body.status, 400);
    assert_eq!(array_body.error_code(), "invalid_request");
    let array_element = client
        .post(
            "/ojs/v1/jobs/batch",
            &json!({"jobs": [job(1, "a"), [job_id(2), "a", []]]}),
        )
        .await;
    assert_eq!(array_element.status, 400);
    assert_eq!(array_element.error_code(), "validation_error");
    assert_eq!(array_element.body["error"]["details"]["index"], 1);

    // 20 jobs of 60 KiB each: about 1.2 MiB in one batch.
    let big: Vec<_> = (0..20)
        .map(|n| json!({"id": job_id(n), "type": "a", "args": ["x".repeat(60 * 1024)]}))
        .collect();
    let too_large = client.enqueue_batch(&big).await;
    assert_eq!(too_large.status, 413);
    assert_eq!(too_large.error_code(), "payload_too_large");
    assert!(server.snapshot().jobs.is_empty());
    // Half of it fits.
    assert_eq!(client.enqueue_batch(&big[..10]).await.status, 201);
    assert_eq!(server.snapshot().jobs.len(), 10);
}

#[tokio::test]
async fn manifest_reports_batch_and_the_toggle_removes_the_endpoint() {
    let (server, client) = start().await;
    let manifest = client.get("/ojs/manifest").await;
    assert_eq!(manifest.status, 200);
    assert_eq!(manifest.body["specversion"], "1.0");
    assert_eq!(manifest.body["implementation"]["name"], "ojs-devserver");
    assert_eq!(manifest.body["conformance_level"], 4);
    assert_eq!(manifest.body["capabilities"]["batch_enqueue"], true);

    let toggled = client
        .post("/_dev/manifest", &json!({"batch_enqueue": false}))
        .await;
    assert_eq!(toggled.status, 200);
    let manifest = client.get("/ojs/manifest").await;
    assert_eq!(manifest.body["capabilities"]["batch_enqueue"], false);
    let answer = client.enqueue_batch(&[job(1, "a")]).await;
    assert_eq!(answer.status, 404);
    assert_eq!(answer.error_code(), "not_found");
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
