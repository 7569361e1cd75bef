//! Unique jobs (`options.unique`), with the answers of `ojs-unique-jobs.md` (§5: 409
//! `duplicate` on reject, 200 with the existing job and `deduplicated: true` on ignore, the
//! existing job cancelled on replace) where the reference servers agree, and theirs where they
//! differ (default keys `type` + `args`; `replace_except_schedule` answered like reject).

mod common;

use std::time::Duration;

use common::{
    Answer, Client, JOB_STATES, assert_batch_created, assert_created, assert_envelope,
    assert_error, assert_ojs_headers, job_id, start, wait_for,
};
use serde_json::{Value, json};

fn unique_job(n: u64, args: Value, unique: Value) -> Value {
    json!({"id": job_id(n), "type": "report.daily", "args": args, "options": {"unique": unique}})
}

async fn get_job(client: &Client, n: u64) -> Answer {
    client.get(&format!("/ojs/v1/jobs/{}", job_id(n))).await
}

#[tokio::test]
async fn reject_answers_409_duplicate_naming_the_existing_job() {
    let (server, client) = start().await;
    let policy = json!({"on_conflict": "reject"});
    assert_created(
        &client
            .enqueue(&unique_job(1, json!([7]), policy.clone()))
            .await,
    );

    let answer = client
        .enqueue(&unique_job(2, json!([7]), policy.clone()))
        .await;
    let error = assert_error(&answer, 409, "duplicate");
    assert_eq!(error["retryable"], false);
    assert_eq!(error["details"]["existing_job_id"], job_id(1));
    assert_eq!(error["details"]["existing_job_state"], "available");
    let key = error["details"]["unique_key"].as_str().expect("unique_key");
    assert!(
        key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()),
        "{key}"
    );
    assert_eq!(
        error["doc_url"],
        "https://openjobspec.org/errors/DUPLICATE_JOB"
    );
    assert_eq!(get_job(&client, 2).await.status, 404, "not stored");

    // on_conflict defaults to reject; other args make another fingerprint.
    let again = client.enqueue(&unique_job(3, json!([7]), json!({}))).await;
    assert_error(&again, 409, "duplicate");
    assert_created(&client.enqueue(&unique_job(4, json!([8]), json!({}))).await);

    let received = server.snapshot();
    let ids: Vec<&str> = received.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, vec![job_id(1), job_id(4)]);
    assert_eq!(received.deliveries.get(&job_id(2)), Some(&1));
}

#[tokio::test]
async fn the_fingerprint_has_the_listed_dimensions_and_type_and_args_by_default() {
    let (_server, client) = start().await;
    let with = |n: u64, job_type: &str, queue: &str, args: Value, meta: Value, unique: Value| {
        json!({"id": job_id(n), "type": job_type, "args": args, "meta": meta,
               "options": {"queue": queue, "unique": unique}})
    };
    let default = json!({});
    // Default keys: type and args (the servers), not queue, not meta.
    assert_eq!(
        client
            .enqueue(&with(1, "a", "q1", json!([1]), json!({}), default.clone()))
            .await
            .status,
        201
    );
    assert_eq!(
        client
            .enqueue(&with(
                2,
                "a",
                "q2",
                json!([1]),
                json!({"m": 1}),
                default.clone()
            ))
            .await
            .status,
        409
    );
    assert_eq!(
        client
            .enqueue(&with(3, "b", "q1", json!([1]), json!({}), default.clone()))
            .await
            .status,
        201
    );

    // keys: type and queue.
    let by_queue = json!({"keys": ["type", "queue"]});
    assert_eq!(
        client
            .enqueue(&with(
                10,
                "c",
                "q1",
                json!([1]),
                json!({}),
                by_queue.clone()
            ))
            .await
            .status,
        201
    );
    assert_eq!(
        client
            .enqueue(&with(
                11,
                "c",
                "q1",
                json!([2]),
                json!({}),
                by_queue.clone()
            ))
            .await
            .status,
        409
    );
    assert_eq!(
        client
            .enqueue(&with(
                12,
                "c",
                "q2",
                json!([1]),
                json!({}),
                by_queue.clone()
            ))
            .await
            .status,
        201
    );

    // args_keys: the named keys of the object elements of args.
    let by_user = json!({"keys": ["type", "args"], "args_keys": ["user_id"]});
    let user = |n: u64, id: u64, template: &str| {
        with(
            n,
            "d",
            "q",
            json!([{"user_id": id, "template": template}]),
            json!({}),
            by_user.clone(),
        )
    };
    assert_eq!(client.enqueue(&user(20, 42, "welcome")).await.status, 201);
    assert_eq!(client.enqueue(&user(21, 42, "reminder")).await.status, 409);
    assert_eq!(client.enqueue(&user(22, 43, "welcome")).await.status, 201);

    // meta_keys: the named keys of meta.
    let by_tenant = json!({"keys": ["type", "meta"], "meta_keys": ["tenant_id"]});
    let tenant = |n: u64, tenant: &str, trace: &str| {
        with(
            n,
            "e",
            "q",
            json!([n]),
            json!({"tenant_id": tenant, "trace": trace}),
            by_tenant.clone(),
        )
    };
    assert_eq!(client.enqueue(&tenant(30, "acme", "1")).await.status, 201);
    assert_eq!(client.enqueue(&tenant(31, "acme", "2")).await.status, 409);
    assert_eq!(client.enqueue(&tenant(32, "globex", "1")).await.status, 201);
}

#[tokio::test]
async fn ignore_answers_200_with_the_existing_job_and_deduplicated() {
    let (server, client) = start().await;
    let policy = json!({"on_conflict": "ignore"});
    let first = client
        .enqueue(&unique_job(1, json!([1]), policy.clone()))
        .await;
    let first = assert_created(&first).clone();

    let answer = client.enqueue(&unique_job(2, json!([1]), policy)).await;
    assert_eq!(answer.status, 200, "200, not 201 (ojs-unique-jobs.md §5.4)");
    assert_ojs_headers(&answer);
    let body = answer.body.as_object().expect("object");
    assert_eq!(body.len(), 2, "job and deduplicated: {}", answer.body);
    assert_eq!(answer.body["deduplicated"], true);
    assert_envelope(&answer.body["job"], &JOB_STATES);
    assert_eq!(answer.body["job"], first, "the existing job, as it is");
    let location = format!("/ojs/v1/jobs/{}", job_id(1));
    assert_eq!(answer.header("location"), Some(location.as_str()));

    assert_eq!(get_job(&client, 2).await.status, 404);
    let received = server.snapshot();
    assert_eq!(received.jobs.len(), 1);
    assert_eq!(received.deliveries.get(&job_id(2)), Some(&1));
}

#[tokio::test]
async fn replace_cancels_the_existing_job_and_stores_the_new_one() {
    let (server, client) = start().await;
    let policy = json!({"on_conflict": "replace"});
    assert_created(
        &client
            .enqueue(&unique_job(1, json!([1]), policy.clone()))
            .await,
    );
    let second = client
        .enqueue(&unique_job(2, json!([1]), policy.clone()))
        .await;
    assert_eq!(assert_created(&second)["state"], "available");

    let replaced = get_job(&client, 1).await;
    assert_eq!(replaced.status, 200, "a replaced job is still stored");
    let job = &replaced.body["job"];
    assert_envelope(job, &JOB_STATES);
    assert_eq!(job["state"], "cancelled");
    assert!(common::is_utc_timestamp(
        job["cancelled_at"].as_str().unwrap()
    ));

    // The control API: `jobs` holds what the backend holds as work, `replaced` the rest.
    assert_created(&client.enqueue(&unique_job(3, json!([1]), policy)).await);
    let received = server.snapshot();
    let live: Vec<&str> = received.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(live, vec![job_id(3)]);
    assert_eq!(received.jobs[0].seq, 2, "seq keeps the acceptance order");
    let replaced: Vec<(&str, &str, &str)> = received
        .replaced
        .iter()
        .map(|r| {
            (
                r.job.id.as_str(),
                r.replaced_by.as_str(),
                r.job.state.as_str(),
            )
        })
        .collect();
    assert_eq!(
        replaced,
        vec![
            (job_id(1).as_str(), job_id(2).as_str(), "cancelled"),
            (job_id(2).as_str(), job_id(3).as_str(), "cancelled"),
        ]
    );
    let stats = server.stats();
    assert_eq!((stats.jobs, stats.replaced), (1, 2));
}

#[tokio::test]
async fn replace_except_schedule_is_answered_like_reject_as_the_servers_do() {
    let (server, client) = start().await;
    let scheduled = |n: u64, at: &str| {
        json!({"id": job_id(n), "type": "digest.send", "args": [42],
               "options": {"scheduled_at": at,
                           "unique": {"on_conflict": "replace_except_schedule"}}})
    };
    let first = client.enqueue(&scheduled(1, "2099-01-01T17:00:00Z")).await;
    assert_eq!(assert_created(&first)["state"], "scheduled");
    let answer = client.enqueue(&scheduled(2, "2099-01-01T18:00:00Z")).await;
    let error = assert_error(&answer, 409, "duplicate");
    assert_eq!(error["details"]["existing_job_id"], job_id(1));
    assert_eq!(error["details"]["existing_job_state"], "scheduled");
    let received = server.snapshot();
    assert_eq!(received.jobs.len(), 1);
    assert!(received.replaced.is_empty());
}

#[tokio::test]
async fn states_limit_which_existing_jobs_count() {
    let (_server, client) = start().await;
    // An available job does not block a policy that checks scheduled jobs only.
    assert_created(&client.enqueue(&unique_job(1, json!([1]), json!({}))).await);
    let only_scheduled = json!({"states": ["scheduled"]});
    assert_created(
        &client
            .enqueue(&unique_job(2, json!([1]), only_scheduled.clone()))
            .await,
    );

    let later = |n: u64, unique: Value| {
        json!({"id": job_id(n), "type": "x", "args": [], "options": {
            "delay_until": "2099-01-01T00:00:00Z", "unique": unique}})
    };
    assert_created(&client.enqueue(&later(3, json!({}))).await);
    assert_error(
        &client.enqueue(&later(4, only_scheduled)).await,
        409,
        "duplicate",
    );
    assert_created(
        &client
            .enqueue(&later(5, json!({"states": ["available"]})))
            .await,
    );
}

#[tokio::test]
async fn a_period_bounds_how_long_a_job_blocks_others() {
    let (_server, client) = start().await;
    let day = json!({"period": "P1D"});
    assert_created(
        &client
            .enqueue(&unique_job(1, json!([1]), day.clone()))
            .await,
    );
    assert_error(
        &client.enqueue(&unique_job(2, json!([1]), day)).await,
        409,
        "duplicate",
    );

    // A short period: the conflict ends once it has passed (polled, not slept).
    let short = json!({"period": "PT0.2S"});
    assert_created(
        &client
            .enqueue(&unique_job(10, json!([2]), short.clone()))
            .await,
    );
    let mut n = 10;
    wait_for("the period to pass", Duration::from_secs(20), || {
        n += 1;
        let body = unique_job(n, json!([2]), short.clone());
        let client = &client;
        async move { (client.enqueue(&body).await.status == 201).then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn the_repeated_id_is_checked_before_the_unique_key() {
    let (server, client) = start().await;
    let policy = json!({"on_conflict": "ignore"});
    assert_created(
        &client
            .enqueue(&unique_job(1, json!([1]), policy.clone()))
            .await,
    );
    // A relay's re-send of the same id: 409 duplicate with its own id, which GET finds.
    let again = client.enqueue(&unique_job(1, json!([1]), policy)).await;
    let error = assert_error(&again, 409, "duplicate");
    assert_eq!(error["details"]["existing_job_id"], job_id(1));
    assert!(error["details"].get("unique_key").is_none());
    assert_eq!(server.snapshot().deliveries.get(&job_id(1)), Some(&2));
}

#[tokio::test]
async fn jobs_without_a_policy_neither_conflict_nor_block() {
    let (_server, client) = start().await;
    let plain = json!({"id": job_id(1), "type": "report.daily", "args": [1]});
    assert_created(&client.enqueue(&plain).await);
    assert_created(&client.enqueue(&unique_job(2, json!([1]), json!({}))).await);
    let plain_again = json!({"id": job_id(3), "type": "report.daily", "args": [1]});
    assert_created(&client.enqueue(&plain_again).await);
}

#[tokio::test]
async fn an_invalid_policy_is_400_invalid_request() {
    let (_server, client) = start().await;
    let answer = client
        .enqueue(&unique_job(1, json!([1]), json!({"keys": ["meta"]})))
        .await;
    let error = assert_error(&answer, 400, "invalid_request");
    assert_eq!(error["details"]["field"], "options.unique.meta_keys");
}

#[tokio::test]
async fn in_a_batch_policies_apply_in_order_and_a_reject_refuses_the_whole_batch() {
    let (server, client) = start().await;
    let reject = json!({"on_conflict": "reject"});
    let answer = client
        .enqueue_batch(&[
            unique_job(1, json!([1]), json!({})),
            unique_job(2, json!([2]), reject.clone()),
            unique_job(3, json!([2]), reject.clone()),
        ])
        .await;
    let error = assert_error(&answer, 409, "duplicate");
    assert_eq!(error["details"]["index"], 2);
    assert_eq!(error["details"]["existing_job_id"], job_id(2));
    assert!(server.snapshot().jobs.is_empty(), "atomic");

    // ignore: the element is answered with the existing job; replace: the earlier one of the
    // same batch is cancelled.
    let ignore = json!({"on_conflict": "ignore"});
    let replace = json!({"on_conflict": "replace"});
    let answer = client
        .enqueue_batch(&[
            unique_job(10, json!([10]), ignore.clone()),
            unique_job(11, json!([10]), ignore.clone()),
            unique_job(12, json!([12]), replace.clone()),
            unique_job(13, json!([12]), replace.clone()),
        ])
        .await;
    let jobs = assert_batch_created(&answer);
    assert_eq!(jobs.len(), 4);
    let ids: Vec<&str> = jobs.iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![job_id(10), job_id(10), job_id(12), job_id(13)]);
    assert_eq!(jobs[2]["state"], "cancelled");
    assert_eq!(jobs[3]["state"], "available");
    let received = server.snapshot();
    let live: Vec<&str> = received.jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(live, vec![job_id(10), job_id(13)]);
    assert_eq!(received.replaced.len(), 1);
    assert_eq!(received.replaced[0].job.id, job_id(12));

    // Against a stored job, too.
    let answer = client
        .enqueue_batch(&[unique_job(20, json!([10]), ignore)])
        .await;
    let jobs = assert_batch_created(&answer);
    assert_eq!(jobs[0]["id"], job_id(10));
    assert_eq!(get_job(&client, 20).await.status, 404);
}
