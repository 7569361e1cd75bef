//! Checks the conformance cases as data, without running them: every case file validates against
//! `schema/case.schema.json`, its file name is its id, ids are unique, every ref an expectation
//! uses was defined by an earlier enqueue step, transactions and the relay are driven in a legal
//! order, and the README lists every case. The schema is also shown to reject deliberately broken
//! cases, so that a schema accepting everything cannot make this test pass.
//!
//! Only std, serde_json and jsonschema are used: this test must not depend on the runner's code.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn load_schema() -> Value {
    let path = suite_dir().join("schema").join("case.schema.json");
    let text =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn validator() -> jsonschema::Validator {
    let schema = load_schema();
    if let Err(error) = jsonschema::meta::validate(&schema) {
        panic!(
            "case.schema.json is not a valid JSON Schema: {error} at {}",
            error.instance_path
        );
    }
    jsonschema::draft202012::new(&schema)
        .unwrap_or_else(|e| panic!("case.schema.json does not compile: {e}"))
}

/// Every `cases/*.json` file, sorted by name, with its parsed content (or the parse error).
fn case_files() -> Vec<(PathBuf, Result<Value, String>)> {
    let dir = suite_dir().join("cases");
    let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let parsed = fs::read_to_string(&path)
                .map_err(|e| format!("cannot read: {e}"))
                .and_then(|text| serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}")));
            (path, parsed)
        })
        .collect()
}

fn schema_errors(validator: &jsonschema::Validator, case: &Value) -> Vec<String> {
    validator
        .iter_errors(case)
        .map(|error| {
            let at = error.instance_path.to_string();
            format!("{}: {error}", if at.is_empty() { "/" } else { at.as_str() })
        })
        .collect()
}

// ------------------------------------------------------------------------------------------------
// Semantic checks the schema cannot express: refs, transaction nesting, relay state, time budget.

/// The longest a case may sleep in total. Cases must stay well under 5 s.
const SLEEP_BUDGET_MS: u64 = 2_000;
/// Worker starts per case (README: Workers).
const MAX_WORKERS: u32 = 4;

/// Returns every problem found in one schema-valid case.
fn lint_case(case: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let steps = case["steps"].as_array().cloned().unwrap_or_default();
    let mut defined: BTreeSet<String> = BTreeSet::new();
    let mut transaction_depth = 0usize;
    let mut relay_running = case.get("relay").and_then(Value::as_str) != Some("stopped");
    let mut committed = false;
    let mut slept_ms = 0u64;
    let mut subscriptions: BTreeSet<String> = BTreeSet::new();
    let (mut worker_running, mut workers_started) = (false, 0u32);

    for (index, step) in steps.iter().enumerate() {
        let op = step["op"].as_str().unwrap_or_default();
        let at = format!("step {index} ({op})");
        let expects_error = step.get("expect_error").is_some();

        // Refs this step defines.
        let mut new_refs: Vec<String> = Vec::new();
        match op {
            "enqueue_after_commit" | "enqueue" if !expects_error => {
                new_refs.extend(step["ref"].as_str().map(str::to_owned));
            }
            // The race's ref is defined when it is joined without an expected error.
            "race_join" if !expects_error => {
                let started = steps[..index]
                    .iter()
                    .rev()
                    .find(|earlier| earlier["op"] == "race_enqueue");
                new_refs.extend(started.and_then(|s| s["ref"].as_str()).map(str::to_owned));
            }
            "enqueue_bulk" if !expects_error => {
                if let Some(jobs) = step.get("jobs").and_then(Value::as_array) {
                    new_refs.extend(
                        jobs.iter()
                            .filter_map(|job| job["ref"].as_str().map(str::to_owned)),
                    );
                }
                if let Some(generate) = step.get("generate") {
                    let prefix = generate["ref_prefix"].as_str().unwrap_or_default();
                    let count = generate["count"].as_u64().unwrap_or_default();
                    new_refs.extend((0..count).map(|i| format!("{prefix}{i}")));
                }
            }
            _ => {}
        }
        for job_ref in new_refs {
            if !defined.insert(job_ref.clone()) {
                problems.push(format!("{at}: ref {job_ref:?} is defined twice"));
            }
        }

        // Refs this step uses.
        for job_ref in used_refs(step) {
            if !defined.contains(&job_ref) {
                problems.push(format!(
                    "{at}: ref {job_ref:?} is used before any enqueue step defines it"
                ));
            }
        }

        // Transactions.
        match op {
            "begin" if transaction_depth > 0 => {
                problems.push(format!("{at}: a transaction is already open"))
            }
            "begin" => transaction_depth = 1,
            "savepoint" if transaction_depth == 0 => {
                problems.push(format!("{at}: no transaction is open"))
            }
            "savepoint" => transaction_depth += 1,
            "release_savepoint" | "rollback_savepoint" if transaction_depth < 2 => {
                problems.push(format!("{at}: no savepoint is open"))
            }
            "release_savepoint" | "rollback_savepoint" => transaction_depth -= 1,
            "commit" | "rollback" if transaction_depth != 1 => problems.push(format!(
                "{at}: needs exactly the outermost transaction open (depth {transaction_depth})"
            )),
            "commit" | "rollback" => {
                transaction_depth = 0;
                committed |= op == "commit";
            }
            _ => {}
        }

        // Relay state.
        match op {
            "relay_start" if relay_running => problems.push(format!("{at}: the relay is already running")),
            "relay_start" => relay_running = true,
            "relay_stop" | "relay_kill" if !relay_running => problems.push(format!("{at}: the relay is not running")),
            "relay_stop" | "relay_kill" => relay_running = false,
            "backend_manifest" if relay_running => problems.push(format!(
                "{at}: change the manifest only while the relay is stopped (a relay reads it when it starts)"
            )),
            _ => {}
        }

        if op == "wait_delivered" && step.get("min_elapsed_ms").is_some() && !committed {
            problems.push(format!(
                "{at}: min_elapsed_ms is measured from a commit step, and none came before"
            ));
        }
        // Workers: one at a time, at most MAX_WORKERS per case, stopped before the case ends.
        match op {
            "worker_start" if worker_running => {
                problems.push(format!("{at}: a worker is already running"))
            }
            "worker_start" => {
                (worker_running, workers_started) = (true, workers_started + 1);
                if workers_started > MAX_WORKERS {
                    problems.push(format!("{at}: more than {MAX_WORKERS} workers in one case"));
                }
            }
            "worker_stop" if !worker_running => {
                problems.push(format!("{at}: no worker is running"))
            }
            "worker_stop" => worker_running = false,
            _ => {}
        }
        if op == "sleep" {
            slept_ms += step["ms"].as_u64().unwrap_or_default();
        }

        // Event subscriptions: opened once, while the relay runs, before any use.
        let used = match op {
            "events_subscribe" => step["last_event_id"]["subscription"].as_str(),
            "wait_events" | "expect_events" => step["subscription"].as_str(),
            _ => None,
        };
        if let Some(name) = used.filter(|name| !subscriptions.contains(*name)) {
            problems.push(format!(
                "{at}: subscription {name:?} is used before it is opened"
            ));
        }
        if op == "events_subscribe" {
            if !relay_running {
                problems.push(format!("{at}: subscribe only while the relay runs"));
            }
            let name = step["subscription"].as_str().unwrap_or_default().to_owned();
            if !subscriptions.insert(name.clone()) {
                problems.push(format!("{at}: subscription {name:?} is opened twice"));
            }
        }
    }

    if transaction_depth != 0 {
        problems.push("the case ends with a transaction still open".to_owned());
    }
    if slept_ms > SLEEP_BUDGET_MS {
        problems.push(format!(
            "the case sleeps {slept_ms} ms in all; keep it under {SLEEP_BUDGET_MS} ms"
        ));
    }
    problems
}

/// The refs an expectation or wait step refers to.
fn used_refs(step: &Value) -> Vec<String> {
    let mut refs = Vec::new();
    let list = |value: Option<&Value>, refs: &mut Vec<String>| {
        if let Some(items) = value.and_then(Value::as_array) {
            refs.extend(
                items
                    .iter()
                    .filter_map(|item| item.as_str().map(str::to_owned)),
            );
        }
    };
    let keys = |value: Option<&Value>, refs: &mut Vec<String>| {
        if let Some(map) = value.and_then(Value::as_object) {
            refs.extend(map.keys().cloned());
        }
    };
    match step["op"].as_str().unwrap_or_default() {
        "wait_delivered" => list(step.get("refs"), &mut refs),
        "wait_outbox" | "wait_jobs" => {
            keys(step.get("rows"), &mut refs);
            keys(step.get("jobs"), &mut refs);
        }
        "expect_outbox" => {
            keys(step.get("rows"), &mut refs);
            list(step.get("absent"), &mut refs);
        }
        "expect_backend" => {
            list(step.get("received"), &mut refs);
            list(step.get("absent"), &mut refs);
            keys(step.get("deliveries_at_least"), &mut refs);
            keys(step.get("deliveries_exactly"), &mut refs);
            keys(step.get("jobs"), &mut refs);
            list(step.get("encrypted"), &mut refs);
        }
        "enqueue_after_commit" => refs.extend(step["same_as"].as_str().map(str::to_owned)),
        "events_subscribe" => refs.extend(step["last_event_id"]["ref"].as_str().map(str::to_owned)),
        "wait_events" => refs.extend(
            step["events"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|event| event["ref"].as_str().map(str::to_owned)),
        ),
        "expect_events" => list(step.get("absent"), &mut refs),
        _ => {}
    }
    refs
}

// ------------------------------------------------------------------------------------------------
// The merged configuration: suite defaults (the schema's `default` annotations) plus the case's.

/// The suite defaults, read from the `default` annotation of every config key in the schema.
fn suite_defaults(schema: &Value) -> Value {
    let mut defaults = json!({});
    for section in ["outbox", "relay"] {
        let keys = schema["$defs"]["config"]["properties"][section]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("the schema describes no config.{section} keys"));
        for (key, definition) in keys {
            let default = definition.get("default").unwrap_or_else(|| {
                panic!("config.{section}.{key} has no default annotation in the schema")
            });
            defaults[section][key] = default.clone();
        }
    }
    defaults
}

/// Seconds in an ISO-8601 duration of the schema's form (weeks, days, hours, minutes, seconds).
fn duration_seconds(text: &str) -> f64 {
    let mut seconds = 0.0;
    let mut number = String::new();
    let mut in_time = false;
    for ch in text.trim_start_matches('P').chars() {
        match ch {
            'T' => in_time = true,
            '0'..='9' | '.' => number.push(ch),
            unit => {
                let value: f64 = number
                    .parse()
                    .unwrap_or_else(|_| panic!("bad duration {text:?}"));
                number.clear();
                let unit_seconds = match (in_time, unit) {
                    (false, 'W') => 604_800.0,
                    (false, 'D') => 86_400.0,
                    (true, 'H') => 3_600.0,
                    (true, 'M') => 60.0,
                    (true, 'S') => 1.0,
                    _ => panic!("bad duration {text:?}"),
                };
                seconds += value * unit_seconds;
            }
        }
    }
    seconds
}

/// Problems in the case's configuration once merged over the suite defaults.
fn lint_config(defaults: &Value, case: &Value) -> Vec<String> {
    let mut merged = defaults.clone();
    if let Some(config) = case.get("config").and_then(Value::as_object) {
        for (section, keys) in config {
            for (key, value) in keys.as_object().into_iter().flatten() {
                merged[section][key] = value.clone();
            }
        }
    }
    let relay = |key: &str| duration_seconds(merged["relay"][key].as_str().unwrap_or("PT0S"));
    let mut problems = Vec::new();
    if relay("lease") <= relay("request_timeout") {
        problems.push("config: relay.lease must be longer than relay.request_timeout (the core refuses it otherwise)".to_owned());
    }
    if relay("max_backoff") < relay("initial_backoff") {
        problems.push("config: relay.max_backoff is shorter than relay.initial_backoff".to_owned());
    }
    problems
}

// ------------------------------------------------------------------------------------------------
// The checks over the committed case files.

#[test]
fn every_case_file_is_valid() {
    let validator = validator();
    let defaults = suite_defaults(&load_schema());
    let files = case_files();
    assert!(
        !files.is_empty(),
        "no case files in {}",
        suite_dir().join("cases").display()
    );

    let mut failures: Vec<String> = Vec::new();
    let mut ids: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (path, parsed) in &files {
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let case = match parsed {
            Ok(case) => case,
            Err(error) => {
                failures.push(format!("{name}: {error}"));
                continue;
            }
        };
        let errors = schema_errors(&validator, case);
        if !errors.is_empty() {
            failures.extend(
                errors
                    .into_iter()
                    .map(|error| format!("{name}: schema: {error}")),
            );
            continue;
        }
        let id = case["id"].as_str().unwrap_or_default().to_owned();
        if name != format!("{id}.json") {
            failures.push(format!(
                "{name}: the file name must be the id plus .json ({id}.json)"
            ));
        }
        if let Some(previous) = ids.insert(id.clone(), path.clone()) {
            failures.push(format!(
                "{name}: id {id} is also used by {}",
                previous.display()
            ));
        }
        failures.extend(
            lint_case(case)
                .into_iter()
                .map(|problem| format!("{name}: {problem}")),
        );
        failures.extend(
            lint_config(&defaults, case)
                .into_iter()
                .map(|problem| format!("{name}: {problem}")),
        );
    }

    assert!(
        failures.is_empty(),
        "{} problem(s) in the conformance cases:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

#[test]
fn every_requirement_is_covered_by_a_case() {
    let covered: BTreeSet<String> = case_files()
        .into_iter()
        .filter_map(|(_, parsed)| parsed.ok())
        .flat_map(|case| {
            case["spec"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|spec| spec.as_str().map(str::to_owned))
        })
        .collect();
    let missing: Vec<&str> = [
        "FA-001", "FA-002", "FA-003", "FA-R001", "FA-R002", "FA-R003",
    ]
    .into_iter()
    .filter(|requirement| !covered.contains(*requirement))
    .collect();
    assert!(missing.is_empty(), "no case checks {missing:?}");
}

#[test]
fn readme_lists_every_case() {
    let readme_path = suite_dir().join("README.md");
    let readme = fs::read_to_string(&readme_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", readme_path.display()));
    let missing: Vec<String> = case_files()
        .into_iter()
        .filter_map(|(_, parsed)| parsed.ok())
        .filter_map(|case| case["id"].as_str().map(str::to_owned))
        .filter(|id| !readme.contains(&format!("`{id}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "README.md does not list these cases: {missing:?}"
    );
}

// ------------------------------------------------------------------------------------------------
// The checks cannot pass vacuously: broken cases are rejected, a good one is accepted.

/// A way to break the minimal case, with what it shows.
type Breakage = (&'static str, Box<dyn Fn(&mut Value)>);

fn minimal_case() -> Value {
    json!({
        "id": "FA-001-minimal-example",
        "spec": ["FA-001"],
        "title": "A minimal valid case used to build broken ones.",
        "steps": [
            {"op": "begin"},
            {"op": "enqueue_after_commit", "ref": "a", "type": "email.welcome", "args": [1]},
            {"op": "commit"},
            {"op": "wait_delivered", "refs": ["a"], "timeout_ms": 3000},
            {"op": "expect_backend", "received": ["a"], "total": 1}
        ]
    })
}

#[test]
fn schema_accepts_a_minimal_case() {
    let case = minimal_case();
    assert_eq!(schema_errors(&validator(), &case), Vec::<String>::new());
    assert_eq!(lint_case(&case), Vec::<String>::new());
}

#[test]
fn schema_rejects_broken_cases() {
    let validator = validator();
    let broken: Vec<Breakage> = vec![
        (
            "unknown op",
            Box::new(|c| c["steps"][0] = json!({"op": "teleport"})),
        ),
        (
            "missing steps",
            Box::new(|c| drop(c.as_object_mut().unwrap().remove("steps"))),
        ),
        ("empty steps", Box::new(|c| c["steps"] = json!([]))),
        (
            "bad id",
            Box::new(|c| c["id"] = json!("fa-001 lower case and spaces")),
        ),
        ("id without a slug", Box::new(|c| c["id"] = json!("FA-001"))),
        (
            "id with unknown prefix",
            Box::new(|c| c["id"] = json!("XX-001-something")),
        ),
        ("empty spec", Box::new(|c| c["spec"] = json!([]))),
        (
            "unknown top-level key",
            Box::new(|c| c["comment"] = json!("not allowed")),
        ),
        (
            "step without op",
            Box::new(|c| c["steps"][0] = json!({"ref": "a"})),
        ),
        (
            "extra key on a bare step",
            Box::new(|c| c["steps"][0] = json!({"op": "begin", "ref": "a"})),
        ),
        (
            "enqueue without ref",
            Box::new(|c| drop(c["steps"][1].as_object_mut().unwrap().remove("ref"))),
        ),
        (
            "enqueue with args not an array",
            Box::new(|c| c["steps"][1]["args"] = json!({"user_id": 1})),
        ),
        (
            "enqueue with an invalid type",
            Box::new(|c| c["steps"][1]["type"] = json!("Email-Welcome")),
        ),
        (
            "enqueue with an unknown option",
            Box::new(|c| c["steps"][1]["options"] = json!({"colour": "red"})),
        ),
        (
            "unknown error code",
            Box::new(|c| c["steps"][1]["expect_error"] = json!("SOMETHING_ELSE")),
        ),
        (
            "expect_error with two faults",
            Box::new(
                |c| c["steps"][1] = json!({"op": "enqueue_after_commit", "type": "Bad", "args": 1, "expect_error": "INVALID_JOB_TYPE"}),
            ),
        ),
        (
            "expect_error naming the wrong fault",
            Box::new(
                |c| c["steps"][1] = json!({"op": "enqueue", "type": "email.welcome", "args": [1], "expect_error": "INVALID_JOB_TYPE"}),
            ),
        ),
        (
            "commit with a bad flag",
            Box::new(|c| c["steps"][2] = json!({"op": "commit", "crash_before_hook": "yes"})),
        ),
        (
            "bulk with both jobs and generate",
            Box::new(|c| {
                c["steps"][1] = json!({"op": "enqueue_bulk", "jobs": [{"ref": "a", "type": "x", "args": []}],
                                   "generate": {"count": 2, "type": "x", "ref_prefix": "r"}})
            }),
        ),
        (
            "wait_delivered without refs",
            Box::new(|c| c["steps"][3] = json!({"op": "wait_delivered", "timeout_ms": 100})),
        ),
        (
            "unknown row status",
            Box::new(|c| c["steps"][3] = json!({"op": "wait_outbox", "rows": {"a": "done"}})),
        ),
        (
            "order without received",
            Box::new(|c| c["steps"][4] = json!({"op": "expect_backend", "order": "exact"})),
        ),
        (
            "expect_backend with nothing to check",
            Box::new(|c| c["steps"][4] = json!({"op": "expect_backend"})),
        ),
        (
            "fault status without code",
            Box::new(|c| c["steps"][0] = json!({"op": "backend_fault", "status": 503})),
        ),
        (
            "bad duration",
            Box::new(|c| c["config"] = json!({"outbox": {"poll_interval": "200ms"}})),
        ),
        (
            "duration without components",
            Box::new(|c| c["config"] = json!({"relay": {"lease": "PT"}})),
        ),
        (
            "unknown config key",
            Box::new(|c| c["config"] = json!({"relay": {"max_retries": 3}})),
        ),
        (
            "unknown relay mode",
            Box::new(|c| c["relay"] = json!("paused")),
        ),
        (
            "unknown context key",
            Box::new(|c| c["steps"][0] = json!({"op": "set_context", "context": {"session": "s"}})),
        ),
    ];

    let accepted: Vec<&str> = broken
        .iter()
        .filter(|(_, breaks)| {
            let mut case = minimal_case();
            breaks(&mut case);
            validator.is_valid(&case)
        })
        .map(|(what, _)| *what)
        .collect();
    assert!(
        accepted.is_empty(),
        "the schema accepts broken cases: {accepted:?}"
    );
}

#[test]
fn lint_rejects_broken_cases() {
    let broken: Vec<(&str, Value)> = vec![
        (
            "ref used before it is defined",
            json!({"steps": [
                {"op": "expect_backend", "absent": ["a"]},
                {"op": "enqueue_after_commit", "ref": "a", "type": "x", "args": []}
            ]}),
        ),
        (
            "ref of a call expected to fail",
            json!({"steps": [
                {"op": "enqueue_after_commit", "ref": "a", "type": "X", "args": [], "expect_error": "INVALID_JOB_TYPE"},
                {"op": "expect_outbox", "absent": ["a"]}
            ]}),
        ),
        (
            "ref defined twice",
            json!({"steps": [
                {"op": "enqueue", "ref": "a", "type": "x", "args": []},
                {"op": "enqueue_bulk", "jobs": [{"ref": "a", "type": "x", "args": []}]}
            ]}),
        ),
        (
            "generated ref out of range",
            json!({"steps": [
                {"op": "enqueue_bulk", "generate": {"count": 3, "type": "x", "ref_prefix": "r"}},
                {"op": "wait_delivered", "refs": ["r3"]}
            ]}),
        ),
        ("commit without begin", json!({"steps": [{"op": "commit"}]})),
        ("transaction left open", json!({"steps": [{"op": "begin"}]})),
        (
            "commit with a savepoint open",
            json!({"steps": [{"op": "begin"}, {"op": "savepoint"}, {"op": "commit"}]}),
        ),
        (
            "release without savepoint",
            json!({"steps": [{"op": "begin"}, {"op": "release_savepoint"}, {"op": "commit"}]}),
        ),
        (
            "begin twice",
            json!({"steps": [{"op": "begin"}, {"op": "begin"}]}),
        ),
        (
            "start a running relay",
            json!({"steps": [{"op": "relay_start"}]}),
        ),
        (
            "stop a stopped relay",
            json!({"relay": "stopped", "steps": [{"op": "relay_stop"}]}),
        ),
        (
            "subscription used before it is opened",
            json!({"steps": [{"op": "expect_events", "subscription": "s", "total": 0}]}),
        ),
        (
            "subscription opened twice",
            json!({"steps": [
                {"op": "events_subscribe", "subscription": "s"},
                {"op": "events_subscribe", "subscription": "s"}
            ]}),
        ),
        (
            "subscribe while the relay is stopped",
            json!({"relay": "stopped", "steps": [{"op": "events_subscribe", "subscription": "s"}]}),
        ),
        (
            "event ref used before it is defined",
            json!({"steps": [
                {"op": "events_subscribe", "subscription": "s"},
                {"op": "wait_events", "subscription": "s", "events": [{"ref": "a", "type": "job.enqueued"}]}
            ]}),
        ),
        (
            "second worker while one runs",
            json!({"steps": [{"op": "worker_start"}, {"op": "worker_start"}]}),
        ),
        (
            "worker stopped twice",
            json!({"steps": [{"op": "worker_start"}, {"op": "worker_stop", "deadline_ms": 100}, {"op": "worker_stop", "deadline_ms": 100}]}),
        ),
        (
            "job waited for before it is staged",
            json!({"steps": [{"op": "wait_jobs", "jobs": {"a": {"state": "completed"}}}]}),
        ),
        (
            "manifest change while running",
            json!({"steps": [{"op": "backend_manifest", "batch_enqueue": false}]}),
        ),
        (
            "min_elapsed_ms with no commit",
            json!({"steps": [
                {"op": "enqueue", "ref": "a", "type": "x", "args": []},
                {"op": "wait_delivered", "refs": ["a"], "min_elapsed_ms": 10}
            ]}),
        ),
        (
            "sleeping too long",
            json!({"steps": [{"op": "sleep", "ms": 1500}, {"op": "sleep", "ms": 1500}]}),
        ),
    ];
    let accepted: Vec<&str> = broken
        .iter()
        .filter(|(_, case)| lint_case(case).is_empty())
        .map(|(what, _)| *what)
        .collect();
    assert!(
        accepted.is_empty(),
        "the lint accepts broken cases: {accepted:?}"
    );
}

#[test]
fn suite_defaults_are_consistent_and_config_lint_bites() {
    let defaults = suite_defaults(&load_schema());
    assert_eq!(
        lint_config(&defaults, &json!({})),
        Vec::<String>::new(),
        "the suite defaults themselves"
    );
    let lease_too_short =
        json!({"config": {"relay": {"lease": "PT1S", "request_timeout": "PT2S"}}});
    assert!(!lint_config(&defaults, &lease_too_short).is_empty());
    let backoff_inverted =
        json!({"config": {"relay": {"initial_backoff": "PT2S", "max_backoff": "PT1S"}}});
    assert!(!lint_config(&defaults, &backoff_inverted).is_empty());
    assert_eq!(duration_seconds("P1DT1H1M1.5S"), 90_061.5);
}
