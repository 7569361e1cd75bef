//! Dead-letter administration with tenants: rows killed by a poison fault, listed, replayed
//! and purged per tenant, with the devserver as the oracle of what was delivered.

mod common;

use std::time::Duration;

use common::*;
use ojs_devserver::DevServer;
use ojs_outbox::NewJob;
use serde_json::{Value, json};

fn poison(tenant: &str, i: usize) -> NewJob {
    NewJob::new("poison.job", json!([i])).with_meta(json!({"tenant_id": tenant}))
}

fn listed_ids(out: &std::process::Output) -> Vec<String> {
    let rows: Value = serde_json::from_slice(&out.stdout).expect("dead list --json prints JSON");
    rows.as_array()
        .expect("a JSON array")
        .iter()
        .map(|r| r["job_id"].as_str().unwrap().to_owned())
        .collect()
}

async fn dead_list_replay_purge(kind: Kind, name: &str) {
    let Some(db) = Db::new(kind, name).await else {
        return;
    };
    let server = DevServer::start(0).await.unwrap();
    let url = server.url();
    db.migrate().await;
    let run_args = ["--poll-interval", "PT0.1S"];

    // 3 poison jobs of t1, 2 of t2, 2 good jobs among them; the backend refuses poison.job.
    let t1 = db.stage((0..3).map(|i| poison("t1", i)).collect()).await;
    let t2 = db.stage((0..2).map(|i| poison("t2", i)).collect()).await;
    let good = db
        .stage(vec![
            NewJob::new("good.job", json!([1])).with_meta(json!({"tenant_id": "t1"})),
            NewJob::new("good.job", json!([2])),
        ])
        .await;
    add_fault(&url, json!({"status": 400, "match_type": "poison.job"})).await;

    let mut relay = db.spawn_run(&url, &run_args);
    let status = db
        .wait_status(
            Duration::from_secs(60),
            "5 dead and 2 sent",
            Some(&relay),
            |s| s["dead"] == json!(5) && s["sent"] == json!(2),
        )
        .await;
    assert_eq!(
        (count(&status, "pending"), count(&status, "failed")),
        (0, 0),
        "{status}"
    );
    assert_eq!(
        relay.terminate(Duration::from_secs(15)).await.code(),
        Some(0)
    );
    assert_eq!(
        as_set(&received_ids(&received(&url).await)),
        as_set(&good),
        "only the good jobs reached the backend"
    );

    // list: per tenant, and every tenant.
    let out = db.cli(&["dead", "list", "--tenant", "t1", "--json"]).await;
    assert_success(&out, "dead list --tenant t1 --json");
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        listed_ids(&out),
        t1,
        "t1's dead rows, oldest first, and only t1's"
    );
    for row in rows.as_array().unwrap() {
        assert_eq!(row["tenant_id"], "t1");
        assert_eq!(row["job_type"], "poison.job");
        assert!(
            row["error"].as_str().unwrap().contains("400"),
            "the reason is kept: {row}"
        );
    }
    let out = db.cli(&["dead", "list", "--json"]).await;
    assert_eq!(
        as_set(&listed_ids(&out)),
        as_set(&[t1.clone(), t2.clone()].concat()),
        "every tenant without --tenant"
    );
    let out = db
        .cli(&["dead", "list", "--tenant", "t1", "--limit", "2", "--json"])
        .await;
    assert_eq!(listed_ids(&out), t1[..2].to_vec(), "--limit");
    let out = db.cli(&["dead", "list"]).await;
    assert_success(&out, "dead list");
    let human = text(&out.stdout);
    assert!(
        human.contains("5 dead row(s) of every tenant")
            && human.contains(&t2[0])
            && human.contains("t2"),
        "{human}"
    );

    // replay t1 with the backend fixed: t1's are delivered, t2's stay dead.
    clear_faults(&url).await;
    let out = db.cli(&["dead", "replay", "--tenant", "t1"]).await;
    assert_success(&out, "dead replay --tenant t1");
    assert!(
        text(&out.stdout).contains("replayed 3 dead row(s) of tenant \"t1\""),
        "{}",
        text(&out.stdout)
    );
    let status = db.status().await;
    assert_eq!(
        (count(&status, "pending"), count(&status, "dead")),
        (3, 2),
        "{status}"
    );

    let mut relay = db.spawn_run(&url, &run_args);
    db.wait_status(
        Duration::from_secs(60),
        "t1's replayed rows sent",
        Some(&relay),
        |s| s["sent"] == json!(5),
    )
    .await;
    assert_eq!(
        relay.terminate(Duration::from_secs(15)).await.code(),
        Some(0)
    );
    let stored = as_set(&received_ids(&received(&url).await));
    assert_eq!(
        stored,
        as_set(&[good.clone(), t1.clone()].concat()),
        "t1's poison jobs delivered after the replay, t2's not"
    );
    let status = db.status().await;
    assert_eq!(
        (count(&status, "dead"), count(&status, "pending")),
        (2, 0),
        "{status}"
    );
    assert_eq!(
        listed_ids(&db.cli(&["dead", "list", "--json"]).await),
        t2,
        "t2's rows are still dead"
    );
    assert!(listed_ids(&db.cli(&["dead", "list", "--tenant", "t1", "--json"]).await).is_empty());

    // purge: refused without --yes (saying how many), then done.
    let out = db.cli(&["dead", "purge"]).await;
    assert_eq!(out.status.code(), Some(2), "purge without --yes is refused");
    let said = text(&out.stderr);
    assert!(
        said.contains("would delete 2 dead row(s) of every tenant") && said.contains("--yes"),
        "{said}"
    );
    assert_eq!(
        count(&db.status().await, "dead"),
        2,
        "nothing deleted without --yes"
    );
    let out = db.cli(&["dead", "purge", "--tenant", "t1", "--yes"]).await;
    assert_success(&out, "dead purge --tenant t1 --yes");
    assert!(
        text(&out.stdout).contains("purged 0 dead row(s) of tenant \"t1\""),
        "{}",
        text(&out.stdout)
    );
    let out = db.cli(&["dead", "purge", "--yes"]).await;
    assert_success(&out, "dead purge --yes");
    assert!(
        text(&out.stdout).contains("purged 2 dead row(s) of every tenant"),
        "{}",
        text(&out.stdout)
    );
    let status = db.status().await;
    assert_eq!(
        (count(&status, "dead"), count(&status, "sent")),
        (0, 5),
        "{status}"
    );
    assert!(listed_ids(&db.cli(&["dead", "list", "--json"]).await).is_empty());
    db.drop_table().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_list_replay_purge_by_tenant_sqlite() {
    dead_list_replay_purge(Kind::Sqlite, "dead").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_list_replay_purge_by_tenant_postgres() {
    dead_list_replay_purge(Kind::Postgres, "dead").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_list_replay_purge_by_tenant_mariadb() {
    dead_list_replay_purge(Kind::Mysql, "dead").await;
}
