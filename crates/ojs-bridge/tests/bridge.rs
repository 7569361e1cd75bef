//! The bindings' surface: stage through a *host* connection (here a plain sqlx connection of
//! the test's own, as Django/knex/ActiveRecord would hold), wake the relay after COMMIT.

use std::time::{Duration, Instant};

use ojs_bridge::{self as bridge, Bridge};
use ojs_devserver::DevServer;
use ojs_outbox::ErrorCode;
use serde_json::json;
use sqlx::{Connection, SqliteConnection};

#[test]
fn host_connection_stages_and_the_relay_delivers_after_commit() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backend = runtime.block_on(DevServer::start(0)).unwrap();
    let dir = std::env::temp_dir().join(format!("ojs-bridge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("host.db").display());
    let config = json!({"adapter": {"ojs_url": backend.url(), "database_url": url}}).to_string();
    let adapter = Bridge::new(&config).unwrap();

    runtime.block_on(async {
        let mut host = SqliteConnection::connect(&format!("{url}?mode=rwc"))
            .await
            .unwrap();
        for ddl in adapter.create_table_sql("sqlite").unwrap() {
            sqlx::raw_sql(sqlx::AssertSqlSafe(ddl))
                .execute(&mut host)
                .await
                .unwrap();
        }
    });
    adapter.start_relay().unwrap();

    let jobs = json!([{"type": "email.welcome", "args": [1]}, {"type": "email.welcome", "args": [2], "options": {"queue": "email"}}]);
    let context = json!({"request_id": "req-9"}).to_string();
    let staged = adapter
        .stage("sqlite", "question", &jobs.to_string(), Some(&context))
        .unwrap();
    assert_eq!(staged.job_ids.len(), 2);
    assert_eq!(staged.statements.len(), 1, "one INSERT for the bulk");
    runtime.block_on(async {
        let mut host = SqliteConnection::connect(&url).await.unwrap();
        let mut tx = host.begin().await.unwrap();
        for statement in &staged.statements {
            let mut query = sqlx::query(sqlx::AssertSqlSafe(statement.sql.clone()));
            for param in &statement.params {
                query = query.bind(param.clone());
            }
            query.execute(&mut *tx).await.unwrap();
        }
        tx.commit().await.unwrap();
    });
    adapter.notify_committed(staged.job_ids.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    while backend.snapshot().jobs.len() < 2 {
        assert!(Instant::now() < deadline, "not delivered");
        std::thread::sleep(Duration::from_millis(5));
    }
    let received = backend.snapshot();
    assert_eq!(received.jobs[0].id, staged.job_ids[0]);
    assert_eq!(
        received.jobs[1].meta.as_ref().unwrap()["ojs.context.request_id"],
        "req-9"
    );
    let rows: serde_json::Value =
        serde_json::from_str(&adapter.rows_json(staged.job_ids.clone()).unwrap()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut rows = rows;
    while rows[&staged.job_ids[1]]["status"] != "sent" {
        assert!(Instant::now() < deadline, "not settled: {rows}");
        std::thread::sleep(Duration::from_millis(5));
        rows = serde_json::from_str(&adapter.rows_json(staged.job_ids.clone()).unwrap()).unwrap();
    }
    // The counters move just after the settle commits, so they may trail the rows briefly.
    let metrics =
        || -> serde_json::Value { serde_json::from_str(&adapter.metrics_json()).unwrap() };
    let deadline = Instant::now() + Duration::from_secs(30);
    while metrics()["sent"] != 2 {
        assert!(Instant::now() < deadline, "metrics: {}", metrics());
        std::thread::sleep(Duration::from_millis(5));
    }
    adapter.stop_relay();
    adapter.close();
    assert_eq!(
        adapter.metrics_json(),
        "null",
        "closed: no relay in this process"
    );
    let status: serde_json::Value = serde_json::from_str(&adapter.status_json().unwrap()).unwrap();
    assert_eq!(status["sent"], 2, "a call after close starts afresh");
    adapter.close();
    runtime.block_on(backend.shutdown());
}

/// The configuration of an adapter that only stages (nothing is ever sent): a backend URL is
/// required all the same, so it names one no test listens on.
fn staging_only(mut adapter: serde_json::Value) -> String {
    adapter["ojs_url"] = json!("http://127.0.0.1:9");
    json!({ "adapter": adapter }).to_string()
}

#[test]
fn statements_follow_the_host_placeholder_style() {
    let adapter = Bridge::new(&staging_only(
        json!({"outbox": {"table_name": "jobs_outbox"}}),
    ))
    .unwrap();
    let jobs = r#"[{"type": "a", "args": []}]"#;
    let percent = adapter.stage("postgresql", "percent", jobs, None).unwrap();
    assert!(
        percent.statements[0]
            .sql
            .starts_with("INSERT INTO jobs_outbox "),
        "{}",
        percent.statements[0].sql
    );
    assert!(
        percent.statements[0].sql.contains("CAST(%s AS uuid)"),
        "{}",
        percent.statements[0].sql
    );
    assert_eq!(percent.statements[0].params.len(), 6);
    let dollar = adapter.stage("postgres", "dollar", jobs, None).unwrap();
    assert!(dollar.statements[0].sql.contains("$6"));
    let question = adapter.stage("sqlite", "question", jobs, None).unwrap();
    assert_eq!(question.statements[0].sql.matches('?').count(), 6);
}

#[test]
fn bad_input_names_the_job_and_the_field() {
    let adapter = Bridge::new(&staging_only(json!({}))).unwrap();
    let bulk = r#"[{"type": "ok", "args": []}, {"type": "Bad-Type", "args": []}]"#;
    let error = adapter.stage("sqlite", "question", bulk, None).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidJobType);
    assert!(
        error.message.starts_with("jobs[1]: type"),
        "{}",
        error.message
    );
    let cases = [
        (r#"[{"type": 5, "args": []}]"#, ErrorCode::InvalidJobType),
        (r#"[{"type": "a"}]"#, ErrorCode::InvalidArgs),
        (
            r#"[{"type": "a", "args": [], "extra": 1}]"#,
            ErrorCode::InvalidArgs,
        ),
        (r#"{"type": "a"}"#, ErrorCode::InvalidArgs),
        (r#"[["ok.job", [2]]]"#, ErrorCode::InvalidArgs),
        (
            r#"[{"type": "a", "args": [], "options": {"queue": "BAD"}}]"#,
            ErrorCode::InvalidQueue,
        ),
    ];
    for (jobs, code) in cases {
        assert_eq!(
            adapter
                .stage("sqlite", "question", jobs, None)
                .unwrap_err()
                .code,
            code,
            "{jobs}"
        );
    }
    assert_eq!(
        adapter
            .stage("oracle", "question", "[]", None)
            .unwrap_err()
            .code,
        ErrorCode::InvalidConfig
    );
    assert_eq!(
        adapter
            .stage("sqlite", "colon", "[]", None)
            .unwrap_err()
            .code,
        ErrorCode::InvalidConfig
    );
    assert_eq!(
        adapter
            .stage(
                "sqlite",
                "question",
                r#"[{"type":"a","args":[]}]"#,
                Some(r#"{"user": 1}"#)
            )
            .unwrap_err()
            .code,
        ErrorCode::InvalidMeta
    );
    assert_eq!(
        Bridge::new(&staging_only(json!({"outbox": {"batch_size": 0}})))
            .err()
            .unwrap()
            .code,
        ErrorCode::InvalidConfig
    );
}

/// `stage_job` (texts) is the one-job `stage` (JSON array): same row, same errors.
#[test]
fn stage_job_builds_the_row_stage_builds() {
    let adapter = Bridge::new(&staging_only(
        json!({"outbox": {"table_name": "jobs_outbox"}}),
    ))
    .unwrap();
    let context = r#"{"request_id": "r-1", "tenant_id": "acme"}"#;
    for (dialect, placeholder) in [("postgresql", "percent"), ("sqlite", "question")] {
        let staged = adapter
            .stage(
                dialect,
                placeholder,
                r#"[{"type": "a.b", "args": [1,{"x":"y"}], "options": {"queue": "q1"}, "meta": {"k": 2}}]"#,
                Some(context),
            )
            .unwrap();
        let job = adapter
            .stage_job(
                dialect,
                placeholder,
                "a.b",
                r#"[1,{"x":"y"}]"#,
                Some(r#"{"queue":"q1"}"#),
                Some(r#"{"k":2}"#),
                Some(context),
            )
            .unwrap();
        let statement = &staged.statements[0];
        assert_eq!(*job.sql, statement.sql);
        assert_eq!(job.params[0].as_deref(), Some(job.job_id.as_str()));
        assert_ne!(job.job_id, staged.job_ids[0], "every call gets a new id");
        assert_eq!(job.params[1..], statement.params[1..], "{dialect}");
        assert_eq!(job.params[5].as_deref(), Some("acme"));
    }
    let bare = adapter
        .stage_job("sqlite", "question", "a", "[]", None, Some("null"), None)
        .unwrap();
    assert_eq!(bare.params[3].as_deref(), Some("{}"));
    assert_eq!(bare.params[4].as_deref(), Some("{}"));
    assert_eq!(bare.params[5], None);

    let stage_job = |job_type: &str, args: &str, options: Option<&str>, meta: Option<&str>| {
        adapter
            .stage_job("sqlite", "question", job_type, args, options, meta, None)
            .unwrap_err()
            .code
    };
    assert_eq!(
        stage_job("Bad", "[]", None, None),
        ErrorCode::InvalidJobType
    );
    assert_eq!(stage_job("a", "null", None, None), ErrorCode::InvalidArgs);
    assert_eq!(stage_job("a", "{}", None, None), ErrorCode::InvalidArgs);
    assert_eq!(stage_job("a", "[1,", None, None), ErrorCode::InvalidArgs);
    assert_eq!(stage_job("a", "[] []", None, None), ErrorCode::InvalidArgs);
    assert_eq!(
        stage_job("a", "[]", Some(r#"{"queue": "BAD"}"#), None),
        ErrorCode::InvalidQueue
    );
    assert_eq!(
        stage_job("a", "[]", Some("[]"), None),
        ErrorCode::InvalidOptions
    );
    assert_eq!(
        stage_job("a", "[]", None, Some("5")),
        ErrorCode::InvalidMeta
    );
    assert_eq!(
        stage_job("a", "[]", None, Some(r#"{"tenant_id": 3}"#)),
        ErrorCode::InvalidMeta
    );
    let big = format!("[\"{}\"]", "x".repeat(1024 * 1024));
    assert_eq!(stage_job("a", &big, None, None), ErrorCode::PayloadTooLarge);
    let error = adapter
        .stage_job("sqlite", "question", "a", "7", None, None, None)
        .unwrap_err();
    assert!(
        error.message.contains("must be a JSON array, got a number"),
        "{}",
        error.message
    );
}

/// A bulk job with a key beside type/args/options/meta names that key (and says where an
/// option belongs), with the job's index in the message.
#[test]
fn an_unknown_key_of_a_bulk_job_is_named() {
    let adapter = Bridge::new(&staging_only(json!({}))).unwrap();
    let bulk = r#"[{"type": "a", "args": []}, {"type": "a", "args": [], "queue": "email"}]"#;
    let error = adapter.stage("sqlite", "question", bulk, None).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidArgs);
    assert_eq!(error.field.as_deref(), Some("queue"));
    assert!(
        error.message.starts_with("jobs[1]: queue: "),
        "{}",
        error.message
    );
    assert!(error.message.contains("\"options\""), "{}", error.message);
    let error = adapter
        .stage(
            "sqlite",
            "question",
            r#"[{"type": "a", "args": [], "extra": 1}]"#,
            None,
        )
        .unwrap_err();
    assert_eq!(error.field.as_deref(), Some("extra"));
}

/// The first bad job of a bulk is the one named, whatever is wrong with the jobs after it (a
/// bulk of plain job objects is read in one pass, any other element by element).
#[test]
fn a_bulk_names_its_first_bad_job() {
    let adapter = Bridge::new(&staging_only(json!({}))).unwrap();
    let cases = [
        (
            r#"[{"type": "a", "args": []}, {"type": "Bad", "args": []}, {"type": "a", "extra": 1}]"#,
            ErrorCode::InvalidJobType,
            "jobs[1]: type",
        ),
        (
            r#"[{"type": "a", "args": []}, {"type": "a", "args": [], "extra": 1}, {"type": "Bad"}]"#,
            ErrorCode::InvalidArgs,
            "jobs[1]: extra",
        ),
        (
            r#"[{"type": "a", "args": {}}, ["a", []]]"#,
            ErrorCode::InvalidArgs,
            "jobs[0]: args",
        ),
        (
            r#"[{"type": "a", "args": []}, ["a", []]]"#,
            ErrorCode::InvalidArgs,
            "jobs[1]: job",
        ),
        (
            r#"[{"type": "a", "args": []}, {"type": "a", "type": "b", "args": []}]"#,
            ErrorCode::InvalidArgs,
            "jobs[1]: job: expected {\"type\", \"args\", \"options\", \"meta\"}: duplicate field `type`",
        ),
        (
            r#"[{"type": "a", "args": []}, null]"#,
            ErrorCode::InvalidArgs,
            "jobs[1]: job: must be an object",
        ),
    ];
    for (jobs, code, start) in cases {
        let error = adapter.stage("sqlite", "question", jobs, None).unwrap_err();
        assert_eq!(error.code, code, "{jobs}");
        assert!(
            error.message.starts_with(start),
            "{jobs}: {}",
            error.message
        );
    }
}

/// An adapter for JavaScript takes camelCase options with millisecond durations and stages
/// exactly the row the spec's spelling stages; errors name the caller's spelling. Other
/// adapters refuse the camelCase keys.
#[test]
fn js_options_stage_the_same_row_as_the_spec_spelling() {
    let config = staging_only(json!({}));
    let js = Bridge::new(&config).unwrap().accept_js_options();
    let spec = r#"{"queue":"email","delay_until":"2030-01-01T00:00:00Z","timeout_ms":5000,"retry":{"max_attempts":3,"initial_interval":"PT1.5S","max_interval":"PT1M"},"unique":{"keys":["args"],"args_keys":["id"],"period":"PT1H","on_conflict":"ignore"}}"#;
    let camel = r#"{"queue":"email","delayUntil":"2030-01-01T00:00:00Z","timeoutMs":5000,"retry":{"maxAttempts":3,"initialInterval":1500,"maxInterval":60000},"unique":{"keys":["args"],"argsKeys":["id"],"period":3600000,"onConflict":"ignore"}}"#;
    let stage = |adapter: &Bridge, options: &str| {
        adapter.stage_job("sqlite", "question", "a", "[1]", Some(options), None, None)
    };
    let from_spec = stage(&js, spec).unwrap();
    let from_camel = stage(&js, camel).unwrap();
    let options = |p: &Option<String>| {
        serde_json::from_str::<serde_json::Value>(p.as_deref().unwrap()).unwrap()
    };
    // A unique job is staged by a statement of its own (`keyed`): the same parameters.
    let keyed_options = |staged: &ojs_bridge::StagedJob| {
        let statement = &staged.keyed.as_ref().expect("a unique job").statements[0];
        options(&statement.params[3])
    };
    assert_eq!(keyed_options(&from_camel), keyed_options(&from_spec));
    // The bulk and the single call agree.
    let bulk = js
        .stage(
            "sqlite",
            "question",
            &format!(r#"[{{"type":"a","args":[1],"options":{camel}}}]"#),
            None,
        )
        .unwrap();
    assert_eq!(
        options(&bulk.statements[0].params[3]),
        keyed_options(&from_spec)
    );

    let error = stage(&js, r#"{"timeoutMs": -1}"#).unwrap_err();
    assert_eq!(error.field.as_deref(), Some("options.timeoutMs"));
    assert!(
        error.message.starts_with("options.timeoutMs: "),
        "{}",
        error.message
    );
    let error = stage(&js, r#"{"retry": {"initialInterval": 0}}"#).unwrap_err();
    assert_eq!(
        error.field.as_deref(),
        Some("options.retry.initialInterval")
    );
    let error = stage(
        &js,
        r#"{"delayUntil": "2030-01-01T00:00:00Z", "delay_until": "2030-01-01T00:00:00Z"}"#,
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidOptions);
    assert_eq!(error.field.as_deref(), Some("options.delayUntil"));

    let plain = Bridge::new(&config).unwrap();
    let error = stage(&plain, camel).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidOptions);
    let error = stage(&plain, r#"{"retry": {"initial_interval": 1500}}"#).unwrap_err();
    assert_eq!(
        error.field.as_deref(),
        Some("options.retry.initial_interval")
    );
}

/// The operator commands through the bridge: what a framework's command line prints and its
/// exit code, by `ojs-relay`'s rules (the purge's --yes, the counts, the missing table's fix).
#[test]
fn admin_commands_report_what_to_print_and_the_exit_code() {
    let dir = std::env::temp_dir().join(format!("ojs-bridge-admin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let database_url = format!("sqlite://{}", dir.join("app.db").display());
    let adapter = Bridge::new(&staging_only(json!({
        "database_url": database_url,
        "outbox": {"table_name": "admin_outbox"},
    })))
    .unwrap();
    let run = |command: serde_json::Value| {
        let mut command = command;
        command["create_table_with"] = json!("manage.py migrate");
        adapter.admin(&command.to_string())
    };
    let error = run(json!({"command": "status"})).unwrap_err();
    assert_eq!(error.code, ErrorCode::OutboxTableMissing);
    assert!(
        error.message.contains("manage.py migrate"),
        "{}",
        error.message
    );

    let created = run(json!({"command": "migrate"})).unwrap();
    assert_eq!(created.exit_code, 0);
    assert!(
        created
            .stdout
            .starts_with("created outbox table \"admin_outbox\""),
        "{}",
        created.stdout
    );
    let again = run(json!({"command": "migrate"})).unwrap();
    assert!(again.stdout.contains("already exists"), "{}", again.stdout);

    let status = run(json!({"command": "status", "json": true})).unwrap();
    let status: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(status["pending"], 0);
    assert_eq!(status["table"], "admin_outbox");

    let refused = run(json!({"command": "dead", "action": "purge", "tenant": "acme"})).unwrap();
    assert_eq!(refused.exit_code, ojs_outbox::admin::EXIT_USAGE);
    assert_eq!(refused.stdout, "");
    assert!(
        refused
            .stderr
            .contains("would delete 0 dead row(s) of tenant \"acme\""),
        "{}",
        refused.stderr
    );
    let purged = run(json!({"command": "dead", "action": "purge", "yes": true})).unwrap();
    assert_eq!(purged.exit_code, 0);
    assert!(
        purged
            .stdout
            .starts_with("purged 0 dead row(s) of every tenant"),
        "{}",
        purged.stdout
    );
    let listed = run(json!({"command": "dead", "action": "list"})).unwrap();
    assert!(
        listed.stdout.starts_with("0 dead row(s)"),
        "{}",
        listed.stdout
    );

    for bad in [
        json!({"command": "vacuum"}),
        json!({"command": "dead", "action": "burn"}),
    ] {
        assert_eq!(run(bad).unwrap_err().code, ErrorCode::InvalidConfig);
    }
    adapter.close();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ensure_relay` starts the relay once per process: later calls are no-ops until the relay is
/// stopped, after which it starts again.
#[test]
fn ensure_relay_starts_once_and_again_after_a_stop() {
    let dir = std::env::temp_dir().join(format!("ojs-bridge-ensure-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let adapter = Bridge::new(&staging_only(json!({
        "database_url": format!("sqlite://{}", dir.join("app.db").display()),
    })))
    .unwrap();
    adapter.migrate().unwrap();
    assert_eq!(
        adapter.metrics_json(),
        "null",
        "no relay before the first ensure"
    );
    adapter.ensure_relay().unwrap();
    assert_ne!(adapter.metrics_json(), "null", "the relay runs");
    adapter.ensure_relay().unwrap();
    adapter.stop_relay();
    assert_eq!(adapter.metrics_json(), "null", "stopped");
    adapter.ensure_relay().unwrap();
    assert_ne!(
        adapter.metrics_json(),
        "null",
        "started again after the stop"
    );
    adapter.close();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The one encoding of a staged job, id lists and unencodable values (docs/architecture.md).
#[test]
fn the_ffi_encodings() {
    let adapter = Bridge::new(&staging_only(json!({}))).unwrap();
    let job = adapter
        .stage_job("sqlite", "question", "a.b", "[1]", None, None, None)
        .unwrap();
    let plain = job.encode(false);
    let fields: Vec<&str> = plain.split('\0').collect();
    assert_eq!(fields, [job.job_id.as_str(), "a.b", "[1]", "{}", "{}"]);
    let with_sql = job.encode(true);
    let fields: Vec<&str> = with_sql.split('\0').collect();
    assert_eq!(fields[0], &*job.sql);
    assert_eq!(fields.len(), 6, "no tenant: five parameters after the SQL");
    let tenant = adapter
        .stage_job(
            "sqlite",
            "question",
            "a",
            "[]",
            None,
            Some(r#"{"tenant_id": ""}"#),
            None,
        )
        .unwrap()
        .encode(false);
    assert_eq!(tenant.split('\0').count(), 6, "an empty tenant is a field");
    assert!(tenant.ends_with('\0'));

    let ids = vec!["a".to_owned(), "b".to_owned()];
    assert_eq!(bridge::encode_ids(&ids), "a\nb");
    assert_eq!(bridge::decode_ids("a\nb"), ids);
    assert!(bridge::decode_ids("").is_empty());

    for (part, code) in [
        ("args", ErrorCode::InvalidArgs),
        ("options", ErrorCode::InvalidOptions),
        ("meta", ErrorCode::InvalidMeta),
        ("context", ErrorCode::InvalidMeta),
    ] {
        let error = bridge::unencodable(part, &format!("{part}.x"), "NaN has no JSON form");
        assert_eq!(error.code, code);
        assert_eq!(error.field.as_deref(), Some(part));
        assert_eq!(error.message, format!("{part}.x: NaN has no JSON form"));
    }
}
