//! The main job on the embedded default: stage jobs in SQLite transactions, commit some, roll
//! back others, and watch the dev backend receive exactly the committed ones, milliseconds
//! after COMMIT. Run it with `scripts/demo.sh` (or `cargo run -p ojs-outbox --example demo`).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ojs_devserver::DevServer;
use ojs_outbox::{Config, NewJob, Outbox, RequestContext};
use serde_json::json;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = DevServer::start(0).await?;
    let dir = std::env::temp_dir().join(format!("ojs-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let database_url = format!("sqlite://{}", dir.join("app.db").display());
    println!(
        "dev backend  {}\ndatabase     {database_url}\n",
        backend.url()
    );

    let config = Config::from_value(
        &json!({"adapter": {"ojs_url": backend.url(), "database_url": database_url}}),
    )?;
    let outbox = Outbox::connect(config).await?;
    outbox.store().migrate().await?;
    outbox.start_relay();

    let mut tx = outbox.begin().await?;
    tx.execute("CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, email TEXT NOT NULL)")
        .await?;
    tx.commit().await?;

    let mut commits = Vec::new();
    for (user, commit) in [(1, true), (2, false), (3, true), (4, true), (5, false)] {
        let mut tx = outbox.begin().await?;
        tx.set_context(Some(RequestContext {
            request_id: Some(format!("req-{user}")),
            ..Default::default()
        }));
        tx.execute(&format!(
            "INSERT INTO users (id, email) VALUES ({user}, 'user{user}@example.com')"
        ))
        .await?;
        let job_id = tx
            .enqueue_after_commit(NewJob::new("email.welcome", json!([user])))
            .await?;
        if commit {
            tx.commit().await?;
            println!("user {user}: COMMIT   -> job {job_id} staged");
            commits.push((user, job_id, now_us()));
        } else {
            tx.rollback().await?;
            println!("user {user}: ROLLBACK -> job {job_id} discarded with the user");
        }
    }
    // A savepoint rolled back inside a committed transaction discards only its own job.
    let mut tx = outbox.begin().await?;
    let kept = tx
        .enqueue_after_commit(NewJob::new("report.daily", json!(["kept"])))
        .await?;
    tx.savepoint().await?;
    let dropped = tx
        .enqueue_after_commit(NewJob::new("report.daily", json!(["dropped"])))
        .await?;
    tx.rollback_savepoint().await?;
    tx.commit().await?;
    commits.push((0, kept.clone(), now_us()));
    println!("savepoint: job {dropped} rolled back with its savepoint, job {kept} committed\n");

    let deadline = Instant::now() + Duration::from_secs(10);
    let received = loop {
        let received = backend.snapshot();
        if received.jobs.len() >= commits.len() || Instant::now() > deadline {
            break received;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    println!(
        "the backend received {} jobs (expected {}):",
        received.jobs.len(),
        commits.len()
    );
    for job in &received.jobs {
        let committed_at = commits
            .iter()
            .find(|(_, id, _)| *id == job.id)
            .map(|(_, _, at)| *at);
        let latency = committed_at.map(|at| {
            format!(
                "{:.1} ms after COMMIT",
                job.received_at_us.saturating_sub(at) as f64 / 1000.0
            )
        });
        println!(
            "  {} {} args={} {}",
            job.id,
            job.job_type,
            job.args,
            latency.unwrap_or_else(|| "NOT COMMITTED!".into())
        );
    }
    let only_committed = received.jobs.len() == commits.len()
        && received
            .jobs
            .iter()
            .all(|job| commits.iter().any(|(_, id, _)| *id == job.id));
    outbox.stop_relay().await;
    let status = outbox.store().status().await?;
    println!(
        "\noutbox: {} sent, {} pending, {} dead",
        status.sent,
        status.pending + status.failed,
        status.dead
    );
    backend.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    if only_committed {
        println!("OK: exactly the committed jobs were delivered.");
        Ok(())
    } else {
        Err("the backend did not receive exactly the committed jobs".into())
    }
}
