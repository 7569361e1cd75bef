//! Bad input gets a typed error naming the field; good input becomes a row.

use ojs_outbox::job::{MAX_WIRE_BYTES, NewJob, RequestContext, prepare};
use ojs_outbox::{Config, ErrorCode};
use serde_json::{Value, json};

fn error_of(job: NewJob) -> (ErrorCode, String) {
    let error = prepare(job, None).expect_err("must be refused");
    (error.code, error.message)
}

#[test]
fn refuses_bad_jobs_with_the_right_code_and_field() {
    let long_type = "a".repeat(256);
    let long_queue = "q".repeat(129);
    let cases: Vec<(NewJob, ErrorCode, &str)> = vec![
        (
            NewJob::new("", json!([])),
            ErrorCode::InvalidJobType,
            "type",
        ),
        (
            NewJob::new("Email.welcome", json!([])),
            ErrorCode::InvalidJobType,
            "type",
        ),
        (
            NewJob::new("-email", json!([])),
            ErrorCode::InvalidJobType,
            "type",
        ),
        (
            NewJob::new("email..welcome", json!([])),
            ErrorCode::InvalidJobType,
            "type",
        ),
        (
            NewJob::new(".email", json!([])),
            ErrorCode::InvalidJobType,
            "type",
        ),
        (
            NewJob::new("1email", json!([])),
            ErrorCode::InvalidJobType,
            "type",
        ),
        (
            NewJob::new("email welcome", json!([])),
            ErrorCode::InvalidJobType,
            "type",
        ),
        (
            NewJob::new(long_type, json!([])),
            ErrorCode::InvalidJobType,
            "type",
        ),
        (
            NewJob::new("email.welcome", json!({"user": 1})),
            ErrorCode::InvalidArgs,
            "args",
        ),
        (
            NewJob::new("email.welcome", json!("hello")),
            ErrorCode::InvalidArgs,
            "args",
        ),
        (
            NewJob::new("email.welcome", Value::Null),
            ErrorCode::InvalidArgs,
            "args",
        ),
        (
            NewJob::new("email.welcome", json!(42)),
            ErrorCode::InvalidArgs,
            "args",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"queue": "Email"})),
            ErrorCode::InvalidQueue,
            "options.queue",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"queue": "-email"})),
            ErrorCode::InvalidQueue,
            "options.queue",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"queue": "em ail"})),
            ErrorCode::InvalidQueue,
            "options.queue",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"queue": long_queue})),
            ErrorCode::InvalidQueue,
            "options.queue",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"queue": 7})),
            ErrorCode::InvalidQueue,
            "options.queue",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"priority": 101})),
            ErrorCode::InvalidOptions,
            "options.priority",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"priority": 1.5})),
            ErrorCode::InvalidOptions,
            "options.priority",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"timeout_ms": -1})),
            ErrorCode::InvalidOptions,
            "options.timeout_ms",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"delay_until": "tomorrow"})),
            ErrorCode::InvalidOptions,
            "options.delay_until",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"expires_at": 1700000000})),
            ErrorCode::InvalidOptions,
            "options.expires_at",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"retry": {"initial_interval": 1000}})),
            ErrorCode::InvalidOptions,
            "options.retry.initial_interval",
        ),
        (
            NewJob::new("a", json!([]))
                .with_options(json!({"retry": {"max_interval": "5 minutes"}})),
            ErrorCode::InvalidOptions,
            "options.retry.max_interval",
        ),
        (
            NewJob::new("a", json!([]))
                .with_options(json!({"retry": {"backoff_coefficient": 0.5}})),
            ErrorCode::InvalidOptions,
            "options.retry.backoff_coefficient",
        ),
        (
            NewJob::new("a", json!([]))
                .with_options(json!({"retry": {"initial_interval_ms": 1000}})),
            ErrorCode::InvalidOptions,
            "options.retry.initial_interval_ms",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"unique": {"on_conflict": "explode"}})),
            ErrorCode::InvalidOptions,
            "options.unique.on_conflict",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"tags": "onboarding"})),
            ErrorCode::InvalidOptions,
            "options.tags",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!({"queeu": "email"})),
            ErrorCode::InvalidOptions,
            "options.queeu",
        ),
        (
            NewJob::new("a", json!([])).with_options(json!(["queue"])),
            ErrorCode::InvalidOptions,
            "options",
        ),
        (
            NewJob::new("a", json!([])).with_meta(json!("trace")),
            ErrorCode::InvalidMeta,
            "meta",
        ),
        (
            NewJob::new("a", json!([])).with_meta(json!({"tenant_id": 5})),
            ErrorCode::InvalidMeta,
            "meta.tenant_id",
        ),
        (
            NewJob::new("a", json!([])).with_meta(json!({"tenant_id": "ac\0me"})),
            ErrorCode::InvalidMeta,
            "meta.tenant_id",
        ),
        (
            NewJob::new("a", json!(["x".repeat(MAX_WIRE_BYTES)])),
            ErrorCode::PayloadTooLarge,
            "args",
        ),
    ];
    assert!(cases.len() >= 20);
    for (job, code, field) in cases {
        let described = format!("{job:?}").chars().take(120).collect::<String>();
        let (actual, message) = error_of(job);
        assert_eq!(actual, code, "{described}: {message}");
        assert!(
            message.starts_with(field),
            "{described}: message {message:?} must name {field:?}"
        );
    }
}

/// Each rule changed to match the OJS schemas and the reference servers (docs/ojs-compat.md):
/// one input the rule accepts, one it refuses, with the code and field of the refusal.
#[test]
fn each_rule_accepts_what_ojs_servers_accept_and_refuses_what_they_refuse() {
    struct Rule {
        name: &'static str,
        accepted: NewJob,
        refused: NewJob,
        code: ErrorCode,
        field: &'static str,
    }
    let with = |options: Value| NewJob::new("a", json!([])).with_options(options);
    let rules = vec![
        Rule {
            name: "hyphens in type segments",
            accepted: NewJob::new("batch-import_v2.run-now", json!([])),
            refused: NewJob::new("batch.-import", json!([])),
            code: ErrorCode::InvalidJobType,
            field: "type",
        },
        Rule {
            name: "timeout_ms 0 is no timeout",
            accepted: with(json!({"timeout_ms": 0})),
            refused: with(json!({"timeout_ms": -5})),
            code: ErrorCode::InvalidOptions,
            field: "options.timeout_ms",
        },
        Rule {
            name: "visibility_timeout_ms, at least 1000",
            accepted: with(json!({"visibility_timeout_ms": 1000})),
            refused: with(json!({"visibility_timeout_ms": 999})),
            code: ErrorCode::InvalidOptions,
            field: "options.visibility_timeout_ms",
        },
        Rule {
            name: "scheduled_at, an RFC 3339 timestamp",
            accepted: with(json!({"scheduled_at": "2026-03-01T09:00:00Z"})),
            refused: with(json!({"scheduled_at": "+PT5S"})),
            code: ErrorCode::InvalidOptions,
            field: "options.scheduled_at",
        },
        Rule {
            name: "timestamps: T between date and time",
            accepted: with(json!({"delay_until": "2026-03-01t09:00:00.5z"})),
            refused: with(json!({"delay_until": "2026-03-01 09:00:00Z"})),
            code: ErrorCode::InvalidOptions,
            field: "options.delay_until",
        },
        Rule {
            name: "timestamps: no leap second",
            accepted: with(json!({"expires_at": "2026-06-30T23:59:59+00:00"})),
            refused: with(json!({"expires_at": "2026-06-30T23:59:60Z"})),
            code: ErrorCode::InvalidOptions,
            field: "options.expires_at",
        },
        Rule {
            name: "pending, a boolean",
            accepted: with(json!({"pending": true})),
            refused: with(json!({"pending": "yes"})),
            code: ErrorCode::InvalidOptions,
            field: "options.pending",
        },
        Rule {
            name: "tags: no empty entry",
            accepted: with(json!({"tags": ["onboarding", "email"]})),
            refused: with(json!({"tags": ["onboarding", ""]})),
            code: ErrorCode::InvalidOptions,
            field: "options.tags",
        },
        Rule {
            name: "tags: no repeated entry",
            accepted: with(json!({"tags": []})),
            refused: with(json!({"tags": ["email", "email"]})),
            code: ErrorCode::InvalidOptions,
            field: "options.tags",
        },
        Rule {
            name: "non_retryable_errors: no empty entry",
            accepted: with(json!({"retry": {"non_retryable_errors": ["ValidationError"]}})),
            refused: with(json!({"retry": {"non_retryable_errors": [""]}})),
            code: ErrorCode::InvalidOptions,
            field: "options.retry.non_retryable_errors",
        },
        Rule {
            name: "non_retryable_errors: no repeated entry",
            accepted: with(json!({"retry": {"non_retryable_errors": ["A", "B"]}})),
            refused: with(json!({"retry": {"non_retryable_errors": ["A", "A"]}})),
            code: ErrorCode::InvalidOptions,
            field: "options.retry.non_retryable_errors",
        },
        Rule {
            name: "retry intervals: hours, minutes, seconds as the servers read them",
            accepted: with(json!({"retry": {"initial_interval": "PT1H30M0.5S"}})),
            refused: with(json!({"retry": {"initial_interval": "P1D"}})),
            code: ErrorCode::InvalidOptions,
            field: "options.retry.initial_interval",
        },
        Rule {
            name: "retry intervals: not zero",
            accepted: with(json!({"retry": {"max_interval": "PT0.001S"}})),
            refused: with(json!({"retry": {"max_interval": "PT0S"}})),
            code: ErrorCode::InvalidOptions,
            field: "options.retry.max_interval",
        },
        Rule {
            name: "retry intervals: a fraction only on seconds",
            accepted: with(json!({"retry": {"initial_interval": "PT90S"}})),
            refused: with(json!({"retry": {"initial_interval": "PT1.5M"}})),
            code: ErrorCode::InvalidOptions,
            field: "options.retry.initial_interval",
        },
        Rule {
            name: "retry intervals: components in order",
            accepted: with(json!({"retry": {"max_interval": "PT1M5S"}})),
            refused: with(json!({"retry": {"max_interval": "PT5S1M"}})),
            code: ErrorCode::InvalidOptions,
            field: "options.retry.max_interval",
        },
        Rule {
            name: "retry.max_attempts 0 means no retry",
            accepted: with(json!({"retry": {"max_attempts": 0}})),
            refused: with(json!({"retry": {"max_attempts": -1}})),
            code: ErrorCode::InvalidOptions,
            field: "options.retry.max_attempts",
        },
        Rule {
            name: "unique.period: years and months",
            accepted: with(json!({"unique": {"period": "P1Y2M"}})),
            refused: with(json!({"unique": {"period": "P1M1Y"}})),
            code: ErrorCode::InvalidOptions,
            field: "options.unique.period",
        },
        Rule {
            name: "unique.period: a fraction only on seconds",
            accepted: with(json!({"unique": {"period": "P1WT0.5S"}})),
            refused: with(json!({"unique": {"period": "PT1.5M"}})),
            code: ErrorCode::InvalidOptions,
            field: "options.unique.period",
        },
        Rule {
            name: "unique.period: at least one component",
            accepted: with(json!({"unique": {"period": "P1D"}})),
            refused: with(json!({"unique": {"period": "PT"}})),
            code: ErrorCode::InvalidOptions,
            field: "options.unique.period",
        },
        Rule {
            name: "unique.keys: type, queue, args, meta",
            accepted: with(json!({"unique": {"keys": ["type", "queue", "args"]}})),
            refused: with(json!({"unique": {"keys": ["type", "tenant"]}})),
            code: ErrorCode::InvalidOptions,
            field: "options.unique.keys",
        },
        Rule {
            name: "unique.keys: no repeated entry",
            accepted: with(json!({"unique": {"keys": []}})),
            refused: with(json!({"unique": {"keys": ["type", "type"]}})),
            code: ErrorCode::InvalidOptions,
            field: "options.unique.keys",
        },
        Rule {
            name: "unique.states: the job states",
            accepted: with(json!({"unique": {"states": ["available", "completed", "pending"]}})),
            refused: with(json!({"unique": {"states": ["available", "done"]}})),
            code: ErrorCode::InvalidOptions,
            field: "options.unique.states",
        },
        Rule {
            name: "unique.args_keys",
            accepted: with(json!({"unique": {"keys": ["type", "args"], "args_keys": ["user_id"]}})),
            refused: with(json!({"unique": {"args_keys": ["user_id", "user_id"]}})),
            code: ErrorCode::InvalidOptions,
            field: "options.unique.args_keys",
        },
        Rule {
            name: "unique.meta_keys, not empty",
            accepted: with(
                json!({"unique": {"keys": ["type", "meta"], "meta_keys": ["tenant_id"]}}),
            ),
            refused: with(json!({"unique": {"meta_keys": []}})),
            code: ErrorCode::InvalidOptions,
            field: "options.unique.meta_keys",
        },
        Rule {
            name: "unique.meta_keys, required with keys meta",
            accepted: with(json!({"unique": {"keys": ["meta"], "meta_keys": ["locale"]}})),
            refused: with(json!({"unique": {"keys": ["type", "meta"]}})),
            code: ErrorCode::InvalidOptions,
            field: "options.unique.meta_keys",
        },
        Rule {
            name: "server-only option aliases stay refused",
            accepted: with(json!({"retry": {"max_attempts": 2}})),
            refused: with(json!({"retry_policy": {"max_attempts": 2}})),
            code: ErrorCode::InvalidOptions,
            field: "options.retry_policy",
        },
    ];
    for rule in rules {
        if let Err(e) = prepare(rule.accepted.clone(), None) {
            panic!(
                "{}: {:?} must be accepted, got {e}",
                rule.name, rule.accepted
            );
        }
        let error = prepare(rule.refused.clone(), None).expect_err(&format!(
            "{}: {:?} must be refused",
            rule.name, rule.refused
        ));
        assert_eq!(error.code, rule.code, "{}: {}", rule.name, error.message);
        assert_eq!(
            error.field.as_deref(),
            Some(rule.field),
            "{}: {}",
            rule.name,
            error.message
        );
    }
}

/// The JSON-text entry point the bindings use applies the same rules.
#[test]
fn prepare_json_applies_the_same_rules() {
    use ojs_outbox::job::prepare_json;
    let ok = prepare_json(
        "batch-import_v2",
        "[1]",
        Some(r#"{"timeout_ms": 0, "pending": false, "unique": {"period": "P1M"}}"#),
        None,
        None,
    )
    .expect("accepted");
    assert_eq!(ok.job_type, "batch-import_v2");
    assert!(ok.wire_json().contains(r#""type":"batch-import_v2""#));
    let refused = prepare_json("a", "[]", Some(r#"{"tags": ["x", "x"]}"#), None, None)
        .expect_err("repeated tag");
    assert_eq!(refused.field.as_deref(), Some("options.tags"));
}

#[test]
fn refuses_json_that_does_not_parse() {
    let bad_args = NewJob::from_json("a", "[1,", None, None).unwrap_err();
    assert_eq!(bad_args.code, ErrorCode::InvalidArgs);
    let bad_options = NewJob::from_json("a", "[]", Some("{queue"), None).unwrap_err();
    assert_eq!(bad_options.code, ErrorCode::InvalidOptions);
    let bad_meta = NewJob::from_json("a", "[]", None, Some("nope")).unwrap_err();
    assert_eq!(bad_meta.code, ErrorCode::InvalidMeta);
    let bad_context = RequestContext::from_json(r#"{"request_id": 5}"#, false).unwrap_err();
    assert_eq!(bad_context.code, ErrorCode::InvalidMeta);
}

#[test]
fn accepts_the_full_option_set_and_assigns_a_uuidv7() {
    let job = NewJob::new("email.welcome", json!([42, {"locale": "fr"}]))
        .with_options(json!({
            "queue": "email-high.eu", "priority": -100, "timeout_ms": 30000,
            "delay_until": "2026-03-01T09:00:00Z", "expires_at": "2026-03-02T09:00:00+01:00",
            "retry": {"max_attempts": 5, "initial_interval": "PT1S", "backoff_coefficient": 2.0,
                      "max_interval": "PT5M", "jitter": true, "on_exhaustion": "discard"},
            "unique": {"keys": ["type", "args"], "period": "PT1H", "on_conflict": "reject"},
            "tags": ["onboarding"], "visibility_timeout_ms": 60000, "pending": false,
            "scheduled_at": "2026-03-01T09:00:00Z"
        }))
        .with_meta(json!({"source": "signup"}));
    let prepared = prepare(job, None).expect("valid");
    let id = uuid::Uuid::parse_str(&prepared.job_id).expect("uuid");
    assert_eq!(id.get_version_num(), 7);
    assert_eq!(prepared.job_id, prepared.job_id.to_lowercase());
    let wire: Value = serde_json::from_str(&prepared.wire_json()).expect("wire form is JSON");
    assert_eq!(wire["id"], json!(prepared.job_id));
    assert_eq!(wire["type"], json!("email.welcome"));
    assert_eq!(wire["args"], json!([42, {"locale": "fr"}]));
    assert_eq!(wire["options"]["queue"], json!("email-high.eu"));
    assert_eq!(wire["meta"]["source"], json!("signup"));
}

#[test]
fn ids_grow_in_creation_order() {
    let ids: Vec<String> = (0..100)
        .map(|_| prepare(NewJob::new("a", json!([])), None).unwrap().job_id)
        .collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted, "UUIDv7 ids sort in creation order");
}

#[test]
fn request_context_lands_in_meta_without_overriding_explicit_meta() {
    let context = RequestContext {
        request_id: Some("req-1".into()),
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        tracestate: Some("vendor=1".into()),
        user_id: Some("42".into()),
        tenant_id: Some("acme".into()),
        locale: Some("fr-FR".into()),
    };
    let job = NewJob::new("a", json!([])).with_meta(json!({"ojs.context.user_id": "explicit"}));
    let prepared = prepare(job, Some(&context)).unwrap();
    let meta: Value = serde_json::from_str(&prepared.meta_json).unwrap();
    assert_eq!(meta["ojs.context.request_id"], "req-1");
    assert_eq!(
        meta["traceparent"],
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    );
    assert_eq!(meta["tracestate"], "vendor=1");
    assert_eq!(meta["ojs.context.user_id"], "explicit");
    assert_eq!(meta["tenant_id"], "acme");
    assert_eq!(meta["ojs.context.locale"], "fr-FR");
    assert_eq!(prepared.tenant_id.as_deref(), Some("acme"));
}

#[test]
fn a_malformed_traceparent_is_dropped_not_propagated() {
    let context = RequestContext {
        traceparent: Some("not-a-trace".into()),
        tracestate: Some("x=1".into()),
        ..Default::default()
    };
    let prepared = prepare(NewJob::new("a", json!([])), Some(&context)).unwrap();
    let meta: Value = serde_json::from_str(&prepared.meta_json).unwrap();
    assert!(
        meta.get("traceparent").is_none() && meta.get("tracestate").is_none(),
        "{meta}"
    );
}

#[test]
fn config_errors_name_the_field() {
    let cases = [
        (
            r#"{"adapter": {"outbox": {"batch_size": 0}}}"#,
            "adapter.outbox.batch_size",
        ),
        (
            r#"{"adapter": {"outbox": {"batch_size": 5000}}}"#,
            "adapter.outbox.batch_size",
        ),
        (
            r#"{"adapter": {"outbox": {"poll_interval": "1s"}}}"#,
            "adapter.outbox.poll_interval",
        ),
        (
            r#"{"adapter": {"outbox": {"table_name": "x; DROP TABLE users"}}}"#,
            "adapter.outbox.table_name",
        ),
        (
            r#"{"adapter": {"ojs_url": "localhost:8080"}}"#,
            "adapter.ojs_url",
        ),
        (
            r#"{"adapter": {"backend_type": "redis"}}"#,
            "adapter.backend_type",
        ),
        (
            r#"{"adapter": {"relay": {"mode": "threaded"}}}"#,
            "adapter.relay.mode",
        ),
        (
            r#"{"adapter": {"relay": {"max_attempts": 0}}}"#,
            "adapter.relay.max_attempts",
        ),
        (
            r#"{"adapter": {"relay": {"lease": "PT1S", "request_timeout": "PT5S"}}}"#,
            "adapter.relay.lease",
        ),
        (
            r#"{"adapter": {"outbox": {"enabled": false}}}"#,
            "adapter.outbox.enabled",
        ),
        (
            r#"{"adapter": {"pol_interval": "PT1S"}}"#,
            "adapter.pol_interval",
        ),
        (r#"{"adapter": {}, "extra": 1}"#, "extra"),
        (r#"[1]"#, "config"),
        (r#"{"adapter": "#, "config"),
    ];
    for (text, field) in cases {
        let error = Config::from_json(text).expect_err(text);
        assert_eq!(error.code, ErrorCode::InvalidConfig, "{text}");
        assert_eq!(
            error.field.as_deref(),
            Some(field),
            "{text}: {}",
            error.message
        );
    }
}

#[test]
fn config_accepts_the_spelling_of_the_spec_framework_examples() {
    let config = Config::from_json(
        r#"{"url": "http://ojs:8080", "outbox": {"enabled": true, "table": "jobs_outbox"}}"#,
    )
    .unwrap();
    assert_eq!(config.ojs_url, "http://ojs:8080");
    assert_eq!(config.outbox.table_name, "jobs_outbox");
}

#[test]
fn config_reads_the_spec_shape_and_keeps_defaults_elsewhere() {
    let config = Config::from_json(
        r#"{"adapter": {"ojs_url": "http://ojs.internal:8080/", "backend_type": "external",
            "outbox": {"enabled": true, "table_name": "jobs_outbox", "poll_interval": "PT0.5S", "batch_size": 250}}}"#,
    )
    .unwrap();
    assert_eq!(config.ojs_url, "http://ojs.internal:8080");
    assert_eq!(config.outbox.table_name, "jobs_outbox");
    assert_eq!(
        config.outbox.poll_interval,
        std::time::Duration::from_millis(500)
    );
    assert_eq!(config.outbox.batch_size, 250);
    assert_eq!(config.relay, Config::default().relay);
}
