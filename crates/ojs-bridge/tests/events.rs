//! The event surface across the FFI line: a framework mount's frames of the in-process relay
//! (filtered, replayed), its /metrics text, and an SDK feed's refusal of a bad subscription.

use std::time::{Duration, Instant};

use ojs_bridge::Bridge;
use ojs_bridge::events::Next;
use ojs_devserver::DevServer;
use serde_json::json;
use sqlx::{Connection, SqliteConnection};

#[test]
fn a_mount_streams_the_relays_events_and_its_metrics() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backend = runtime.block_on(DevServer::start(0)).unwrap();
    let dir = std::env::temp_dir().join(format!("ojs-bridge-events-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("host.db").display());
    let config = json!({"adapter": {"ojs_url": backend.url(), "database_url": url,
                                    "relay": {"event_retention": "PT1H"}}})
    .to_string();
    let bridge = Bridge::new(&config).unwrap();
    bridge.migrate().unwrap();
    // The table's event log: a mount serves it before any relay runs here.
    let frames = bridge
        .relay_events(r#"{"types": "job.*", "tenant": "acme"}"#)
        .unwrap();
    bridge.start_relay().unwrap();

    let jobs = json!([
        {"type": "invoice.send", "args": [1], "meta": {"tenant_id": "acme"}},
        {"type": "invoice.send", "args": [2], "meta": {"tenant_id": "globex"}}
    ]);
    let staged = bridge
        .stage("sqlite", "question", &jobs.to_string(), None)
        .unwrap();
    runtime.block_on(async {
        let mut host = SqliteConnection::connect(&url).await.unwrap();
        for statement in &staged.statements {
            let mut query = sqlx::query(sqlx::AssertSqlSafe(statement.sql.clone()));
            for param in &statement.params {
                query = query.bind(param.clone());
            }
            query.execute(&mut host).await.unwrap();
        }
    });
    bridge.notify_committed(staged.job_ids.clone());

    let deadline = Instant::now() + Duration::from_secs(30);
    let frame = loop {
        match frames.next(100) {
            Next::Frame(frame) => break frame,
            Next::Idle => assert!(Instant::now() < deadline, "no frame"),
            Next::End => panic!("the stream ended"),
        }
    };
    assert!(frame.starts_with("id: "), "{frame}");
    assert!(frame.contains("event: job.enqueued\n"), "{frame}");
    assert!(frame.contains(&staged.job_ids[0]), "acme's job: {frame}");
    assert_eq!(frames.next(300), Next::Idle, "globex's job is not acme's");
    // A mount's replay: everything of the retention, from the start.
    let replay = bridge
        .relay_events(r#"{"since": "1970-01-01T00:00:00Z"}"#)
        .unwrap();
    // Read until both jobs' events came (a slow first read of the log is not the end), then
    // until the replay is idle: no third.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut kinds = 0;
    loop {
        match replay.next(300) {
            Next::Frame(frame) => kinds += usize::from(frame.contains("event: job.enqueued")),
            Next::Idle if kinds >= 2 => break,
            Next::Idle => assert!(Instant::now() < deadline, "{kinds} job.enqueued replayed"),
            Next::End => panic!("the replay ended"),
        }
    }
    assert_eq!(kinds, 2);
    assert_eq!(
        bridge
            .relay_events(r#"{"since": "yesterday"}"#)
            .err()
            .unwrap()
            .code,
        ojs_bridge::ErrorCode::InvalidConfig
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = bridge.metrics_text().expect("a relay runs here");
        // The relay's own counters carry its id; the table's figures do not.
        if text.lines().any(|line| {
            line.starts_with("ojs_relay_jobs_sent_total{table=\"ojs_outbox\",relay=\"")
                && line.ends_with("\"} 2")
        }) {
            assert!(text.contains("ojs_outbox_rows{table=\"ojs_outbox\",status=\"sent\"} 2\n"));
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(20));
    }

    for bad in [r#"{"url": "ftp://x"}"#, r#"{"uri": "http://x"}"#] {
        assert_eq!(
            bridge.subscribe_events(bad).err().unwrap().code,
            ojs_bridge::ErrorCode::InvalidConfig
        );
    }
    bridge.stop_relay();
    // The stream reads the table's event log: it outlives this process's relay.
    assert_eq!(frames.next(300), Next::Idle, "the stream goes on");
    bridge.close();
    runtime.block_on(backend.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_sdk_feed_reads_the_configured_backends_stream_and_readiness_names_each_part() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backend = runtime.block_on(DevServer::start(0)).unwrap();
    let dir = std::env::temp_dir().join(format!("ojs-bridge-feed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("host.db").display());
    let config = json!({"adapter": {"ojs_url": backend.url(), "database_url": url}}).to_string();
    let bridge = Bridge::new(&config).unwrap();

    let missing: serde_json::Value =
        serde_json::from_str(&bridge.readiness_json().unwrap()).unwrap();
    assert_eq!(missing["ready"], false, "{missing}");
    assert_eq!(missing["backend"], "ok", "{missing}");
    assert!(
        missing["database"].as_str().unwrap().contains("ojs_outbox"),
        "names the missing table: {missing}"
    );
    bridge.migrate().unwrap();
    let ready: serde_json::Value = serde_json::from_str(&bridge.readiness_json().unwrap()).unwrap();
    assert_eq!(
        ready,
        json!({"ready": true, "database": "ok", "backend": "ok"})
    );

    // No url: the core takes the configured backend's stream.
    let id = bridge
        .enqueue_now(r#"{"type": "email.welcome", "args": [1]}"#, None)
        .unwrap();
    // `since`: the devserver keeps its events, so the push need not race the connection.
    let feed = bridge
        .subscribe_events(r#"{"types": ["job.enqueued"], "since": "2000-01-01T00:00:00Z"}"#)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let event = loop {
        match feed.next(100).unwrap() {
            Some(text) if text.is_empty() => assert!(Instant::now() < deadline, "no event"),
            Some(text) => break serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            None => panic!("the feed closed"),
        }
    };
    assert_eq!(event["type"], "job.enqueued");
    assert_eq!(event["subject"], id.as_str());
    feed.close();
    assert_eq!(feed.next(100).unwrap(), None, "closed");
    bridge.close();
    runtime.block_on(backend.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}
