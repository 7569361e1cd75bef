//! The control API: what was received (order, deliveries, counters), reset, shutdown, and the
//! binary's start-up line.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{Client, job, job_id, new_http_client, received_ids, start};
use ojs_devserver::{DevServer, Fault, Received};
use serde_json::{Value, json};

#[tokio::test]
async fn received_lists_jobs_in_arrival_order_with_deliveries_and_counters() {
    let (server, client) = start().await;
    assert_eq!(client.enqueue(&job(5, "a")).await.status, 201); // request 0
    assert_eq!(
        client
            .enqueue_batch(&[job(2, "b"), job(9, "c")])
            .await
            .status,
        201
    ); // request 1
    assert_eq!(client.enqueue(&job(5, "a")).await.status, 409); // request 2
    assert_eq!(
        client
            .enqueue(&json!({"id": job_id(7), "type": "Bad", "args": []}))
            .await
            .status,
        400
    ); // request 3
    assert_eq!(client.enqueue(&job(1, "d")).await.status, 201); // request 4
    client.get(&format!("/ojs/v1/jobs/{}", job_id(1))).await;

    let received = client.received().await;
    assert_eq!(
        received_ids(&received),
        vec![job_id(5), job_id(2), job_id(9), job_id(1)]
    );
    let jobs = received["jobs"].as_array().unwrap();
    let seqs: Vec<u64> = jobs.iter().map(|j| j["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3]);
    let batch_requests: Vec<u64> = jobs
        .iter()
        .map(|j| j["batch_request"].as_u64().unwrap())
        .collect();
    assert_eq!(batch_requests, vec![0, 1, 1, 4]);
    assert_eq!(jobs[1]["type"], "b");
    assert_eq!(jobs[1]["args"], json!([2]));
    assert_eq!(jobs[1]["meta"], Value::Null);
    assert_eq!(jobs[1]["options"], Value::Null);
    assert_eq!(jobs[1]["attributes"], Value::Null);
    assert_eq!(jobs[1]["state"], "available");
    assert_eq!(received["replaced"], json!([]));
    let times: Vec<u64> = jobs
        .iter()
        .map(|j| j["received_at_us"].as_u64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    assert!(times[0] <= now_us && now_us - times[0] < 60_000_000);

    assert_eq!(
        received["deliveries"],
        json!({
            job_id(1): 1, job_id(2): 1, job_id(5): 2, job_id(7): 1, job_id(9): 1
        })
    );
    assert_eq!(
        received["requests"],
        json!({"single": 4, "batch": 1, "get": 1})
    );

    // The library snapshot is the same document.
    let from_library = serde_json::to_value(server.snapshot()).unwrap();
    assert_eq!(from_library, received);
    let parsed: Received = serde_json::from_value(received).unwrap();
    assert_eq!(parsed, server.snapshot());

    let stats = client.get("/_dev/stats").await.body;
    assert_eq!(stats["jobs"], 4);
    assert_eq!(stats["replaced"], 0);
    assert_eq!(stats["deliveries"], 6);
    assert_eq!(server.stats().requests.single, 4);
}

#[tokio::test]
async fn raw_args_meta_and_options_are_kept_as_sent() {
    let (server, client) = start().await;
    let sent = json!({
        "id": job_id(1), "type": "a",
        "args": [{"nested": [1, 2.5, null, "é\"\\"]}, true],
        "meta": {"ojs.context.request_id": "r-1", "tenant_id": "t"},
        "options": {"queue": "q", "retry": {"max_attempts": 5, "initial_interval": "PT1S"},
                    "tags": ["x"]}
    });
    assert_eq!(client.enqueue(&sent).await.status, 201);
    let job = &server.snapshot().jobs[0];
    assert_eq!(job.args, sent["args"]);
    assert_eq!(job.meta.as_ref(), Some(&sent["meta"]));
    assert_eq!(job.options.as_ref(), Some(&sent["options"]));
}

#[tokio::test]
async fn reset_clears_jobs_counters_and_faults() {
    let (server, client) = start().await;
    assert_eq!(client.enqueue(&job(1, "a")).await.status, 201);
    assert_eq!(client.enqueue(&job(1, "a")).await.status, 409);
    server.push_fault(Fault::status_code(503).matching_type("never"));

    let answer = client.post("/_dev/reset", &json!({})).await;
    assert_eq!(answer.status, 200);
    let received = client.received().await;
    assert_eq!(
        received,
        json!({"jobs": [], "replaced": [], "deliveries": {},
               "requests": {"single": 0, "batch": 0, "get": 0}})
    );
    assert!(server.faults().is_empty());
    // The id is free again, and request numbering restarts at 0.
    assert_eq!(client.enqueue(&job(1, "a")).await.status, 201);
    let snapshot = server.snapshot();
    assert_eq!(snapshot.jobs[0].seq, 0);
    assert_eq!(snapshot.jobs[0].batch_request, 0);

    server.reset();
    assert!(server.snapshot().jobs.is_empty());
}

#[tokio::test]
async fn concurrent_batches_over_keep_alive_are_all_stored_once() {
    let (server, client) = start().await;
    let http = client.http.clone();
    let base = client.base.clone();
    let mut tasks = Vec::new();
    for worker in 0..8u64 {
        let http = http.clone();
        let base = base.clone();
        tasks.push(tokio::spawn(async move {
            for batch in 0..25u64 {
                let jobs: Vec<Value> = (0..100u64)
                    .map(|i| job(worker * 1_000_000 + batch * 1_000 + i, "bench.job"))
                    .collect();
                let response = http
                    .post(format!("{base}/ojs/v1/jobs/batch"))
                    .header("content-type", "application/openjobspec+json")
                    .body(json!({ "jobs": jobs }).to_string())
                    .send()
                    .await
                    .expect("send");
                assert_eq!(response.status().as_u16(), 201);
                let _ = response.bytes().await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker");
    }
    let stats = server.stats();
    assert_eq!(stats.jobs, 20_000);
    assert_eq!(stats.deliveries, 20_000);
    assert_eq!(stats.requests.batch, 200);
    let snapshot = server.snapshot();
    // Jobs of one batch are contiguous and in request order.
    for chunk in snapshot.jobs.chunks(100) {
        assert!(
            chunk
                .iter()
                .all(|j| j.batch_request == chunk[0].batch_request)
        );
        assert!(chunk.windows(2).all(|w| w[0].id < w[1].id));
    }
}

#[tokio::test]
async fn shutdown_stops_listening() {
    let server = DevServer::start(0).await.expect("start");
    let client = Client::new(&server);
    assert_eq!(client.get("/ojs/v1/health").await.status, 200);
    let url = server.url();
    assert!(url.starts_with("http://127.0.0.1:") && !url.ends_with('/'));
    let addr = server.addr();
    server.shutdown().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    let fresh = new_http_client();
    assert!(
        fresh
            .get(format!("{url}/ojs/v1/health"))
            .send()
            .await
            .is_err()
    );
}

#[tokio::test]
async fn binary_prints_its_url_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ojs-devserver"))
        .args(["--port", "0", "--no-batch"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn ojs-devserver");
    let stdout = child.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("line");
        line
    })
    .await
    .expect("read line");
    let url = line
        .trim_end()
        .strip_prefix("ojs-devserver listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let http = new_http_client();
    let manifest: Value = serde_json::from_str(
        &http
            .get(format!("{url}/ojs/manifest"))
            .send()
            .await
            .expect("manifest")
            .text()
            .await
            .expect("text"),
    )
    .expect("json");
    assert_eq!(manifest["capabilities"]["batch_enqueue"], false);

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    assert!(exit.success(), "exit status {exit:?}");
}
