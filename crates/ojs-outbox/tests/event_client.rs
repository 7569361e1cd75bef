//! The SDKs' event client against a live backend stream (the devserver's): it receives what
//! the backend emits, in order, and when the server drops the connection it resumes with
//! `Last-Event-ID`, losing and repeating no event id.

use std::time::Duration;

use ojs_devserver::DevServer;
use ojs_outbox::event_client::{EventClient, EventSubscription, ReceivedEvent};
use serde_json::json;

async fn push(backend: &DevServer, n: usize, from: usize) -> Vec<String> {
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for i in from..from + n {
        let body: serde_json::Value = http
            .post(format!("{}/ojs/v1/jobs", backend.url()))
            .json(&json!({"type": "email.send", "args": [i], "options": {"queue": "email"}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        ids.push(body["job"]["id"].as_str().unwrap().to_owned());
    }
    ids
}

async fn next(client: &mut EventClient) -> ReceivedEvent {
    tokio::time::timeout(Duration::from_secs(20), client.next())
        .await
        .expect("an event in time")
        .expect("open")
        .expect("accepted")
}

#[tokio::test]
async fn the_client_follows_a_live_stream_and_resumes_after_a_drop() {
    let backend = DevServer::start(0).await.unwrap();
    let subscription = EventSubscription::from_json(
        &json!({"url": format!("{}/v1/events/stream", backend.url()), "types": ["job.*"]})
            .to_string(),
    )
    .unwrap();
    let mut client = EventClient::start(subscription);
    // The stream is live once the devserver counts it (jobs pushed before that would reach
    // this client only by replay), so wait for it.
    let http = reqwest::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let state: serde_json::Value = http
            .get(format!("{}/_dev/events", backend.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if state["open_streams"] == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no stream opened: {state}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = push(&backend, 3, 0).await;
    let mut got = Vec::new();
    for _ in 0..3 {
        let event = next(&mut client).await;
        assert_eq!(event.kind, "job.enqueued");
        let data: serde_json::Value = serde_json::from_str(&event.data).unwrap();
        got.push((event.id, data["subject"].as_str().unwrap().to_owned()));
    }
    assert_eq!(
        got.iter().map(|(_, job)| job.clone()).collect::<Vec<_>>(),
        first
    );

    assert!(backend.drop_event_streams() >= 1);
    let second = push(&backend, 3, 3).await;
    for _ in 0..3 {
        let event = next(&mut client).await;
        let data: serde_json::Value = serde_json::from_str(&event.data).unwrap();
        got.push((event.id, data["subject"].as_str().unwrap().to_owned()));
    }
    let jobs: Vec<String> = got.iter().map(|(_, job)| job.clone()).collect();
    assert_eq!(
        jobs,
        [first, second].concat(),
        "nothing lost, nothing repeated, in order"
    );
    let mut ids: Vec<&String> = got.iter().map(|(id, _)| id).collect();
    ids.dedup();
    assert_eq!(ids.len(), 6);
    // Nothing more is waiting (no repeat arrives late).
    assert!(
        tokio::time::timeout(Duration::from_millis(300), client.next())
            .await
            .is_err(),
        "no further event"
    );
    client.close();
    backend.shutdown().await;
}
