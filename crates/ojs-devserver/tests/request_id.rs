//! `X-Request-Id` on every response (HTTP binding §6.5, §19): the client's value echoed, else a
//! fresh `req_<UUIDv7>`; error bodies carry the same value as `error.request_id` (§16.1).

mod common;

use std::collections::HashSet;

use common::{assert_error, is_uuid_v7, job, start};
use ojs_devserver::Fault;
use serde_json::json;

#[tokio::test]
async fn every_response_carries_a_fresh_request_id() {
    let (server, client) = start().await;
    assert_eq!(client.enqueue(&job(1, "a")).await.status, 201);
    server.push_fault(Fault::status_code(503).matching_type("faulted").times(1));
    let answers = vec![
        client.enqueue(&job(2, "a")).await,               // 201
        client.enqueue(&job(2, "a")).await,               // 409
        client.enqueue(&json!({"type": "A"})).await,      // 400
        client.enqueue_batch(&[job(3, "faulted")]).await, // 503 injected
        client.enqueue_batch(&[job(4, "a")]).await,       // 201
        client.get("/ojs/v1/jobs/not-an-id").await,       // 404
        client.get("/ojs/v1/health").await,               // 200
        client.get("/ojs/manifest").await,                // 200
        client.delete("/ojs/v1/jobs").await,              // 405
        client.get("/_dev/stats").await,                  // control API
        client.post("/_dev/faults", &json!({})).await,    // control API error
    ];
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(
        statuses,
        vec![201, 409, 400, 503, 201, 404, 200, 200, 405, 200, 400]
    );
    let mut seen = HashSet::new();
    for answer in &answers {
        let id = answer
            .header("x-request-id")
            .unwrap_or_else(|| panic!("no X-Request-Id: {answer:?}"));
        let uuid = id.strip_prefix("req_").expect("req_ prefix");
        assert!(is_uuid_v7(uuid), "{id}");
        assert!(seen.insert(id.to_owned()), "ids are unique: {id}");
        if answer.status >= 400 {
            assert_eq!(answer.body["error"]["request_id"], id, "{:?}", answer.body);
        }
    }
}

#[tokio::test]
async fn a_client_request_id_is_echoed_in_the_header_and_the_error_body() {
    let (_server, client) = start().await;
    let send = |request: reqwest::RequestBuilder| {
        client.send(request.header("X-Request-Id", "req_client-42"))
    };
    let created = send(
        client
            .http
            .post(format!("{}/ojs/v1/jobs", client.base))
            .header("content-type", common::OJS_JSON)
            .body(job(1, "a").to_string()),
    )
    .await;
    assert_eq!(created.status, 201);
    assert_eq!(created.header("x-request-id"), Some("req_client-42"));

    let refused = send(
        client
            .http
            .post(format!("{}/ojs/v1/jobs", client.base))
            .header("content-type", common::OJS_JSON)
            .body(json!({"type": "a", "args": "no"}).to_string()),
    )
    .await;
    let error = assert_error(&refused, 400, "invalid_request");
    assert_eq!(error["request_id"], "req_client-42");

    let missing = send(client.http.get(format!("{}/ojs/v1/jobs/x", client.base))).await;
    assert_eq!(missing.header("x-request-id"), Some("req_client-42"));
    assert_eq!(missing.body["error"]["request_id"], "req_client-42");
}
