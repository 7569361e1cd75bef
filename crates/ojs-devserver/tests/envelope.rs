//! The returned envelope beyond the defaults: unknown top-level attributes are preserved
//! (`ojs-core.md` §5.5 item 4), client values for system-managed attributes are ignored
//! (§5.3), and a job scheduled for later is `scheduled` until its time comes, then `available`
//! (§5.2 `scheduled_at`, HTTP binding §7.1).

mod common;

use std::time::Duration;

use common::{
    JOB_STATES, assert_batch_created, assert_created, assert_envelope, job_id, start, wait_for,
};
use serde_json::{Value, json};

#[tokio::test]
async fn unknown_attributes_are_preserved_everywhere_the_job_is_returned() {
    let (server, client) = start().await;
    let sent = json!({
        "id": job_id(1), "type": "a", "args": [1],
        "schema": "urn:ojs:schema:a:v1",
        "specversion": "1.0.0-rc.1",
        "x_trace": {"nested": [1, "two", null]},
        "timeout": 30
    });
    let answer = client.enqueue(&sent).await;
    let created = assert_created(&answer);
    for name in ["schema", "specversion", "x_trace", "timeout"] {
        assert_eq!(created[name], sent[name], "{name}");
    }

    let fetched = client.get(&format!("/ojs/v1/jobs/{}", job_id(1))).await;
    assert_eq!(fetched.body, answer.body);

    let batch = client
        .enqueue_batch(&[json!({"id": job_id(2), "type": "a", "args": [2], "x_origin": "batch"})])
        .await;
    let jobs = assert_batch_created(&batch);
    assert_eq!(jobs[0]["x_origin"], "batch");

    let received = server.snapshot();
    assert_eq!(
        received.jobs[0].attributes,
        Some(json!({
            "schema": "urn:ojs:schema:a:v1", "specversion": "1.0.0-rc.1",
            "x_trace": {"nested": [1, "two", null]}, "timeout": 30
        }))
    );
    assert_eq!(
        received.jobs[1].attributes,
        Some(json!({"x_origin": "batch"}))
    );
}

#[tokio::test]
async fn client_values_for_system_managed_attributes_are_ignored() {
    let (server, client) = start().await;
    let answer = client
        .enqueue(&json!({
            "id": job_id(1), "type": "a", "args": [],
            "state": "completed", "attempt": 9, "created_at": "2000-01-01T00:00:00Z",
            "enqueued_at": "2000-01-01T00:00:00Z", "result": 42, "error": {"message": "x"},
            "queue": "elsewhere", "priority": 99, "max_attempts": 100,
            "options": {"queue": "real", "priority": 1}
        }))
        .await;
    let created = assert_created(&answer);
    assert_eq!(created["state"], "available");
    assert_eq!(created["attempt"], 0);
    assert_eq!(created["queue"], "real");
    assert_eq!(created["priority"], 1);
    assert_eq!(created["max_attempts"], 3);
    assert!(created["created_at"].as_str().unwrap() > "2020");
    assert!(created.get("result").is_none() && created.get("error").is_none());
    assert_eq!(server.snapshot().jobs[0].attributes, None);
}

#[tokio::test]
async fn a_job_for_later_is_scheduled_and_one_for_the_past_is_available() {
    let (server, client) = start().await;
    let later = "2099-01-01T00:00:00Z";
    let answer = client
        .enqueue(
            &json!({"id": job_id(1), "type": "a", "args": [], "options": {"delay_until": later}}),
        )
        .await;
    let created = assert_created(&answer);
    assert_eq!(created["state"], "scheduled");
    assert_eq!(created["scheduled_at"], later);
    assert_eq!(
        created["enqueued_at"], created["created_at"],
        "set at push, as the servers do"
    );

    let past = client
        .enqueue(&json!({"id": job_id(2), "type": "a", "args": [],
                         "options": {"scheduled_at": "2020-01-01T00:00:00+02:00"}}))
        .await;
    assert_eq!(assert_created(&past)["state"], "available");

    // scheduled_at wins over delay_until, as on the reference servers.
    let both = client
        .enqueue(&json!({"id": job_id(3), "type": "a", "args": [],
                         "options": {"scheduled_at": later, "delay_until": "2020-01-01T00:00:00Z"}}))
        .await;
    let created = assert_created(&both);
    assert_eq!(created["state"], "scheduled");
    assert_eq!(created["scheduled_at"], later);

    let fetched = client.get(&format!("/ojs/v1/jobs/{}", job_id(1))).await;
    assert_eq!(fetched.body["job"]["state"], "scheduled");
    let states: Vec<String> = server
        .snapshot()
        .jobs
        .into_iter()
        .map(|j| j.state)
        .collect();
    assert_eq!(states, vec!["scheduled", "available", "scheduled"]);
}

#[tokio::test]
async fn a_scheduled_job_becomes_available_when_its_time_comes() {
    let (server, client) = start().await;
    // Due a second from now: the GET answers scheduled until then, available after. The
    // timestamp carries milliseconds, so the instant compared below is the one the server
    // reads from the text: a `due` with the sub-millisecond part the text drops would be up
    // to 1 ms later than the server's, and a GET within that millisecond would see the job
    // available "before its time".
    let in_a_second = (std::time::SystemTime::now() + Duration::from_secs(1))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let due = std::time::UNIX_EPOCH + Duration::from_millis(in_a_second.as_millis() as u64);
    let due_text = rfc3339(due);
    let answer = client
        .enqueue(&json!({"id": job_id(1), "type": "a", "args": [], "options": {"delay_until": due_text}}))
        .await;
    let created = assert_created(&answer);
    if std::time::SystemTime::now() < due {
        assert_eq!(created["state"], "scheduled");
    }
    let path = format!("/ojs/v1/jobs/{}", job_id(1));
    let became_available = wait_for(
        "the job to become available",
        Duration::from_secs(20),
        || {
            let client = &client;
            let path = path.clone();
            async move {
                let job = client.get(&path).await.body["job"].clone();
                (job["state"] == "available").then_some(job)
            }
        },
    )
    .await;
    assert!(std::time::SystemTime::now() >= due, "not before its time");
    assert_envelope(&became_available, &JOB_STATES);
    assert_eq!(became_available["scheduled_at"], due_text.as_str());
    assert_eq!(server.snapshot().jobs[0].state, "available");
}

/// `2026-03-01T09:00:00.123Z` for a system time (the test's own formatting, UTC).
fn rfc3339(at: std::time::SystemTime) -> String {
    let since = at
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    let seconds = since.as_secs() as i64;
    let (days, second_of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // Civil date from days since 1970-01-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60,
        since.subsec_millis()
    )
}

#[tokio::test]
async fn get_answers_every_stored_job_with_its_current_state() {
    let (_server, client) = start().await;
    let answer = client
        .enqueue(&json!({"id": job_id(1), "type": "a", "args": [],
                         "meta": {"k": "v"}, "options": {"expires_at": "2099-01-01T00:00:00Z"}}))
        .await;
    let created = assert_created(&answer).clone();
    let fetched = client.get(&format!("/ojs/v1/jobs/{}", job_id(1))).await;
    assert_eq!(fetched.body["job"], created);
    assert_eq!(created["expires_at"], "2099-01-01T00:00:00Z");
    assert_eq!(created["meta"], json!({"k": "v"}));
    assert!(fetched.body.as_object().is_some_and(|b| b.len() == 1));
    assert_eq!(fetched.body["job"].get("options"), None::<&Value>);
}
