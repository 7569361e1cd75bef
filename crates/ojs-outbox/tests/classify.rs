//! Response classification: code first, status second, `retryable` authoritative.

use std::time::Duration;

use ojs_outbox::classify::{Outcome, classify, parse_retry_after};

fn err(code: &str, retryable: Option<bool>) -> String {
    match retryable {
        Some(r) => format!(r#"{{"error":{{"code":"{code}","message":"m","retryable":{r}}}}}"#),
        None => format!(r#"{{"error":{{"code":"{code}","message":"m"}}}}"#),
    }
}

#[test]
fn success_and_dedup() {
    assert_eq!(
        classify(201, None, r#"{"job":{}}"#),
        Outcome::Delivered {
            deduplicated: false
        }
    );
    assert_eq!(
        classify(200, None, r#"{"job":{},"deduplicated":true}"#),
        Outcome::Delivered { deduplicated: true }
    );
    // The reference servers (Redis, Postgres, lite) answer a unique `ignore` with 200 and the
    // existing job, without the flag: the 200 itself says it (201 creates).
    assert_eq!(
        classify(
            200,
            None,
            r#"{"job":{"id":"0194fb3e-1c2d-7a4b-8c9d-0123456789ab"}}"#
        ),
        Outcome::Delivered { deduplicated: true }
    );
    assert_eq!(
        classify(201, None, r#"{"jobs":[{}],"count":1}"#),
        Outcome::Delivered {
            deduplicated: false
        }
    );
    // The flag inside the job; a batch's jobs are not read (and not built: parse_body).
    assert_eq!(
        classify(201, None, r#"{"job":{"id":"x","deduplicated":true}}"#),
        Outcome::Delivered { deduplicated: true }
    );
    assert_eq!(
        classify(
            201,
            None,
            r#"{"jobs":[{"deduplicated":true,"args":[{"deep":[1,2]}]}],"count":1}"#
        ),
        Outcome::Delivered {
            deduplicated: false
        }
    );
}

#[test]
fn duplicates_in_every_spelling() {
    assert_eq!(
        classify(409, None, &err("duplicate", Some(false))),
        Outcome::Duplicate {
            existing_job_id: None
        }
    );
    assert_eq!(
        classify(409, None, r#"{"code":"DUPLICATE_JOB"}"#),
        Outcome::Duplicate {
            existing_job_id: None
        }
    );
    assert_eq!(
        classify(409, None, ""),
        Outcome::Duplicate {
            existing_job_id: None
        }
    );
    // An `error` that is not an object: the code is read at the top level.
    assert_eq!(
        classify(500, None, r#"{"error":"conflict","code":"duplicate"}"#),
        Outcome::Duplicate {
            existing_job_id: None
        }
    );
}

/// The job a unique conflict names is kept: the row records it (issue 25).
#[test]
fn a_duplicate_names_the_job_the_backend_holds() {
    let body = r#"{"error":{"code":"duplicate","message":"A job with the same unique key already exists.","retryable":false,"details":{"existing_job_id":"019abf0e-0000-7000-8000-000000000001","existing_job_state":"available"}}}"#;
    assert_eq!(
        classify(409, None, body),
        Outcome::Duplicate {
            existing_job_id: Some("019abf0e-0000-7000-8000-000000000001".into())
        }
    );
}

#[test]
fn queue_paused_defers_whatever_the_status() {
    for status in [409, 422] {
        assert!(matches!(
            classify(status, None, &err("queue_paused", None)),
            Outcome::Defer { .. }
        ));
    }
}

#[test]
fn backpressure_honours_retry_after_or_waits_a_second() {
    let two = Some(Duration::from_secs(2));
    assert!(
        matches!(classify(429, two, &err("rate_limited", Some(true))), Outcome::Backpressure { retry_after, .. } if retry_after == Duration::from_secs(2))
    );
    assert!(
        matches!(classify(429, None, ""), Outcome::Backpressure { retry_after, .. } if retry_after == Duration::from_secs(1))
    );
    assert!(matches!(
        classify(503, None, r#"{"code":"QUEUE_FULL"}"#),
        Outcome::Backpressure { .. }
    ));
}

#[test]
fn never_acceptable_jobs_are_terminal() {
    for (status, code) in [
        (400, "invalid_request"),
        (400, "validation_error"),
        (422, "schema_validation"),
        (400, "unsupported"),
    ] {
        assert!(
            matches!(
                classify(status, None, &err(code, Some(false))),
                Outcome::Terminal { .. }
            ),
            "{status} {code}"
        );
    }
    assert!(matches!(classify(413, None, ""), Outcome::Terminal { .. }));
    assert!(
        matches!(
            classify(400, None, r#"{"code":"SOMETHING_NEW"}"#),
            Outcome::Terminal { .. }
        ),
        "unknown codes are not retryable"
    );
}

#[test]
fn server_errors_retry_and_gateway_errors_mean_unavailable() {
    assert!(matches!(
        classify(500, None, &err("internal_error", Some(true))),
        Outcome::Retry { .. }
    ));
    assert!(matches!(
        classify(500, None, "<html>oops</html>"),
        Outcome::Retry { .. }
    ));
    for status in [502, 503, 504] {
        assert!(
            matches!(classify(status, None, ""), Outcome::Unavailable { .. }),
            "{status}"
        );
    }
}

#[test]
fn retryable_in_the_body_is_authoritative() {
    assert!(matches!(
        classify(400, None, &err("custom", Some(true))),
        Outcome::Retry { .. }
    ));
    assert!(matches!(
        classify(500, None, &err("custom", Some(false))),
        Outcome::Terminal { .. }
    ));
}

#[test]
fn credentials_and_wrong_urls_are_misconfiguration() {
    for status in [401, 403, 404, 405] {
        let outcome = classify(status, None, "");
        assert!(matches!(outcome, Outcome::Misconfigured { .. }), "{status}");
        assert!(outcome.pauses_relay());
    }
}

#[test]
fn retry_after_as_seconds_or_http_date() {
    let now = time::macros::datetime!(2026-11-22 10:00:00 UTC);
    assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
    assert_eq!(
        parse_retry_after("Sun, 22 Nov 2026 10:00:05 GMT", now),
        Some(Duration::from_secs(5))
    );
    assert_eq!(
        parse_retry_after("Sun, 22 Nov 2026 09:00:00 GMT", now),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after("soon", now), None);
}
