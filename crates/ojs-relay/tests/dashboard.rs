//! The dashboard's HTTP side (`ojs_outbox::dashboard`) through `ojs-relay run --listen`, over
//! a real SQLite file (and PostgreSQL when `OJS_TEST_DATABASE_URL` is set) and the devserver:
//! the page and its headers, the JSON API's counts and rows, tenant scoping that no query
//! can widen, and replay and purge of chosen dead rows with the write header; a read-only
//! `--viewer-token` that reads what the operator reads and is refused every write. The page
//! itself is driven in a real browser by the Express suite (bindings-node/test/dashboard.test.js).

mod common;

use std::time::Duration;

use common::*;
use ojs_devserver::DevServer;
use ojs_outbox::NewJob;
use reqwest::StatusCode;
use serde_json::{Value, json};

struct Surface {
    base: String,
    http: reqwest::Client,
}

impl Surface {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        write: bool,
    ) -> (StatusCode, reqwest::header::HeaderMap, String) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if write {
            request = request.header("X-OJS-Dashboard", "1");
        }
        let response = request.send().await.expect("request");
        let (status, headers) = (response.status(), response.headers().clone());
        (status, headers, response.text().await.unwrap())
    }

    async fn json(&self, path: &str, token: &str) -> Value {
        let (status, _, body) = self
            .call(reqwest::Method::GET, path, Some(token), false)
            .await;
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    async fn post(&self, path: &str, token: &str, write: bool) -> (StatusCode, Value) {
        let (status, _, body) = self
            .call(reqwest::Method::POST, path, Some(token), write)
            .await;
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }
}

fn ids_of(rows: &Value) -> Vec<String> {
    let mut ids: Vec<String> = rows["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["job_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

async fn the_dashboard_serves_scoped_views_and_dead_letter_actions(kind: Kind, name: &str) {
    let Some(db) = Db::new(kind, name).await else {
        return;
    };
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    db.migrate().await;
    let poison = |tenant: &str, i: usize| {
        NewJob::new("poison.job", json!([i])).with_meta(json!({"tenant_id": tenant}))
    };
    let t1_dead = db.stage((0..2).map(|i| poison("t1", i)).collect()).await;
    let t2_dead = db.stage(vec![poison("t2", 9)]).await;
    let good = db
        .stage(vec![
            NewJob::new("good.job", json!(["visible-args"])).with_meta(json!({"tenant_id": "t1"})),
        ])
        .await;
    add_fault(&url, json!({"status": 400, "match_type": "poison.job"})).await;
    let mut relay = db.spawn_run(
        &url,
        &[
            "--poll-interval",
            "PT0.1S",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "op",
            "--tenant-token",
            "t1=ta",
        ],
    );
    let surface = Surface {
        base: served_at(&relay).await,
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
    };
    db.wait_status(
        Duration::from_secs(60),
        "3 dead, 1 sent",
        Some(&relay),
        |s| count(s, "dead") == 3 && count(s, "sent") == 1,
    )
    .await;

    // The page: closed without a token, a redirect to the slash, a CSP and no inline script.
    let get = reqwest::Method::GET;
    let (status, ..) = surface.call(get.clone(), "/dashboard/", None, false).await;
    assert_eq!(status, 401);
    let (status, headers, _) = surface
        .call(get.clone(), "/dashboard", Some("op"), false)
        .await;
    assert_eq!(status, 308);
    assert_eq!(headers["location"], "dashboard/");
    let (status, headers, page) = surface
        .call(get.clone(), "/dashboard/", Some("ta"), false)
        .await;
    assert_eq!(status, 200);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(headers["cache-control"], "no-store");
    let scripts: Vec<&str> = page.split("<script").skip(1).collect();
    assert_eq!(scripts.len(), 1, "{page}");
    assert!(
        scripts[0].trim_start().starts_with("src=\"assets/app-"),
        "{page}"
    );
    assert!(!page.contains("style="), "no inline style either");
    let asset = scripts[0].split('"').nth(1).unwrap();
    let (status, headers, script) = surface
        .call(
            get.clone(),
            &format!("/dashboard/{asset}"),
            Some("ta"),
            false,
        )
        .await;
    assert_eq!(status, 200);
    assert!(
        headers["cache-control"]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    assert!(script.contains("api/overview"));
    let (status, ..) = surface
        .call(get.clone(), "/dashboard/assets/app-0.js", Some("op"), false)
        .await;
    assert_eq!(status, 404);

    // The operator sees every tenant and the health; a tenant only its own, no health.
    let all = surface.json("/dashboard/api/overview", "op").await;
    assert_eq!(all["counts"]["dead"], 3, "{all}");
    assert_eq!(all["counts"]["sent"], 1);
    assert_eq!(all["health"]["ready"], true, "{all}");
    let sent: i64 = all["minutes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["sent"].as_i64().unwrap())
        .sum();
    assert_eq!(sent, 1, "{all}");
    // The relay lists itself in the registry, with a fresh heartbeat.
    // (Not on SQLite: there a relay writes no heartbeat.)
    let relays = all["relays"].as_array().expect("relays");
    if kind != Kind::Sqlite {
        assert_eq!(relays.len(), 1, "{all}");
        assert_eq!(relays[0]["pid"], relay.pid(), "{all}");
        assert!(relays[0]["heartbeat_age_ms"].as_i64().unwrap() < 60_000);
    } else {
        assert!(relays.is_empty(), "{all}");
    }
    let mine = surface.json("/dashboard/api/overview", "ta").await;
    assert_eq!(
        mine["relays"],
        Value::Null,
        "a tenant does not see the relays"
    );
    assert_eq!(mine["counts"]["dead"], 2, "{mine}");
    assert_eq!(mine["health"], Value::Null);
    assert_eq!(
        mine["viewer"],
        json!({"tenant": "t1", "writes": true, "decodes": false})
    );
    for group in mine["groups"].as_array().unwrap() {
        assert_eq!(group["tenant_id"], "t1", "{mine}");
    }
    // The groups hold the dead rows: every tenant's for the operator, its own for a tenant.
    let dead_in_groups = |view: &Value| -> i64 {
        (view["groups"].as_array().unwrap().iter())
            .filter(|group| group["status"] == "dead")
            .map(|group| group["rows"].as_i64().unwrap())
            .sum()
    };
    assert_eq!(dead_in_groups(&all), 3, "{all}");
    assert_eq!(dead_in_groups(&mine), 2, "{mine}");
    let dead = surface.json("/dashboard/api/rows?status=dead", "ta").await;
    assert_eq!(ids_of(&dead), sorted(t1_dead.clone()));
    let dead = surface.json("/dashboard/api/rows?status=dead", "op").await;
    assert_eq!(dead["rows"].as_array().unwrap().len(), 3);
    // No parameter widens a tenant's scope: there is no tenant parameter, and another
    // tenant's row does not exist for it.
    let (status, ..) = surface
        .call(
            get.clone(),
            "/dashboard/api/rows?tenant=t2",
            Some("ta"),
            false,
        )
        .await;
    assert_eq!(status, 400);
    let (status, ..) = surface
        .call(
            get.clone(),
            &format!("/dashboard/api/rows/{}", t2_dead[0]),
            Some("ta"),
            false,
        )
        .await;
    assert_eq!(status, 404);
    let found = surface
        .json(&format!("/dashboard/api/rows?job_id={}", t2_dead[0]), "op")
        .await;
    assert_eq!(ids_of(&found), t2_dead);
    let detail = surface
        .json(&format!("/dashboard/api/rows/{}", good[0]), "ta")
        .await;
    assert_eq!(detail["row"]["args"], json!(["visible-args"]));
    assert_eq!(detail["row"]["encrypted"], false);
    assert_eq!(detail["row"]["summary"]["status"], "sent");

    // Writes need the header, and reach only the caller's own rows.
    let replay_t2 = format!("/dashboard/api/dead/replay?job_id={}", t2_dead[0]);
    let (status, _) = surface.post(&replay_t2, "op", false).await;
    assert_eq!(status, 403, "no write header, no write");
    let (status, answer) = surface.post(&replay_t2, "ta", true).await;
    assert_eq!((status.as_u16(), answer), (200, json!({"replayed": 0})));
    clear_faults(&url).await;
    let replay_t1 = format!(
        "/dashboard/api/dead/replay?job_id={}&job_id={}",
        t1_dead[0], t1_dead[1]
    );
    let (status, answer) = surface.post(&replay_t1, "ta", true).await;
    assert_eq!((status.as_u16(), answer), (200, json!({"replayed": 2})));
    db.wait_status(
        Duration::from_secs(60),
        "t1's replayed rows sent",
        Some(&relay),
        |s| count(s, "sent") == 3 && count(s, "dead") == 1,
    )
    .await;
    let purge_t2 = format!("/dashboard/api/dead/purge?job_id={}", t2_dead[0]);
    let (status, answer) = surface.post(&purge_t2, "op", true).await;
    assert_eq!((status.as_u16(), answer), (200, json!({"purged": 1})));
    let after = surface.json("/dashboard/api/overview", "op").await;
    assert_eq!(after["counts"]["dead"], 0, "{after}");
    let delivered = as_set(&received_ids(&received(&url).await));
    assert!(
        t1_dead.iter().all(|id| delivered.contains(id)),
        "replayed rows reached the backend"
    );
    assert!(!delivered.contains(&t2_dead[0]), "the purged row never did");
    assert_eq!(
        relay.terminate(Duration::from_secs(15)).await.code(),
        Some(0)
    );
    // A graceful stop takes the relay out of the registry.
    if kind != Kind::Sqlite {
        let registry = format!("SELECT COUNT(*) FROM {}_relays", db.table);
        let left: i64 = if kind == Kind::Postgres {
            let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
            sqlx::query_scalar(sqlx::AssertSqlSafe(registry))
                .fetch_one(&pool)
                .await
                .unwrap()
        } else {
            let pool = sqlx::MySqlPool::connect(&db.url).await.unwrap();
            sqlx::query_scalar(sqlx::AssertSqlSafe(registry))
                .fetch_one(&pool)
                .await
                .unwrap()
        };
        assert_eq!(left, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_on_sqlite() {
    the_dashboard_serves_scoped_views_and_dead_letter_actions(Kind::Sqlite, "dashboard").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_on_postgres() {
    the_dashboard_serves_scoped_views_and_dead_letter_actions(Kind::Postgres, "dashboard_pg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_on_mariadb() {
    the_dashboard_serves_scoped_views_and_dead_letter_actions(Kind::Mysql, "dashboard_mariadb")
        .await;
}

/// `--viewer-token` (issue 29): the read-only caller of `ojs_outbox::surface`
/// (`Caller::Viewer(None)`). It reads the dashboard, the rows, a dead letter, the events,
/// `/metrics` and `/readyz` as the operator does, and is refused (403) replay, purge and the
/// Codec Server, so the dead row is still there; no token, or a wrong one, is 401.
async fn a_viewer_token_reads_what_the_operator_reads_and_writes_nothing(kind: Kind, name: &str) {
    let Some(db) = Db::new(kind, name).await else {
        return;
    };
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    db.migrate().await;
    let dead = db
        .stage(vec![
            NewJob::new("poison.job", json!(["dead-args"])).with_meta(json!({"tenant_id": "t1"})),
        ])
        .await;
    db.stage(vec![
        NewJob::new("good.job", json!([1])).with_meta(json!({"tenant_id": "t2"})),
    ])
    .await;
    add_fault(&url, json!({"status": 400, "match_type": "poison.job"})).await;
    let mut relay = db.spawn_run(
        &url,
        &[
            "--poll-interval",
            "PT0.1S",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "op",
            "--viewer-token",
            "view-secret",
            "--viewer-token",
            "other-view-secret",
        ],
    );
    let surface = Surface {
        base: served_at(&relay).await,
        http: reqwest::Client::new(),
    };
    db.wait_status(
        Duration::from_secs(60),
        "1 dead, 1 sent",
        Some(&relay),
        |s| count(s, "dead") == 1 && count(s, "sent") == 1,
    )
    .await;
    clear_faults(&url).await;
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;

    // No token, or one that is only a prefix of the viewer's, gets nothing.
    for token in [None, Some("view-secre"), Some("view-secretX")] {
        for path in ["/dashboard/", "/dashboard/api/overview", "/metrics"] {
            let (status, ..) = surface.call(get.clone(), path, token, false).await;
            assert_eq!(status, 401, "{path} with {token:?}");
        }
    }

    // Both viewer tokens read the page and what the operator reads, with no write.
    for token in ["view-secret", "other-view-secret"] {
        let (status, _, page) = surface
            .call(get.clone(), "/dashboard/", Some(token), false)
            .await;
        assert_eq!(status, 200, "{page}");
        let seen = surface.json("/dashboard/api/overview", token).await;
        assert_eq!(
            seen["viewer"],
            json!({"tenant": null, "writes": false, "decodes": false}),
            "{seen}"
        );
        assert_eq!(seen["counts"]["dead"], 1, "{seen}");
        assert_eq!(seen["counts"]["sent"], 1, "{seen}");
    }
    let theirs = surface.json("/dashboard/api/overview", "view-secret").await;
    let ours = surface.json("/dashboard/api/overview", "op").await;
    for key in ["counts", "groups"] {
        assert_eq!(theirs[key], ours[key], "{key}: {theirs} / {ours}");
    }
    assert_eq!(theirs["health"]["ready"], true, "the health too: {theirs}");
    let rows = surface
        .json("/dashboard/api/rows?status=dead", "view-secret")
        .await;
    assert_eq!(ids_of(&rows), dead, "every tenant's dead rows");
    let detail = surface
        .json(&format!("/dashboard/api/rows/{}", dead[0]), "view-secret")
        .await;
    assert_eq!(detail["row"]["summary"]["status"], "dead", "{detail}");
    assert_eq!(detail["row"]["args"], json!(["dead-args"]), "{detail}");
    // The operator's other reads, as surface.rs decides for a viewer of everything.
    for path in ["/metrics", "/readyz"] {
        let (status, _, body) = surface
            .call(get.clone(), path, Some("view-secret"), false)
            .await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (status, ..) = surface
        .call(post.clone(), "/codec/decode", Some("view-secret"), false)
        .await;
    assert_eq!(status, 403, "no Codec Server for a read-only caller");

    // The events, every tenant's: the stream opens for the viewer, who then sees the
    // operator's action below.
    let mut request = surface.http.get(format!(
        "{}/v1/events/stream?types=ojs.outbox.*",
        surface.base
    ));
    request = request.bearer_auth("view-secret");
    let stream = request.send().await.expect("stream");
    assert_eq!(stream.status(), 200);

    // Replay and purge are refused, with or without the write header, and change nothing.
    let replay = format!("/dashboard/api/dead/replay?job_id={}", dead[0]);
    let purge = format!("/dashboard/api/dead/purge?job_id={}", dead[0]);
    for path in [&replay, &purge] {
        for write in [true, false] {
            let (status, answer) = surface.post(path, "view-secret", write).await;
            assert_eq!(status, 403, "{path} (header: {write}): {answer}");
            assert_eq!(answer["error"]["code"], "forbidden", "{answer}");
        }
    }
    let rows = surface.json("/dashboard/api/rows?status=dead", "op").await;
    assert_eq!(ids_of(&rows), dead, "the dead row is still there");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = db.status().await;
    assert_eq!(
        (count(&status, "dead"), count(&status, "sent")),
        (1, 1),
        "{status}"
    );
    let delivered = as_set(&received_ids(&received(&url).await));
    assert!(
        !delivered.contains(&dead[0]),
        "the dead row was not replayed"
    );

    // The same purge is the operator's to make; the viewer sees it on the stream.
    let (status, answer) = surface.post(&purge, "op", true).await;
    assert_eq!((status.as_u16(), answer), (200, json!({"purged": 1})));
    let events = frames(stream, 1).await;
    assert_eq!(events[0].1, "ojs.outbox.dead_purged", "{events:?}");
    assert!(
        !relay.log().contains("secret"),
        "a token reached the log:\n{}",
        relay.log()
    );
    assert_eq!(
        relay.terminate(Duration::from_secs(15)).await.code(),
        Some(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewer_token_on_sqlite() {
    a_viewer_token_reads_what_the_operator_reads_and_writes_nothing(Kind::Sqlite, "dashboard_view")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewer_token_on_postgres() {
    a_viewer_token_reads_what_the_operator_reads_and_writes_nothing(
        Kind::Postgres,
        "dashboard_view_pg",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewer_token_on_mariadb() {
    a_viewer_token_reads_what_the_operator_reads_and_writes_nothing(
        Kind::Mysql,
        "dashboard_view_mariadb",
    )
    .await;
}
