//! The in-memory backend state: stored jobs, delivery counts, request counters, faults.
//!
//! One `Mutex<State>` guards it all; every operation holds the lock briefly and never across
//! an `.await`. Jobs are stored compactly (a 128-bit id, an interned type, one string holding
//! the raw JSON of args, meta and options) so a million small jobs fit in about 100 MB.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write as _;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::model::{Fault, FaultScope, RequestCounts, Stats};
use crate::validate::{CarriedId, ValidJob, format_job_id};

/// `IdEntry::slot` of an id that was delivered but never stored.
const NOT_STORED: u32 = u32::MAX;

/// One stored job.
pub(crate) struct StoredJob {
    pub id: u128,
    pub job_type: Arc<str>,
    /// Raw JSON of args, then meta (if any), then options (if any), concatenated.
    raw: Box<str>,
    args_len: u32,
    /// 0 when the job had no meta (a present meta is at least `{}`).
    meta_len: u32,
    pub received_at_us: u64,
    pub batch_request: u64,
}

impl StoredJob {
    pub fn args(&self) -> &str {
        &self.raw[..self.args_len as usize]
    }

    pub fn meta(&self) -> Option<&str> {
        let start = self.args_len as usize;
        let end = start + self.meta_len as usize;
        (self.meta_len > 0).then(|| &self.raw[start..end])
    }

    pub fn options(&self) -> Option<&str> {
        let start = (self.args_len + self.meta_len) as usize;
        (start < self.raw.len()).then(|| &self.raw[start..])
    }
}

#[derive(Clone, Copy)]
struct IdEntry {
    /// Index into `State::jobs`, or `NOT_STORED`.
    slot: u32,
    deliveries: u32,
}

/// A cheap hasher for 128-bit ids (a splitmix64 finalizer over both halves).
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, value: u128) {
        self.0 ^= (value as u64) ^ ((value >> 64) as u64).rotate_left(29);
    }
}

/// The kind of OJS request, for counting and fault matching.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum RequestKind {
    EnqueueSingle,
    EnqueueBatch,
    GetJob,
    Other,
}

impl RequestKind {
    fn is_enqueue(self) -> bool {
        matches!(self, RequestKind::EnqueueSingle | RequestKind::EnqueueBatch)
    }
}

/// An enqueue refused because an id is already stored, or repeated within the batch.
pub(crate) struct Duplicate {
    /// Position in the request (0 for a single enqueue).
    pub index: usize,
    pub id: u128,
}

pub(crate) struct State {
    jobs: Vec<StoredJob>,
    ids: HashMap<u128, IdEntry, BuildHasherDefault<IdHasher>>,
    /// Deliveries of id strings that are not valid ids (such jobs are never stored).
    malformed_deliveries: HashMap<Box<str>, u32>,
    types: HashSet<Arc<str>>,
    requests: RequestCounts,
    faults: VecDeque<Fault>,
    batch_enqueue: bool,
    initial_batch_enqueue: bool,
}

pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

impl State {
    pub fn new(batch_enqueue: bool) -> State {
        State {
            jobs: Vec::new(),
            ids: HashMap::default(),
            malformed_deliveries: HashMap::new(),
            types: HashSet::new(),
            requests: RequestCounts::default(),
            faults: VecDeque::new(),
            batch_enqueue,
            initial_batch_enqueue: batch_enqueue,
        }
    }

    /// A fresh state with the start configuration; the caller drops the old one outside the lock.
    pub fn fresh(&self) -> State {
        State::new(self.initial_batch_enqueue)
    }

    pub fn batch_enqueue(&self) -> bool {
        self.batch_enqueue
    }

    pub fn set_batch_enqueue(&mut self, enabled: bool) {
        self.batch_enqueue = enabled;
    }

    pub fn faults(&self) -> Vec<Fault> {
        self.faults.iter().cloned().collect()
    }

    pub fn push_fault(&mut self, fault: Fault) {
        self.faults.push_back(fault);
    }

    pub fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// Counts an arriving OJS request and picks the fault that applies to it, if any.
    /// Returns the enqueue request index (for enqueues) and the fault.
    pub fn arrive(&mut self, kind: RequestKind, carried_types: &[&str]) -> (u64, Option<Fault>) {
        let index = self.requests.single + self.requests.batch;
        match kind {
            RequestKind::EnqueueSingle => self.requests.single += 1,
            RequestKind::EnqueueBatch => self.requests.batch += 1,
            RequestKind::GetJob => self.requests.get += 1,
            RequestKind::Other => {}
        }
        let position = self.faults.iter().position(|fault| {
            let scope_ok = match fault.applies_to {
                FaultScope::Enqueue => kind.is_enqueue(),
                FaultScope::All => true,
            };
            let type_ok = match &fault.match_type {
                None => true,
                Some(wanted) => kind.is_enqueue() && carried_types.iter().any(|t| t == wanted),
            };
            scope_ok && type_ok
        });
        let fault = position.map(|position| {
            let fault = &mut self.faults[position];
            let used = fault.clone();
            if let Some(count) = fault.count.as_mut() {
                *count -= 1;
                if *count == 0 {
                    self.faults.remove(position);
                }
            }
            used
        });
        (index, fault)
    }

    /// Counts one delivery of an id a request (or batch element) carried.
    pub fn count_delivery(&mut self, carried: &CarriedId<'_>) {
        match carried {
            CarriedId::None => {}
            CarriedId::Valid(id) => {
                self.ids
                    .entry(*id)
                    .and_modify(|e| e.deliveries += 1)
                    .or_insert(IdEntry {
                        slot: NOT_STORED,
                        deliveries: 1,
                    });
            }
            CarriedId::Malformed(text) => {
                *self
                    .malformed_deliveries
                    .entry(Box::from(text.as_ref()))
                    .or_insert(0) += 1;
            }
        }
    }

    fn is_stored(&self, id: u128) -> bool {
        self.ids.get(&id).is_some_and(|e| e.slot != NOT_STORED)
    }

    /// Stores all jobs of one request atomically, or none. Deliveries must already be counted.
    /// Returns the ids (generated where absent) and the acceptance time.
    pub fn store(
        &mut self,
        jobs: &[ValidJob<'_>],
        batch_request: u64,
    ) -> Result<(Vec<u128>, u64), Duplicate> {
        let mut seen: HashSet<u128, BuildHasherDefault<IdHasher>> = HashSet::default();
        for (index, job) in jobs.iter().enumerate() {
            if let Some(id) = job.id
                && (self.is_stored(id) || (jobs.len() > 1 && !seen.insert(id)))
            {
                return Err(Duplicate { index, id });
            }
        }
        let received_at_us = now_us();
        let mut ids = Vec::with_capacity(jobs.len());
        for job in jobs {
            let slot = self.jobs.len() as u32;
            let id = match job.id {
                Some(id) => {
                    self.ids
                        .get_mut(&id)
                        .expect("deliveries are counted before storing")
                        .slot = slot;
                    id
                }
                None => loop {
                    let id = uuid::Uuid::now_v7().as_u128();
                    if let Entry::Vacant(vacant) = self.ids.entry(id) {
                        vacant.insert(IdEntry {
                            slot,
                            deliveries: 1,
                        });
                        break id;
                    }
                },
            };
            let job_type = match self.types.get(job.job_type.as_ref()) {
                Some(interned) => interned.clone(),
                None => {
                    let interned: Arc<str> = Arc::from(job.job_type.as_ref());
                    self.types.insert(interned.clone());
                    interned
                }
            };
            let meta = job.meta.unwrap_or("");
            let options = job.options.unwrap_or("");
            let mut raw = String::with_capacity(job.args.len() + meta.len() + options.len());
            raw.push_str(job.args);
            raw.push_str(meta);
            raw.push_str(options);
            self.jobs.push(StoredJob {
                id,
                job_type,
                raw: raw.into_boxed_str(),
                args_len: job.args.len() as u32,
                meta_len: meta.len() as u32,
                received_at_us,
                batch_request,
            });
            ids.push(id);
        }
        Ok((ids, received_at_us))
    }

    pub fn job(&self, id: u128) -> Option<&StoredJob> {
        let entry = self.ids.get(&id)?;
        self.jobs.get(entry.slot as usize)
    }

    pub fn stats(&self) -> Stats {
        let valid: u64 = self.ids.values().map(|e| u64::from(e.deliveries)).sum();
        let malformed: u64 = self
            .malformed_deliveries
            .values()
            .map(|&n| u64::from(n))
            .sum();
        Stats {
            jobs: self.jobs.len() as u64,
            deliveries: valid + malformed,
            requests: self.requests,
        }
    }

    /// Writes the `GET /_dev/received` document.
    pub fn write_received(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"jobs\":[");
        for (seq, job) in self.jobs.iter().enumerate() {
            if seq > 0 {
                out.push(b',');
            }
            let _ = write!(out, "{{\"seq\":{seq},\"id\":\"");
            out.extend_from_slice(format_job_id(job.id).as_bytes());
            out.extend_from_slice(b"\",\"type\":");
            write_json_string(out, &job.job_type);
            out.extend_from_slice(b",\"args\":");
            out.extend_from_slice(job.args().as_bytes());
            out.extend_from_slice(b",\"meta\":");
            out.extend_from_slice(job.meta().unwrap_or("null").as_bytes());
            out.extend_from_slice(b",\"options\":");
            out.extend_from_slice(job.options().unwrap_or("null").as_bytes());
            let _ = write!(
                out,
                ",\"received_at_us\":{},\"batch_request\":{}}}",
                job.received_at_us, job.batch_request
            );
        }
        out.extend_from_slice(b"],\"deliveries\":{");
        // Fixed-width lowercase hex sorts like the number, so sorting the numbers sorts the text.
        let mut valid: Vec<(u128, u32)> =
            self.ids.iter().map(|(id, e)| (*id, e.deliveries)).collect();
        valid.sort_unstable();
        let mut malformed: Vec<(&str, u32)> = self
            .malformed_deliveries
            .iter()
            .map(|(id, n)| (id.as_ref(), *n))
            .collect();
        malformed.sort_unstable();
        let mut first = true;
        for (id, n) in valid {
            if !first {
                out.push(b',');
            }
            first = false;
            let _ = write!(out, "\"{}\":{n}", format_job_id(id));
        }
        for (id, n) in malformed {
            if !first {
                out.push(b',');
            }
            first = false;
            write_json_string(out, id);
            let _ = write!(out, ":{n}");
        }
        let r = self.requests;
        let _ = write!(
            out,
            "}},\"requests\":{{\"single\":{},\"batch\":{},\"get\":{}}}}}",
            r.single, r.batch, r.get
        );
    }
}

/// Appends `text` as a JSON string literal.
pub(crate) fn write_json_string(out: &mut Vec<u8>, text: &str) {
    serde_json::to_writer(out, text).expect("writing JSON to a Vec cannot fail");
}
