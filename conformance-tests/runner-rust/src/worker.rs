//! The worker steps (README: Workers): the bridge's worker loop (`Bridge::start_worker`) with
//! the suite handlers, run on `concurrency` threads as a binding runs its handler slots, and
//! `wait_jobs`, which reads the backend's view of each job.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ojs_bridge::Bridge;
use ojs_bridge::worker::{Next, Worker};
use serde_json::{Value, json};

/// A running worker and its handler slots.
pub(crate) struct SuiteWorker {
    worker: Arc<Worker>,
    slots: Vec<JoinHandle<()>>,
}

impl SuiteWorker {
    pub(crate) fn start(adapter: &Bridge, step: &Value) -> Result<SuiteWorker, String> {
        let mut options = json!({"queues": ["default"]});
        for key in ["concurrency", "visibility_timeout_ms"] {
            if let Some(value) = step.get(key) {
                options[key] = value.clone();
            }
        }
        let worker = adapter
            .start_worker(&options.to_string())
            .map(Arc::new)
            .map_err(|e| format!("worker_start: {e}"))?;
        let slots = (0..worker.concurrency())
            .map(|_| {
                let worker = worker.clone();
                std::thread::spawn(move || slot(&worker))
            })
            .collect();
        Ok(SuiteWorker { worker, slots })
    }

    /// Graceful stop; returns once the loop stopped and every slot ended (a slot still in a
    /// handler whose job the loop gave up finishes its handler first).
    pub(crate) fn stop(self, deadline_ms: u64) {
        self.worker.stop(Some(deadline_ms));
        for slot in self.slots {
            let _ = slot.join();
        }
    }
}

fn slot(worker: &Worker) {
    loop {
        let job = match worker.next(200) {
            Next::Job(job) => job,
            Next::Idle => continue,
            Next::Stopped => return,
        };
        let job: Value = serde_json::from_str(&job).expect("the bridge gives JSON");
        let outcome = run_handler(&job);
        let id = job["id"].as_str().unwrap_or_default();
        let _ = worker.finish(id, &outcome.to_string());
    }
}

/// The suite handlers; any other type is unknown.
fn run_handler(job: &Value) -> Value {
    let args = &job["args"];
    match job["type"].as_str().unwrap_or_default() {
        "conf.echo" => json!({"outcome": "completed", "result": {"echo": args}}),
        "conf.fail" => json!({
            "outcome": "failed",
            "code": "ConformanceError",
            "message": args[0].as_str().unwrap_or("conf.fail"),
        }),
        "conf.sleep" => {
            let ms = args[0].as_u64().unwrap_or(0);
            std::thread::sleep(Duration::from_millis(ms));
            json!({"outcome": "completed", "result": {"slept": ms}})
        }
        "conf.trace" => {
            json!({"outcome": "completed", "result": {"traceparent": job["traceparent"]}})
        }
        _ => json!({"outcome": "unknown_type"}),
    }
}

/// Why the backend's job (`GET /ojs/v1/jobs/{id}`'s `job`) does not match `expected` (README:
/// `wait_jobs`); `None` when it does.
pub(crate) fn mismatch(expected: &Value, job: &Value) -> Option<String> {
    let state = &job["state"];
    let state_ok = match &expected["state"] {
        Value::Null => true,
        Value::Array(states) => states.contains(state),
        one => one == state,
    };
    if !state_ok {
        return Some(format!("state {state}, expected {}", expected["state"]));
    }
    if let Some(attempt) = expected.get("attempt")
        && attempt != &job["attempt"]
    {
        return Some(format!("attempt {}, expected {attempt}", job["attempt"]));
    }
    if let Some(result) = expected.get("result")
        && !json_equal(result, &job["result"])
    {
        return Some(format!("result {}, expected {result}", job["result"]));
    }
    if let Some(error) = expected.get("error") {
        let actual = &job["error"];
        if let Some(kind) = error.get("type")
            && kind != &actual["type"]
        {
            return Some(format!("last error {actual}, expected type {kind}"));
        }
        if let Some(text) = error["message_contains"].as_str()
            && !actual["message"].as_str().unwrap_or("").contains(text)
        {
            return Some(format!(
                "last error {actual}, expected a message with {text:?}"
            ));
        }
    }
    None
}

/// JSON equality with numbers compared by value (`1` equals `1.0`).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}
