//! Sending a claim's rows: one batch (split when refused, `split.rs`) or one job per
//! request, and each row's settlement from the backend's answer (`verdict`), including the
//! `409 duplicate` that means an earlier attempt got through.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::{Engine, release, settled};
use crate::backoff;
use crate::classify::Outcome;
use crate::job::{MAX_WIRE_BYTES, wire_json};
use crate::log_feed::Level;
use crate::split::{Split, Step};
use crate::sql::UNIQUE_REJECTED_NOTE;
use crate::store::{ClaimedRow, Rejection, RowStatus, Settlement};

/// Wire forms larger than this are compacted before sending (PostgreSQL's jsonb text adds spaces).
const COMPACT_ABOVE_BYTES: usize = 256 * 1024;
/// `GET /ojs/v1/jobs/{id}` requests at a time when the relay asks which rows of a batch
/// answered `409 duplicate` the backend holds (`Engine::settle_held`).
const HELD_LOOKUPS_IN_FLIGHT: usize = 16;

impl Engine {
    pub(super) async fn batch_supported(&mut self) -> Result<bool, String> {
        if let Some(known) = self.batch_supported {
            return Ok(known);
        }
        let supported = self.backend.batch_supported().await?;
        self.batch_supported = Some(supported);
        Ok(supported)
    }

    /// Sends `group` (whose request body is `body`) as one batch, and settles every row of it.
    ///
    /// A refused batch is sent again in parts chosen by `split.rs`: the rows before the job the
    /// backend names (`details.index`), that job alone for its own verdict, then batches sized
    /// by what the refusals cleared (halves when none is named). O(n) bodies in all, and about
    /// 3 requests per refused row; rows still leave in order.
    ///
    /// A `409 duplicate` naming our own id (`details.existing_job_id`) settles that row without
    /// a request: an earlier attempt got through. The first time one of the batch's jobs turns
    /// out to be held so (or a row sent alone is answered so), the backend likely holds more
    /// of them (a batch it stored and whose answer was lost): the relay asks it once which rows
    /// it holds (`settle_held`, one `GET` per row, the only lookup OJS has) and sends only the
    /// others, instead of being refused once per held row. A 409 naming another job (a unique
    /// key's holder) is judged on the row's own send, as before.
    pub(super) async fn send_batch(
        &mut self,
        group: &[ClaimedRow],
        body: String,
        settlements: &mut Vec<Settlement>,
    ) {
        let mut split = Split::new(group.iter());
        let mut body = Some(body);
        // Whether the backend was asked which of these rows it holds.
        let mut asked = false;
        while let Some(step) = split.next() {
            if self.must_stop_sending() {
                settlements.extend(split.drain().into_iter().map(release));
                break;
            }
            let n = match step {
                // The first request is the batch the caller made, whatever its size.
                _ if body.is_some() => group.len(),
                Step::Alone => {
                    let row = split.pop_front().expect("a row is next");
                    let (settlement, held) = self.send_alone(row).await;
                    settlements.push(settlement);
                    if held
                        && !std::mem::replace(&mut asked, true)
                        && !self.settle_held(&mut split, settlements).await
                    {
                        settlements.extend(split.drain().into_iter().map(release));
                        break;
                    }
                    continue;
                }
                Step::Batch(n) => n,
            };
            let part = split.rows(n);
            let body = body.take().unwrap_or_else(|| batch_body(&part));
            let mut span = send_span(&part, true, self.backend.base_url());
            let started = Instant::now();
            let (outcome, named, answer) = self.backend.send_batch(body).await;
            self.counters.send_duration.record(started.elapsed());
            if crate::otel::enabled() {
                span.answered(outcome.kind(), &answer);
                if outcome.pauses_relay() {
                    for row in &part {
                        span.decided("ojs.job.released", &row.job_id, row.attempts.into(), None);
                    }
                }
            }
            span.end();
            let named = named.filter(|&index| index < n);
            match outcome {
                Outcome::Delivered { .. } => {
                    self.backend_ok();
                    settlements.extend(
                        part.iter()
                            .map(|row| settled(row, RowStatus::Sent, None, None, false)),
                    );
                    split.accepted(n);
                }
                Outcome::Misconfigured { .. } => {
                    // The batch endpoint may be gone (manifest changed): ask again next round
                    // and settle these rows one by one, which tells a missing endpoint from bad
                    // credentials.
                    self.batch_supported = None;
                    let rest = split.drain();
                    self.settle_one_by_one(&rest, settlements).await;
                    break;
                }
                ref pausing if pausing.pauses_relay() => {
                    self.pause_for(pausing);
                    settlements.extend(split.drain().into_iter().map(release));
                    break;
                }
                Outcome::Duplicate { existing_job_id } => match named {
                    // The answer names our own id: an earlier attempt got through. The
                    // backend likely holds more of these rows: ask once which.
                    Some(j) if existing_job_id.as_deref() == Some(part[j].job_id.as_str()) => {
                        let row = part[j];
                        self.backend_ok();
                        self.counters.deduplicated.fetch_add(1, Ordering::Relaxed);
                        settlements.push(settled(row, RowStatus::Sent, None, None, false));
                        split.resolved(n, j);
                        if !std::mem::replace(&mut asked, true)
                            && !self.settle_held(&mut split, settlements).await
                        {
                            settlements.extend(split.drain().into_iter().map(release));
                            break;
                        }
                    }
                    // Another job (a unique key's holder, or a job of this very batch): the
                    // named row goes alone, after the rows before it, for its own verdict.
                    Some(j) => split.refused(n, Some(j)),
                    // No job named: ask once which rows the backend holds; after that, or
                    // when it holds none of them, halve.
                    None if !std::mem::replace(&mut asked, true) => {
                        let before = settlements.len();
                        if !self.settle_held(&mut split, settlements).await {
                            settlements.extend(split.drain().into_iter().map(release));
                            break;
                        }
                        if settlements.len() == before {
                            split.refused(n, None);
                        }
                    }
                    None => split.refused(n, None),
                },
                // A refused batch may hide poison jobs among good ones: the named one goes
                // alone for its own verdict, or the batch is halved.
                _ => split.refused(n, named),
            }
        }
    }

    /// Asks the backend which of the rows not settled yet it holds (`GET /ojs/v1/jobs/{id}`,
    /// `HELD_LOOKUPS_IN_FLIGHT` at a time) and settles those as sent: an earlier attempt got
    /// through. False when it could not tell (the relay pauses; the caller releases the rest).
    pub(super) async fn settle_held(
        &mut self,
        split: &mut Split<&ClaimedRow>,
        settlements: &mut Vec<Settlement>,
    ) -> bool {
        let rows = split.all();
        let ids: Vec<&str> = rows.iter().map(|row| row.job_id.as_str()).collect();
        let answers = self
            .backend
            .jobs_exist(&ids, HELD_LOOKUPS_IN_FLIGHT, self.send_deadline)
            .await;
        let mut held = std::collections::HashSet::new();
        let mut failure = None;
        for (row, answer) in rows.iter().zip(answers) {
            match answer {
                Some(Ok(true)) => {
                    held.insert(row.id);
                    settlements.push(settled(row, RowStatus::Sent, None, None, false));
                }
                Some(Err(reason)) => failure = failure.or(Some(reason)),
                // Not held, or not asked (past the deadline: the loop releases it).
                Some(Ok(false)) | None => {}
            }
        }
        self.counters
            .deduplicated
            .fetch_add(held.len() as u64, Ordering::Relaxed);
        split.retain(|row| !held.contains(&row.id));
        match failure {
            Some(reason) => {
                self.pause_for(&Outcome::Unavailable {
                    reason,
                    retry_after: None,
                });
                false
            }
            None => {
                self.backend_ok();
                true
            }
        }
    }

    pub(super) async fn settle_one_by_one(
        &mut self,
        rows: &[&ClaimedRow],
        settlements: &mut Vec<Settlement>,
    ) {
        for row in rows {
            if self.must_stop_sending() {
                settlements.push(release(row));
            } else {
                settlements.push(self.send_single(row).await);
            }
        }
    }

    /// The settlement of a row answered `409 duplicate`, and whether the backend holds our own
    /// id. The answer's `existing_job_id` is our id: an earlier attempt got through. Otherwise
    /// `GET /ojs/v1/jobs/{id}` tells: found, the same; absent, the job's unique key matched
    /// another job and the policy refused this one. `None`: the backend could not tell; the
    /// relay pauses and the caller releases the row.
    pub(super) async fn judge_duplicate(
        &mut self,
        row: &ClaimedRow,
        existing_job_id: Option<String>,
    ) -> Option<(Settlement, bool)> {
        let ours = if existing_job_id.as_deref() == Some(row.job_id.as_str()) {
            Ok(true)
        } else {
            self.backend.job_exists(&row.job_id).await
        };
        match ours {
            Ok(true) => {
                self.backend_ok();
                self.counters.deduplicated.fetch_add(1, Ordering::Relaxed);
                Some((settled(row, RowStatus::Sent, None, None, false), true))
            }
            // The relay's work is done (sending again would be refused again), but this job id
            // does not exist at the backend. Said in the row, the log, an event of its own and
            // a counter, never as a delivery.
            Ok(false) => {
                self.backend_ok();
                let note = unique_rejected_note(existing_job_id.as_deref());
                self.log(
                    Level::Warning,
                    Some(&row.job_id),
                    format!(
                        "outbox relay: job {} ({}) was not created: {note}",
                        row.job_id, row.job_type
                    ),
                );
                let settlement = Settlement {
                    rejected: Some(Rejection { existing_job_id }),
                    ..settled(row, RowStatus::Sent, None, Some(note), false)
                };
                Some((settlement, false))
            }
            Err(reason) => {
                self.pause_for(&Outcome::Unavailable {
                    reason,
                    retry_after: None,
                });
                None
            }
        }
    }

    /// One job in one request, under a `send` span when tracing is on.
    pub(super) async fn send_single(&mut self, row: &ClaimedRow) -> Settlement {
        self.send_alone(row).await.0
    }

    /// `send_single`, and whether the backend turned out to hold this job already (`409
    /// duplicate` of our own id).
    pub(super) async fn send_alone(&mut self, row: &ClaimedRow) -> (Settlement, bool) {
        let mut span = send_span(&[row], false, self.backend.base_url());
        let started = Instant::now();
        let (outcome, answer) = self.backend.send_one_answered(wire_form(row)).await;
        self.counters.send_duration.record(started.elapsed());
        if !crate::otel::enabled() {
            return self.verdict(row, outcome).await;
        }
        span.answered(outcome.kind(), &answer);
        let (settlement, held) = self.verdict(row, outcome).await;
        let event = match settlement.status {
            Some(RowStatus::Failed) => Some("ojs.job.retry"),
            Some(RowStatus::Dead) => Some("ojs.job.dead_lettered"),
            Some(RowStatus::Sent) if settlement.rejected.is_some() => {
                Some("ojs.job.unique_rejected")
            }
            Some(_) => None,
            None if settlement.retry_in.is_some() => Some("ojs.job.deferred"),
            None => Some("ojs.job.released"),
        };
        if let Some(event) = event {
            let attempts = i64::from(row.attempts) + i64::from(settlement.consumed_attempt);
            span.decided(event, &row.job_id, attempts, settlement.retry_in);
        }
        span.end();
        (settlement, held)
    }

    /// The row's settlement for the backend's answer to its single send (a 409 asks the
    /// backend whether it holds our id, unless the answer named it), and whether the backend
    /// held our id already.
    pub(super) async fn verdict(
        &mut self,
        row: &ClaimedRow,
        outcome: Outcome,
    ) -> (Settlement, bool) {
        let mut held = false;
        let settlement = match outcome {
            Outcome::Delivered { deduplicated } => {
                self.backend_ok();
                if deduplicated {
                    self.counters.deduplicated.fetch_add(1, Ordering::Relaxed);
                    return (
                        settled(
                            row,
                            RowStatus::Sent,
                            None,
                            Some("deduplicated by the backend's unique policy".into()),
                            false,
                        ),
                        false,
                    );
                }
                settled(row, RowStatus::Sent, None, None, false)
            }
            Outcome::Duplicate { existing_job_id } => {
                match self.judge_duplicate(row, existing_job_id).await {
                    Some((settlement, ours)) => {
                        held = ours;
                        settlement
                    }
                    None => release(row),
                }
            }
            Outcome::Retry {
                reason,
                retry_after,
            } => {
                self.backend_ok();
                let attempts = row.attempts as u32 + 1;
                if attempts >= self.config.relay.max_attempts {
                    let error = format!("{reason} (gave up after {attempts} attempts)");
                    return (
                        settled(row, RowStatus::Dead, None, Some(error), true),
                        false,
                    );
                }
                let delay = backoff::jittered(
                    attempts,
                    self.config.relay.initial_backoff,
                    self.config.relay.max_backoff,
                )
                .max(retry_after.unwrap_or_default());
                settled(row, RowStatus::Failed, Some(delay), Some(reason), true)
            }
            Outcome::Defer {
                reason,
                retry_after,
            } => {
                self.backend_ok();
                let delay = retry_after.unwrap_or(self.config.relay.initial_backoff);
                Settlement {
                    id: row.id,
                    status: None,
                    consumed_attempt: false,
                    retry_in: Some(delay),
                    error: Some(reason),
                    rejected: None,
                }
            }
            Outcome::Terminal { reason } => {
                self.backend_ok();
                settled(row, RowStatus::Dead, None, Some(reason), true)
            }
            ref pausing => {
                self.pause_for(pausing);
                release(row)
            }
        };
        (settlement, held)
    }
}

fn unique_rejected_note(existing_job_id: Option<&str>) -> String {
    let holds = match existing_job_id {
        Some(id) => format!("job {id}"),
        None => "a job (its id not given)".to_owned(),
    };
    format!(
        "{UNIQUE_REJECTED_NOTE} the backend's unique policy (on_conflict: reject) refused it and holds {holds} with the same unique key"
    )
}

/// The `send` span of one request carrying `rows` (`otel::SendSpan`); nothing when tracing
/// is off. Each row's creation context and queue are read from its meta and options texts,
/// only when the sampler keeps the span.
pub(super) fn send_span(
    rows: &[&ClaimedRow],
    batch: bool,
    base_url: &str,
) -> crate::otel::SendSpan {
    if !crate::otel::enabled() {
        return crate::otel::SendSpan::none();
    }
    let mut span = crate::otel::SendSpan::start();
    if !span.is_recording() {
        return span;
    }
    let read: Vec<(Option<String>, Option<String>, Option<String>)> = rows
        .iter()
        .map(|row| {
            (
                top_level_string(&row.options_json, "queue"),
                top_level_string(&row.meta_json, "traceparent"),
                top_level_string(&row.meta_json, "tracestate"),
            )
        })
        .collect();
    let jobs: Vec<crate::otel::SentJob> = rows
        .iter()
        .zip(&read)
        .map(
            |(row, (queue, traceparent, tracestate))| crate::otel::SentJob {
                job_id: &row.job_id,
                job_type: &row.job_type,
                queue: queue.as_deref().unwrap_or("default"),
                traceparent: traceparent.as_deref(),
                tracestate: tracestate.as_deref(),
            },
        )
        .collect();
    span.describe(&jobs, batch, crate::otel::Server::of_url(base_url));
    span
}

/// A top-level string of a JSON object text (a row's options or meta), if there is one: read
/// without building the rest of the object (the other values are skipped, not allocated).
pub(super) fn top_level_string(json: &str, key: &str) -> Option<String> {
    struct Find<'k>(&'k str);
    impl<'de> serde::de::DeserializeSeed<'de> for Find<'_> {
        type Value = Option<String>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> serde::de::Visitor<'de> for Find<'_> {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut found = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == self.0 && found.is_none() {
                    found = match map.next_value::<serde_json::Value>()? {
                        serde_json::Value::String(text) => Some(text),
                        _ => None,
                    };
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    use serde::de::DeserializeSeed;
    let mut deserializer = serde_json::Deserializer::from_str(json);
    Find(key).deserialize(&mut deserializer).ok().flatten()
}

pub(super) fn wire_form(row: &ClaimedRow) -> String {
    let wire = wire_json(
        &row.job_id,
        &row.job_type,
        &row.args_json,
        &row.options_json,
        &row.meta_json,
    );
    if wire.len() <= COMPACT_ABOVE_BYTES {
        return wire;
    }
    match serde_json::from_str::<serde_json::Value>(&wire) {
        Ok(value) => value.to_string(),
        Err(_) => wire,
    }
}

/// The longest prefix of `rows` (at most `batch_size`, at least one) whose batch body stays
/// within the backends' 1 MiB limit, and that body; `None` when the first row alone would
/// not fit in a batch envelope (it then goes out as a single request).
pub(super) fn take_batch(
    rows: &[ClaimedRow],
    batch_size: usize,
) -> (&[ClaimedRow], Option<String>) {
    const ENVELOPE: &str = "{\"jobs\":[]}";
    let mut body = String::from("{\"jobs\":[");
    let mut taken = 0;
    for row in rows.iter().take(batch_size) {
        let wire = wire_form(row);
        let separator = usize::from(taken > 0);
        if body.len() + separator + wire.len() + 2 > MAX_WIRE_BYTES {
            if taken == 0 {
                return (&rows[..1], None);
            }
            break;
        }
        if taken > 0 {
            body.push(',');
        }
        body.push_str(&wire);
        taken += 1;
    }
    body.push_str("]}");
    debug_assert!(body.len() >= ENVELOPE.len());
    (&rows[..taken], Some(body))
}

/// The batch body of `rows`, part of a batch `take_batch` made (so within 1 MiB too).
pub(super) fn batch_body(rows: &[&ClaimedRow]) -> String {
    let mut body = String::from("{\"jobs\":[");
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&wire_form(row));
    }
    body.push_str("]}");
    body
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn a_top_level_string_is_read_without_the_rest() {
        let json = r#"{"retry": {"queue": "inner"}, "queue": "email", "tags": ["a"]}"#;
        assert_eq!(top_level_string(json, "queue").as_deref(), Some("email"));
        assert_eq!(top_level_string(r#"{"queue": 5}"#, "queue"), None);
        assert_eq!(top_level_string("{}", "queue"), None);
        assert_eq!(top_level_string("not json", "queue"), None);
    }

    /// A claimed row whose args are a string of `args_bytes` bytes.
    pub(in crate::relay) fn row(id: i64, args_bytes: usize) -> ClaimedRow {
        ClaimedRow {
            id,
            job_id: format!("01900000-0000-7000-8000-{id:012}"),
            job_type: "bulk.item".into(),
            args_json: format!("[\"{}\"]", "x".repeat(args_bytes)),
            options_json: "{}".into(),
            meta_json: "{}".into(),
            attempts: 0,
            keyed: false,
        }
    }

    #[test]
    fn batches_stop_at_the_batch_size() {
        let rows: Vec<ClaimedRow> = (0..10).map(|i| row(i, 10)).collect();
        let (group, body) = take_batch(&rows, 4);
        assert_eq!(group.len(), 4);
        let body: serde_json::Value = serde_json::from_str(&body.unwrap()).unwrap();
        assert_eq!(body["jobs"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn batch_bodies_never_exceed_one_mib() {
        // Rows sized so that a naive sum without separators would let one more in.
        let wire = wire_form(&row(0, 0)).len() + 4; // the row's framing plus the quotes
        let per_row = MAX_WIRE_BYTES / 4 - wire;
        let rows: Vec<ClaimedRow> = (0..8).map(|i| row(i, per_row)).collect();
        let mut rest = rows.as_slice();
        while !rest.is_empty() {
            let (group, body) = take_batch(rest, 100);
            let body = body.expect("each row fits alone");
            assert!(body.len() <= MAX_WIRE_BYTES, "{} bytes", body.len());
            serde_json::from_str::<serde_json::Value>(&body).expect("valid JSON");
            rest = &rest[group.len()..];
        }
    }

    #[test]
    fn a_row_too_large_for_a_batch_envelope_goes_alone() {
        let rows = vec![row(1, MAX_WIRE_BYTES - 100), row(2, 10)];
        let (group, body) = take_batch(&rows, 100);
        assert_eq!(group.len(), 1);
        assert!(body.is_none(), "sent as a single request instead");
    }
}
