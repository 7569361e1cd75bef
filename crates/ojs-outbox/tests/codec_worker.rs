//! Encrypted args (the OJS encryption extension) on the worker side: a fetch through
//! `Backend::worker_with_codec` hands the host decoded args, also for a job sealed with a
//! rotated-out key, and never hands it a job it cannot decode: that job is nacked at once as
//! `decode_failed`, not retryable, and the backend discards it. Real devserver over HTTP.

use ojs_devserver::DevServer;
use ojs_outbox::backend::Backend;
use ojs_outbox::codec::Codec;
use ojs_outbox::worker::WorkerCommand;
use ojs_outbox::{Config, PreparedJob};
use serde_json::{Value, json};

const K1: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
const K2: &str = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";
const K3: &str = "AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=";

fn ring(current: &str, keys: Value) -> Codec {
    Codec::from_value(&json!({"key_id": current, "keys": keys})).unwrap()
}

fn job(args: &str, codec: Option<&Codec>) -> PreparedJob {
    let mut job =
        ojs_outbox::job::prepare_json("mail.send", args, Some(r#"{"queue": "mail"}"#), None, None)
            .unwrap();
    if let Some(codec) = codec {
        codec.seal(&mut job).unwrap();
    }
    job
}

async fn push(url: &str, job: &PreparedJob) {
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
}

fn fetch(count: u32) -> WorkerCommand {
    WorkerCommand::from_json(
        &json!({"op": "fetch", "queues": ["mail"], "count": count, "worker_id": "w1"}).to_string(),
    )
    .unwrap()
}

fn get(job_id: &str) -> WorkerCommand {
    WorkerCommand::from_json(&json!({"op": "get", "job_id": job_id}).to_string()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_decodes_args_and_nacks_what_it_cannot_decode() {
    let server = DevServer::start(0).await.unwrap();
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": server.url(),
        "encryption": {"key_id": "k2", "keys": {"k1": K1, "k2": K2}}}}))
    .unwrap();
    let codec = config.encryption.clone().expect("encryption configured");
    let backend = Backend::new(&config).unwrap();

    // Sealed before the rotation (current key k1), with a key this process does not hold,
    // with the current key, and one in plaintext.
    let before_rotation = ring("k1", json!({"k1": K1}));
    let foreign = ring("k3", json!({"k3": K3}));
    let old = job(r#"[{"to": "old@example.com"}]"#, Some(&before_rotation));
    let lost = job(r#"[{"to": "lost@example.com"}]"#, Some(&foreign));
    let new = job(r#"[{"to": "new@example.com"}, 2]"#, Some(&codec));
    let plain = job("[3]", None);
    for job in [&old, &lost, &new, &plain] {
        push(&server.url(), job).await;
    }
    let stored = backend.worker(&get(&new.job_id)).await.unwrap();
    assert!(
        !stored.to_string().contains("new@example.com"),
        "the backend holds ciphertext: {stored}"
    );

    let answer = backend
        .worker_with_codec(&fetch(4), Some(&codec))
        .await
        .unwrap();
    let jobs = answer["jobs"].as_array().unwrap();
    let ids: Vec<&str> = jobs.iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            old.job_id.as_str(),
            new.job_id.as_str(),
            plain.job_id.as_str()
        ],
        "{answer}"
    );
    assert_eq!(jobs[0]["args"], json!([{"to": "old@example.com"}]));
    assert_eq!(jobs[1]["args"], json!([{"to": "new@example.com"}, 2]));
    assert_eq!(jobs[2]["args"], json!([3]));
    if answer.get("job").is_some() {
        assert_eq!(
            answer["job"], jobs[0],
            "the compat `job` is the first one left"
        );
    }

    let nacked = backend.worker(&get(&lost.job_id)).await.unwrap();
    let job = &nacked["job"];
    assert_eq!(job["state"], "discarded", "{nacked}");
    assert!(
        job["error"].to_string().contains("decode_failed"),
        "{nacked}"
    );
    let error = job["error"]["message"].as_str().unwrap();
    assert!(
        error.contains(&lost.job_id),
        "the message names the job: {nacked}"
    );
    assert!(error.contains("\"k3\""), "and the reason: {nacked}");
    assert!(!error.contains("lost@example.com"), "{nacked}");
    let data: Value = serde_json::from_str(&lost.args_json).unwrap();
    assert!(
        !error.contains(data[0]["data"].as_str().unwrap()),
        "{nacked}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_key_ring_an_encrypted_job_is_nacked_not_handed_over() {
    let server = DevServer::start(0).await.unwrap();
    let config = Config::from_value(&json!({"adapter": {"ojs_url": server.url()}})).unwrap();
    assert_eq!(config.encryption, None);
    let backend = Backend::new(&config).unwrap();
    let sealed = job(r#"["secret"]"#, Some(&ring("k1", json!({"k1": K1}))));
    let plain = job("[1]", None);
    push(&server.url(), &sealed).await;
    push(&server.url(), &plain).await;

    let answer = backend.worker(&fetch(2)).await.unwrap();
    let ids: Vec<&str> = answer["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [plain.job_id.as_str()], "{answer}");
    if answer.get("job").is_some() {
        assert_eq!(answer["job"]["id"], plain.job_id.as_str());
    }
    let nacked = backend.worker(&get(&sealed.job_id)).await.unwrap();
    assert_eq!(nacked["job"]["state"], "discarded", "{nacked}");
    assert!(
        nacked["job"]["error"]
            .to_string()
            .contains("no adapter.encryption"),
        "{nacked}"
    );

    // Only the encrypted job is left out: an answer of it alone is empty.
    let sealed = job(r#"["secret"]"#, Some(&ring("k1", json!({"k1": K1}))));
    push(&server.url(), &sealed).await;
    let answer = backend.worker(&fetch(1)).await.unwrap();
    assert_eq!(answer["jobs"], json!([]), "{answer}");
    assert!(answer.get("job").is_none(), "{answer}");
    server.shutdown().await;
}

#[test]
fn the_configuration_carries_the_key_ring() {
    let config = Config::from_value(&json!({"adapter": {
        "ojs_url": "http://localhost:8080",
        "encryption": {"key_id": "k2", "keys": {"k1": K1, "k2": K2}}}}))
    .unwrap();
    let codec = config.encryption.as_ref().unwrap();
    assert_eq!(codec.key_id(), "k2");
    assert_eq!(codec.key_ids().collect::<Vec<_>>(), ["k1", "k2"]);
    assert!(!format!("{config:?}").contains(K1));
    assert_eq!(config, config.clone());

    let unset =
        Config::from_value(&json!({"ojs_url": "http://localhost:8080", "encryption": null}))
            .unwrap();
    assert_eq!(unset.encryption, None);

    let error = Config::from_value(&json!({"ojs_url": "http://localhost:8080",
        "encryption": {"key_id": "k9", "keys": {"k1": K1}}}))
    .unwrap_err();
    assert_eq!(error.code, ojs_outbox::ErrorCode::InvalidConfig);
    assert_eq!(error.field.as_deref(), Some("adapter.encryption.key_id"));
}
