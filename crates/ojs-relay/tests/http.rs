//! `ojs-relay run --listen`: the operator's HTTP surface of a real relay process over a real
//! SQLite file and devserver. /metrics parses with a Prometheus text parser from crates.io
//! and its counters match the outbox; the event stream replays from `since` and from
//! `Last-Event-ID`, and a tenant token sees only its tenant's events and nothing else. A
//! subscriber that reads nothing is cut off with `ojs.stream.overflow` while the drain goes on.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ojs_devserver::DevServer;
use ojs_outbox::NewJob;
use serde_json::json;

async fn get(url: &str, token: Option<&str>, last_event_id: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id);
    }
    request.send().await.expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_health_and_a_tenant_scoped_replayable_event_stream() {
    let backend = DevServer::start(0).await.unwrap();
    let db = Db::new(Kind::Sqlite, "http").await.unwrap();
    db.migrate().await;
    let mut jobs: Vec<NewJob> = (0..3)
        .map(|i| NewJob::new("invoice.send", json!([i])).with_meta(json!({"tenant_id": "acme"})))
        .collect();
    jobs.extend((0..2).map(|i| {
        NewJob::new("invoice.send", json!([i])).with_meta(json!({"tenant_id": "globex"}))
    }));
    let ids = db.stage(jobs).await;
    let config = db.config_file(r#"{"adapter": {"relay": {"event_retention": "PT1H"}, "outbox": {"poll_interval": "PT0.05S"}}}"#);
    let mut relay = db.spawn_run(
        &backend.url(),
        &[
            "--config",
            &config,
            "--listen",
            "127.0.0.1:0",
            "--token",
            "op",
            "--tenant-token",
            "acme=ta",
        ],
    );
    let base = served_at(&relay).await;
    db.wait_status(Duration::from_secs(30), "5 rows sent", Some(&relay), |s| {
        count(s, "sent") == 5
    })
    .await;

    // Health needs no token; the rest does.
    assert_eq!(
        get(&format!("{base}/healthz"), None, None).await.status(),
        200
    );
    assert_eq!(
        get(&format!("{base}/metrics"), None, None).await.status(),
        401
    );
    assert_eq!(
        get(&format!("{base}/metrics"), Some("ta"), None)
            .await
            .status(),
        403
    );
    let ready = get(&format!("{base}/readyz"), Some("op"), None).await;
    assert_eq!(ready.status(), 200);
    assert_eq!(
        ready.json::<serde_json::Value>().await.unwrap()["ready"],
        true
    );

    // /metrics, parsed by a Prometheus text-format parser; counters match the outbox. The
    // relay counts a settlement once it has committed: its counters trail the rows briefly.
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = get(&format!("{base}/metrics"), Some("op"), None)
            .await
            .text()
            .await
            .unwrap();
        let counted = text
            .lines()
            .any(|l| l.starts_with("ojs_relay_jobs_sent_total{") && l.ends_with(" 5"));
        if counted || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid exposition");
    let value = |name: &str, status: Option<&str>| -> f64 {
        let sample = scrape
            .samples
            .iter()
            .find(|s| {
                s.metric == name && status.is_none_or(|st| s.labels.get("status") == Some(st))
            })
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"));
        match &sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(buckets) => buckets.last().unwrap().count,
            other => panic!("{name}: {other:?}"),
        }
    };
    assert_eq!(value("ojs_relay_jobs_sent_total", None), 5.0);
    assert_eq!(value("ojs_outbox_rows", Some("sent")), 5.0);
    assert_eq!(value("ojs_outbox_backlog_jobs", None), 0.0);
    assert_eq!(value("ojs_relay_jobs_dead_total", None), 0.0);
    assert_eq!(value("ojs_relay_delivery_lag_seconds", None), 5.0);
    assert!(value("ojs_relay_send_duration_seconds", None) >= 1.0);
    assert_eq!(value("ojs_relay_backend_up", None), 1.0);

    // The tenant's token replays only its tenant's events, from the start of the retention.
    let stream = format!("{base}/v1/events/stream?types=job.*&since=1970-01-01T00:00:00Z");
    let acme = frames(get(&stream, Some("ta"), None).await, 3).await;
    for (_, kind, data) in &acme {
        assert_eq!(kind, "job.enqueued");
        assert_eq!(data["data"]["tenant_id"], "acme");
        assert_eq!(data["specversion"], "1.0");
        assert!(ids[..3].contains(&data["subject"].as_str().unwrap().to_owned()));
    }
    // Resuming after the second event gives the third first.
    let resumed = frames(get(&stream, Some("ta"), Some(&acme[1].0)).await, 1).await;
    assert_eq!(resumed[0].0, acme[2].0);
    // A tenant token cannot ask for another tenant; the operator can.
    let other = format!("{base}/v1/events/stream?tenant=globex&since=1970-01-01T00:00:00Z");
    assert_eq!(get(&other, Some("ta"), None).await.status(), 403);
    let globex = frames(get(&other, Some("op"), None).await, 2).await;
    assert!(
        globex
            .iter()
            .all(|(_, _, d)| d["data"]["tenant_id"] == "globex")
    );
    assert_eq!(get(&stream, None, None).await.status(), 401);

    // The SDKs' client (the core's event_client) reads the same stream, and resumes after an id.
    let subscribe = |last: Option<&str>| {
        let mut options = json!({"url": format!("{base}/v1/events/stream"), "token": "ta",
                                 "types": ["job.*"], "since": "1970-01-01T00:00:00Z"});
        if let Some(last) = last {
            options["last_event_id"] = json!(last);
        }
        ojs_outbox::event_client::EventClient::start(
            ojs_outbox::event_client::EventSubscription::from_json(&options.to_string()).unwrap(),
        )
    };
    let mut client = subscribe(None);
    let mut got = Vec::new();
    while got.len() < 3 {
        let event = tokio::time::timeout(Duration::from_secs(20), client.next())
            .await
            .expect("an event")
            .expect("open")
            .expect("accepted");
        got.push(event.id);
    }
    assert_eq!(
        got,
        acme.iter().map(|(id, _, _)| id.clone()).collect::<Vec<_>>()
    );
    let mut resumed = subscribe(Some(&got[0]));
    let next = tokio::time::timeout(Duration::from_secs(20), resumed.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(next.id, got[1], "resumes after the given id");
    let mut refused = {
        let options = json!({"url": format!("{base}/v1/events/stream"), "token": "wrong"});
        ojs_outbox::event_client::EventClient::start(
            ojs_outbox::event_client::EventSubscription::from_json(&options.to_string()).unwrap(),
        )
    };
    let error = tokio::time::timeout(Duration::from_secs(20), refused.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(error.message.contains("401"), "{}", error.message);

    assert!(relay.terminate(Duration::from_secs(30)).await.success());
    backend.shutdown().await;
}

/// A subscriber that never reads (a small receive window, nothing read) holds up neither the
/// relay nor its memory: the drain completes, and the stream, read afterwards, ends with an
/// `ojs.stream.overflow` event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_is_cut_off_and_the_drain_goes_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const JOBS: usize = 10_000;
    let backend = DevServer::start(0).await.unwrap();
    let db = Db::new(Kind::Sqlite, "http_slow").await.unwrap();
    db.migrate().await;
    let config = db.config_file(
        r#"{"adapter": {"relay": {"event_buffer": 16, "event_retention": null}, "outbox": {"poll_interval": "PT0.05S", "batch_size": 500}}}"#,
    );
    let mut relay = db.spawn_run(
        &backend.url(),
        &["--config", &config, "--listen", "127.0.0.1:0", "--no-auth"],
    );
    let base = served_at(&relay).await;
    let address = base.trim_start_matches("http://").to_owned();

    // A raw client with a 4 KiB receive buffer that sends its request and then reads nothing.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(address.parse().unwrap()).await.unwrap();
    stream
        .write_all(
            format!("GET /v1/events/stream HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    // The answer's head arrives before the first event: the subscription is open.
    let mut head = vec![0u8; 512];
    let n = stream.read(&mut head).await.unwrap();
    assert!(
        String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head[..n])
    );

    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| NewJob::new("bulk.job", json!([i])))
        .collect();
    db.stage(jobs).await;
    db.wait_status(
        Duration::from_secs(120),
        "every row sent while the subscriber reads nothing",
        Some(&relay),
        |s| count(s, "sent") == JOBS as i64,
    )
    .await;

    // Now read what the server wrote: it ends with the overflow event, then the stream closes.
    // The response ends (its last chunk, `0`): the connection itself may stay open.
    let mut rest = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !rest.ends_with(b"\r\n0\r\n\r\n") {
        let mut chunk = vec![0u8; 65536];
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, stream.read(&mut chunk))
            .await
            .expect("the server ends the cut-off stream")
            .unwrap();
        assert!(n > 0, "closed before the stream's end");
        rest.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&rest);
    let events: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("event: "))
        .collect();
    assert_eq!(
        events.last().copied(),
        Some("ojs.stream.overflow"),
        "{} events read, the last: {:?}",
        events.len(),
        events.last()
    );
    assert!(
        events.len() < JOBS,
        "cut off, not every event buffered: {} events",
        events.len()
    );
    relay.terminate(Duration::from_secs(10)).await;
    backend.shutdown().await;
}

/// The surface serves every job's events and the metrics: `--listen` alone is refused (it was
/// served to anyone before), `--no-auth` says out loud that it is open, and a token that is
/// only a prefix, or another tenant's, of a real one gets nothing. `--viewer-token`'s rules
/// (issue 29) too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_surface_is_closed_unless_a_token_or_no_auth_is_given() {
    let backend = DevServer::start(0).await.unwrap();
    let db = Db::new(Kind::Sqlite, "http_closed").await.unwrap();
    db.migrate().await;
    let url = backend.url();
    let listen = ["run", "--ojs-url", url.as_str(), "--listen", "127.0.0.1:0"];

    let line = assert_error(&db.cli(&listen).await, "INVALID_CONFIG", 2);
    assert!(line.contains("--listen"), "{line}");
    assert!(
        line.contains("--token") && line.contains("--no-auth"),
        "{line}"
    );
    let mut both = listen.to_vec();
    both.extend(["--no-auth", "--token", "op"]);
    let line = assert_error(&db.cli(&both).await, "INVALID_CONFIG", 2);
    assert!(line.contains("--no-auth"), "{line}");
    let line = assert_error(
        &db.cli(&["run", "--ojs-url", url.as_str(), "--no-auth"])
            .await,
        "INVALID_CONFIG",
        2,
    );
    assert!(line.contains("--listen"), "{line}");
    // A malformed tenant token is refused without its value in the message.
    let mut bad = listen.to_vec();
    bad.extend(["--tenant-token", "s3cret-no-tenant"]);
    let line = assert_error(&db.cli(&bad).await, "INVALID_CONFIG", 2);
    assert!(!line.contains("s3cret"), "{line}");
    // A read-only token follows the same rules: it needs --listen, is not empty, does not go
    // with --no-auth, and is no other role's token (which would let it write); no message
    // repeats its value.
    let line = assert_error(
        &db.cli(&[
            "run",
            "--ojs-url",
            url.as_str(),
            "--viewer-token",
            "v-s3cret",
        ])
        .await,
        "INVALID_CONFIG",
        2,
    );
    assert!(line.contains("--viewer-token"), "{line}");
    for extra in [
        &["--viewer-token", ""][..],
        &["--token", "op-s3cret", "--viewer-token", "op-s3cret"],
        &[
            "--tenant-token",
            "acme=t-s3cret",
            "--viewer-token",
            "t-s3cret",
        ],
    ] {
        let mut bad = listen.to_vec();
        bad.extend(extra);
        let line = assert_error(&db.cli(&bad).await, "INVALID_CONFIG", 2);
        assert!(line.contains("--viewer-token"), "{extra:?}: {line}");
        assert!(!line.contains("s3cret"), "{line}");
    }
    let mut both = listen.to_vec();
    both.extend(["--no-auth", "--viewer-token", "v"]);
    let line = assert_error(&db.cli(&both).await, "INVALID_CONFIG", 2);
    assert!(line.contains("--no-auth"), "{line}");

    // A viewer token alone secures the surface: it reads, nobody else does.
    let mut viewed = db.spawn_run(
        &url,
        &["--listen", "127.0.0.1:0", "--viewer-token", "view-secret"],
    );
    let base = served_at(&viewed).await;
    for (token, status) in [
        (None, 401),
        (Some("view-secre"), 401),
        (Some("view-secret"), 200),
    ] {
        let answer = get(&format!("{base}/metrics"), token, None).await;
        assert_eq!(answer.status(), status, "{token:?}");
    }
    viewed.terminate(Duration::from_secs(30)).await;

    let mut open = db.spawn_run(&url, &["--listen", "127.0.0.1:0", "--no-auth"]);
    let base = served_at(&open).await;
    assert_eq!(
        get(&format!("{base}/metrics"), None, None).await.status(),
        200
    );
    open.terminate(Duration::from_secs(30)).await;

    let mut relay = db.spawn_run(
        &url,
        &[
            "--listen",
            "127.0.0.1:0",
            "--token",
            "operator-secret",
            "--tenant-token",
            "acme=acme-secret",
        ],
    );
    let base = served_at(&relay).await;
    for wrong in ["operator-secre", "operator-secretX", "", "acme"] {
        assert_eq!(
            get(&format!("{base}/metrics"), Some(wrong), None)
                .await
                .status(),
            401,
            "{wrong:?}"
        );
    }
    assert_eq!(
        get(&format!("{base}/metrics"), Some("operator-secret"), None)
            .await
            .status(),
        200
    );
    // A tenant's token may not widen its scope through the query.
    for query in [
        "tenant=globex",
        "tenant=acme&tenant=globex",
        "tenant=globex&tenant=acme",
    ] {
        let answer = get(
            &format!("{base}/v1/events/stream?{query}"),
            Some("acme-secret"),
            None,
        )
        .await;
        assert_ne!(answer.status(), 200, "{query}");
    }
    assert!(
        !relay.log().contains("secret"),
        "a token reached the log:\n{}",
        relay.log()
    );
    relay.terminate(Duration::from_secs(30)).await;
    backend.shutdown().await;
}
