//! A mount's one call (`Bridge::surface`): the app's decision in, the answer out, with the
//! policy of `ojs_outbox::surface`; a stream's keep-alive comes from the core.

use std::time::{Duration, Instant};

use ojs_bridge::Bridge;
use ojs_bridge::events::Next;
use ojs_devserver::DevServer;
use serde_json::{Value, json};

fn ask(bridge: &Bridge, request: Value) -> ojs_bridge::surface::SurfaceAnswer {
    bridge.surface(&request.to_string()).unwrap()
}

#[test]
fn a_mount_asks_the_core_and_writes_the_answer() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backend = runtime.block_on(DevServer::start(0)).unwrap();
    let dir = std::env::temp_dir().join(format!("ojs-bridge-surface-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("host.db").display());
    let config = json!({"adapter": {"ojs_url": backend.url(), "database_url": url,
                                    "relay": {"event_retention": "PT1H"}}})
    .to_string();
    let bridge = Bridge::new(&config).unwrap();
    bridge.migrate().unwrap();

    let health = ask(
        &bridge,
        json!({"method": "GET", "path": "/healthz", "access": false}),
    );
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    let refused = ask(
        &bridge,
        json!({"method": "GET", "path": "/metrics", "access": false}),
    );
    assert_eq!(refused.status, 403);
    let tenant = json!({"tenant": "acme"});
    let scoped = ask(
        &bridge,
        json!({"method": "GET", "path": "/metrics", "access": tenant}),
    );
    assert_eq!(scoped.status, 403);
    let metrics = ask(
        &bridge,
        json!({"method": "GET", "path": "/metrics", "access": true}),
    );
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    assert!(
        metrics
            .content_type
            .starts_with("application/openmetrics-text; version=1.0.0")
    );
    assert!(metrics.body.contains("ojs_outbox_"), "{}", metrics.body);
    let ready = ask(
        &bridge,
        json!({"method": "GET", "path": "/readyz", "access": true}),
    );
    assert_eq!(ready.status, 200, "{}", ready.body);
    let widened = json!({"method": "GET", "path": "/v1/events/stream", "query": "tenant=globex",
                         "access": tenant});
    assert_eq!(ask(&bridge, widened).status, 403);

    // A stream: the keep-alive comment at once, then again after each quiet interval.
    let stream = json!({"method": "GET", "path": "/v1/events/stream", "access": "acme",
                        "keep_alive_ms": 200});
    let answer = ask(&bridge, stream);
    assert_eq!(answer.status, 200);
    assert!(
        answer
            .headers
            .contains(&("Content-Type".into(), "text/event-stream".into()))
    );
    assert!(!Bridge::surface_is_open("/v1/events/stream") && Bridge::surface_is_open("/healthz"));
    let frames = answer.stream.expect("a stream");
    assert_eq!(frames.next(0), Next::Frame(": keep-alive\n\n".into()));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(30);
    loop {
        match frames.next(50) {
            Next::Frame(frame) => {
                assert_eq!(frame, ": keep-alive\n\n");
                assert!(started.elapsed() >= Duration::from_millis(200), "too soon");
                break;
            }
            Next::Idle => assert!(Instant::now() < deadline, "no keep-alive"),
            Next::End => panic!("the stream ended"),
        }
    }

    let odd = bridge
        .surface(
            &json!({"method": "GET", "path": "/metrics", "access": {"user": "x"},
                          "access_field": "OJS_HTTP_ACCESS"})
            .to_string(),
        )
        .err()
        .expect("not a decision");
    assert_eq!(odd.field.as_deref(), Some("OJS_HTTP_ACCESS"));
    bridge.close();
}
