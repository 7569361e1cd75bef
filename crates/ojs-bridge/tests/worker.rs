//! A framework's worker command through the bridge: fetch, ack, nack and heartbeat against the
//! devserver's worker endpoints, and the errors a worker must tell apart.

use ojs_bridge::{Bridge, ErrorCode};
use ojs_devserver::DevServer;
use serde_json::{Value, json};

fn call(bridge: &Bridge, command: Value) -> Value {
    serde_json::from_str(&bridge.worker(&command.to_string()).unwrap()).unwrap()
}

#[test]
fn fetch_ack_nack_heartbeat_and_the_errors_a_worker_tells_apart() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backend = runtime.block_on(DevServer::start(0)).unwrap();
    let dir = std::env::temp_dir().join(format!("ojs-bridge-worker-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("host.db").display());
    let config = json!({"adapter": {"ojs_url": backend.url(), "database_url": url}}).to_string();
    let bridge = Bridge::new(&config).unwrap();

    let first = bridge
        .enqueue_now(
            r#"{"type": "email.welcome", "args": [1], "options": {"queue": "mail"}}"#,
            None,
        )
        .unwrap();
    let second = bridge
        .enqueue_now(
            r#"{"type": "email.welcome", "args": [2], "options": {"queue": "mail", "retry": {"max_attempts": 1}}}"#,
            None,
        )
        .unwrap();

    let fetched = call(
        &bridge,
        json!({"op": "fetch", "queues": ["mail"], "count": 2, "worker_id": "w1"}),
    );
    let ids: Vec<&str> = fetched["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| job["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [first.as_str(), second.as_str()], "{fetched}");
    assert_eq!(fetched["jobs"][0]["args"], json!([1]));

    let beat = call(
        &bridge,
        json!({"op": "heartbeat", "worker_id": "w1", "active_jobs": [first, second]}),
    );
    assert_eq!(beat["directive"], "continue", "{beat}");

    let acked = call(
        &bridge,
        json!({"op": "ack", "job_id": first, "result": {"sent": true}}),
    );
    assert_eq!(acked["state"], "completed", "{acked}");
    let nacked = call(
        &bridge,
        json!({"op": "nack", "job_id": second, "error": {"code": "smtp_down", "message": "no route"}}),
    );
    assert_eq!(
        nacked["state"], "discarded",
        "one attempt allowed: {nacked}"
    );

    let done = call(&bridge, json!({"op": "get", "job_id": first}));
    assert_eq!(done["job"]["state"], "completed", "{done}");
    assert_eq!(done["job"]["result"], json!({"sent": true}), "{done}");
    assert_eq!(
        call(
            &bridge,
            json!({"op": "get", "job_id": "019a0000-0000-7000-8000-000000000000"})
        ),
        Value::Null,
        "no such job"
    );

    let empty = call(
        &bridge,
        json!({"op": "fetch", "queues": ["mail"], "worker_id": "w1"}),
    );
    assert_eq!(empty["jobs"], json!([]), "{empty}");

    let again = bridge
        .worker(&json!({"op": "ack", "job_id": first}).to_string())
        .unwrap_err();
    assert_eq!(again.code, ErrorCode::BackendRejected, "{again}");
    assert!(again.message.contains("409"), "{again}");
    let bad = bridge
        .worker(r#"{"op": "fetch", "queues": ["Mail Queue"], "worker_id": "w1"}"#)
        .unwrap_err();
    assert_eq!(
        bad.code,
        ErrorCode::InvalidQueue,
        "checked before sending: {bad}"
    );

    runtime.block_on(backend.shutdown());
    let down = bridge
        .worker(&json!({"op": "fetch", "queues": ["mail"], "worker_id": "w1"}).to_string())
        .unwrap_err();
    assert_eq!(down.code, ErrorCode::BackendUnavailable, "{down}");
    bridge.close();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn http_only_calls_need_no_outbox_database() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backend = runtime.block_on(DevServer::start(0)).unwrap();
    // Nothing listens on port 1: an outbox connection would fail.
    let config = json!({"adapter": {"ojs_url": backend.url(),
                                    "database_url": "postgres://nobody@127.0.0.1:1/none"}})
    .to_string();
    let bridge = Bridge::new(&config).unwrap();
    let fetched = call(
        &bridge,
        json!({"op": "fetch", "queues": ["default"], "worker_id": "w1"}),
    );
    assert_eq!(fetched["jobs"], json!([]), "{fetched}");
    let feed = bridge
        .subscribe_events(r#"{"since": "2000-01-01T00:00:00Z"}"#)
        .unwrap();
    assert_eq!(
        feed.next(200).unwrap().as_deref(),
        Some(""),
        "open, nothing yet"
    );
    feed.close();
    let verdict: Value = serde_json::from_str(&bridge.readiness_json().unwrap()).unwrap();
    assert_eq!(verdict["ready"], false, "{verdict}");
    assert_eq!(verdict["backend"], "ok", "{verdict}");
    assert!(
        verdict["database"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1:1"),
        "says which database does not answer: {verdict}"
    );
    bridge.close();
    runtime.block_on(backend.shutdown());
}
