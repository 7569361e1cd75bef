//! The event ops of the suite (`events_subscribe`, `wait_events`, `expect_events`): one
//! subscriber of the in-process relay's stream per name, read through
//! `Bridge::relay_events`, the call every framework's mount serves (README, "Events").

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use ojs_bridge::events::{Next, RelayFrames};
use serde_json::Value;

/// One named subscriber and what it has read so far.
pub struct Subscription {
    frames: RelayFrames,
    source: String,
    events: Vec<Value>,
    ids: HashSet<String>,
    ended: bool,
}

impl Subscription {
    pub fn new(frames: RelayFrames, table: &str) -> Subscription {
        Subscription {
            frames,
            source: format!("/ojs/outbox/{table}"),
            events: Vec::new(),
            ids: HashSet::new(),
            ended: false,
        }
    }

    /// Reads what is waiting (at most `wait_ms` for the first frame), checking each envelope.
    fn read(&mut self, wait_ms: u64) -> Result<(), String> {
        let mut wait = wait_ms;
        while !self.ended {
            match self.frames.next(wait) {
                Next::Frame(frame) => self.take(&frame)?,
                Next::Idle => break,
                Next::End => self.ended = true,
            }
            wait = 0;
        }
        Ok(())
    }

    /// One SSE frame: its `data:` line is the event (RFC-0005 §2), checked as an envelope.
    fn take(&mut self, frame: &str) -> Result<(), String> {
        let data = frame
            .lines()
            .find_map(|line| line.strip_prefix("data: "))
            .ok_or_else(|| format!("a frame without data: {frame:?}"))?;
        let event: Value = serde_json::from_str(data)
            .map_err(|e| format!("frame data is not JSON ({e}): {data}"))?;
        let id = event["id"].as_str().unwrap_or_default();
        let kind = event["type"].as_str().unwrap_or_default();
        if event["specversion"] != "1.0" {
            return Err(format!("specversion is not \"1.0\": {event}"));
        }
        if id.is_empty() || !self.ids.insert(id.to_owned()) {
            return Err(format!("event id missing or repeated: {event}"));
        }
        if event["source"] != self.source.as_str() {
            return Err(format!("source is not {:?}: {event}", self.source));
        }
        if kind.starts_with("job.") && event["subject"] != event["data"]["job_id"] {
            return Err(format!(
                "a job event's subject is not its data.job_id: {event}"
            ));
        }
        self.events.push(event);
        Ok(())
    }

    /// The id of the event of `kind` about `job_id` read so far (for `last_event_id`).
    pub fn id_of(&self, job_id: &str, kind: &str) -> Option<String> {
        self.events
            .iter()
            .find(|e| e["subject"] == job_id && e["type"] == kind)
            .and_then(|e| e["id"].as_str().map(str::to_owned))
    }

    /// `wait_events`: until the relevant events are exactly `expected` (refs resolved to ids).
    pub fn wait(
        &mut self,
        expected: &[Value],
        refs: &HashMap<String, String>,
        timeout: Duration,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut subjects = HashSet::new();
        let mut kinds = HashSet::new();
        for entry in expected {
            match entry.get("ref").and_then(Value::as_str) {
                Some(r) => {
                    let id = refs
                        .get(r)
                        .ok_or_else(|| format!("ref {r:?} was never enqueued"))?;
                    subjects.insert(id.clone());
                }
                None => {
                    kinds.insert(entry["type"].as_str().unwrap_or_default().to_owned());
                }
            }
        }
        loop {
            self.read(20)?;
            let relevant: Vec<&Value> = self
                .events
                .iter()
                .filter(|e| {
                    e["subject"].as_str().is_some_and(|s| subjects.contains(s))
                        || e["type"].as_str().is_some_and(|k| kinds.contains(k))
                })
                .collect();
            if relevant.len() > expected.len() {
                return Err(format!(
                    "{} relevant events, {} expected: {}",
                    relevant.len(),
                    expected.len(),
                    summary(&relevant)
                ));
            }
            for (index, (event, entry)) in relevant.iter().zip(expected).enumerate() {
                if let Err(why) = matches(event, entry, refs) {
                    return Err(format!(
                        "event {index}: {why}; so far: {}",
                        summary(&relevant)
                    ));
                }
            }
            if relevant.len() == expected.len() {
                return Ok(());
            }
            if self.ended {
                return Err(format!("the stream ended; so far: {}", summary(&relevant)));
            }
            if Instant::now() >= deadline {
                return Err(format!("timed out; so far: {}", summary(&relevant)));
            }
        }
    }

    /// `expect_events`: at once, after reading what is waiting.
    pub fn expect(&mut self, step: &Value, refs: &HashMap<String, String>) -> Result<(), String> {
        self.read(0)?;
        for r in step["absent"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            let id = refs
                .get(r)
                .ok_or_else(|| format!("ref {r:?} was never enqueued"))?;
            if let Some(event) = self.events.iter().find(|e| e["subject"] == id.as_str()) {
                return Err(format!("an event about {r:?} arrived: {event}"));
            }
        }
        if let Some(total) = step.get("total").and_then(Value::as_u64) {
            let all: Vec<&Value> = self.events.iter().collect();
            if all.len() as u64 != total {
                return Err(format!(
                    "expected {total} events, received {}: {}",
                    all.len(),
                    summary(&all)
                ));
            }
        }
        Ok(())
    }
}

/// One event against one expected entry: type, subject, and `data` as a subset.
fn matches(event: &Value, entry: &Value, refs: &HashMap<String, String>) -> Result<(), String> {
    if event["type"] != entry["type"] {
        return Err(format!("expected {}, got {}", entry["type"], event["type"]));
    }
    if let Some(r) = entry.get("ref").and_then(Value::as_str)
        && event["subject"].as_str() != refs.get(r).map(String::as_str)
    {
        return Err(format!(
            "expected an event about {r:?}, got {}",
            event["subject"]
        ));
    }
    for (key, want) in entry
        .get("data")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let got = event["data"].get(key);
        if !got.is_some_and(|got| crate::is_subset(want, got)) {
            return Err(format!(
                "{} data.{key}: expected {want}, got {got:?}",
                entry["type"]
            ));
        }
    }
    Ok(())
}

/// `type(subject)` per event, for failure messages.
fn summary(events: &[&Value]) -> String {
    let parts: Vec<String> = events
        .iter()
        .map(|e| {
            format!(
                "{}({})",
                e["type"].as_str().unwrap_or("?"),
                e["subject"].as_str().unwrap_or("?")
            )
        })
        .collect();
    format!("[{}]", parts.join(", "))
}
