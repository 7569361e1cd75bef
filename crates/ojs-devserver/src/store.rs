//! The in-memory backend state: stored jobs, delivery counts, request counters, faults, and the
//! holders of unique fingerprints.
//!
//! One `Mutex<State>` guards it all; every operation holds the lock briefly and never across
//! an `.await`. Jobs are stored compactly (a 128-bit id, an interned type, one string holding
//! the raw JSON of args, meta, options and the preserved attributes, and the rarely used rest
//! boxed) so a million small jobs fit in about 100 MB.
//!
//! A job's state is computed when it is read: `scheduled` while its `scheduled_at` (or
//! `delay_until`) is in the future, then `available`; `cancelled` once a unique `replace`
//! replaced it. Workers (`/ojs/v1/workers/*`) and the control API (`/_dev/jobs/{id}/start`,
//! `/complete`, `/fail`) move a job through its worker life (`active`, `completed`,
//! `retryable`, `discarded`, back to `available`), recorded in the job's [`Run`]; the
//! [`WorkIndex`] that finds work for a fetch is built by the first fetch, never by an enqueue.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write as _;
use std::sync::Arc;

use crate::model::{Fault, FaultScope, RequestCounts, Stats};
use crate::timefmt::now_us;
use crate::unique::{OnConflict, states};
use crate::validate::{CarriedId, ValidJob, format_job_id};
use crate::worker::WorkIndex;

/// `IdEntry::slot` of an id that was delivered but never stored.
const NOT_STORED: u32 = u32::MAX;

/// The states a stored job can be in: the three a producer sees, and the four the control
/// API's worker life gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JobState {
    Scheduled,
    Available,
    Cancelled,
    Active,
    Completed,
    Retryable,
    Discarded,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Scheduled => "scheduled",
            JobState::Available => "available",
            JobState::Cancelled => "cancelled",
            JobState::Active => "active",
            JobState::Completed => "completed",
            JobState::Retryable => "retryable",
            JobState::Discarded => "discarded",
        }
    }

    fn bit(self) -> u8 {
        match self {
            JobState::Scheduled => states::SCHEDULED,
            JobState::Available => states::AVAILABLE,
            JobState::Cancelled => states::CANCELLED,
            JobState::Active => states::ACTIVE,
            JobState::Completed => states::COMPLETED,
            JobState::Retryable => states::RETRYABLE,
            JobState::Discarded => states::DISCARDED,
        }
    }

    fn of(scheduled_at_us: Option<i64>, cancelled: bool, now_us: u64) -> JobState {
        if cancelled {
            JobState::Cancelled
        } else if scheduled_at_us.is_some_and(|at| at > now_us as i64) {
            JobState::Scheduled
        } else {
            JobState::Available
        }
    }
}

/// One stored job.
pub(crate) struct StoredJob {
    pub id: u128,
    pub job_type: Arc<str>,
    /// Raw JSON of args, meta (if any), options (if any), then the preserved attributes as
    /// object members (if any), concatenated.
    raw: Box<str>,
    args_len: u32,
    /// 0 when the job had no meta (a present meta is at least `{}`).
    meta_len: u32,
    /// 0 when the job had no options.
    options_len: u32,
    pub received_at_us: u64,
    pub batch_request: u64,
    /// What few jobs have: a schedule, a unique claim, a cancellation.
    rare: Option<Box<Rare>>,
}

#[derive(Default)]
struct Rare {
    scheduled_at_us: Option<i64>,
    /// The `period` of the job's unique claim, if it has one with a period.
    unique_period_us: Option<u64>,
    cancelled: Option<Cancellation>,
    /// Where the control API's worker life has taken the job, once started.
    run: Option<Run>,
}

/// A job's worker life, once a worker (`POST /ojs/v1/workers/fetch`) or the control API
/// (`/_dev/jobs/{id}/start`) claimed it.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    /// `Active`, `Completed`, `Retryable`, `Discarded`, or `Available` once a reservation ran
    /// out or a worker gave the job back (`requeue`).
    pub state: JobState,
    /// Failed attempts so far, as the reference servers count it: a claim leaves it, a failure
    /// adds one.
    pub attempt: u32,
    /// When the current (or last) attempt started; cleared when the job is given back.
    pub started_at_us: Option<u64>,
    /// The worker holding the job while it is active.
    pub worker_id: Option<Box<str>>,
    /// While active: when the reservation runs out (the visibility timeout).
    pub visible_until_us: u64,
    /// When it completed or was discarded (`completed_at`).
    pub ended_at_us: Option<u64>,
    /// While retryable: when it becomes available again.
    pub next_attempt_at_us: u64,
    /// The backoff of the last retry decision.
    pub retry_delay_ms: Option<u64>,
    /// The last failure's error (JSON); cleared by a completion.
    pub error: Option<Box<str>>,
    /// Every failure's error (JSON), oldest first.
    pub errors: Vec<Box<str>>,
    /// The result an acknowledgement carried (JSON).
    pub result: Option<Box<str>>,
}

impl Run {
    /// A fresh claim of a job never claimed before.
    pub fn first() -> Run {
        Run {
            state: JobState::Available,
            attempt: 0,
            started_at_us: None,
            worker_id: None,
            visible_until_us: 0,
            ended_at_us: None,
            next_attempt_at_us: 0,
            retry_delay_ms: None,
            error: None,
            errors: Vec::new(),
            result: None,
        }
    }
}

#[derive(Clone, Copy)]
pub(crate) struct Cancellation {
    pub at_us: u64,
    /// The job whose unique `replace` cancelled this one; `None` for a client's
    /// `DELETE /ojs/v1/jobs/{id}`.
    pub replaced_by: Option<u128>,
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
        let end = start + self.options_len as usize;
        (self.options_len > 0).then(|| &self.raw[start..end])
    }

    /// The preserved top-level attributes as JSON object members, possibly empty.
    pub fn attributes(&self) -> &str {
        &self.raw[(self.args_len + self.meta_len + self.options_len) as usize..]
    }

    pub fn cancellation(&self) -> Option<Cancellation> {
        self.rare.as_ref().and_then(|rare| rare.cancelled)
    }

    /// Whether a later job's unique `replace` cancelled this one (it then leaves `jobs`).
    pub fn replaced(&self) -> bool {
        self.cancellation().is_some_and(|c| c.replaced_by.is_some())
    }

    /// A client's cancel (`DELETE /ojs/v1/jobs/{id}`): the job is `cancelled` from now on and
    /// its reservation, if a worker held it, is void.
    pub fn cancel_by_client(&mut self, at_us: u64) {
        let rare = self.rare.get_or_insert_with(Box::default);
        rare.cancelled = Some(Cancellation {
            at_us,
            replaced_by: None,
        });
        if let Some(run) = rare.run.as_mut() {
            run.worker_id = None;
        }
    }

    fn scheduled_at_us(&self) -> Option<i64> {
        self.rare.as_ref().and_then(|rare| rare.scheduled_at_us)
    }

    pub fn run(&self) -> Option<&Run> {
        self.rare.as_ref().and_then(|rare| rare.run.as_ref())
    }

    pub fn set_run(&mut self, run: Run) {
        self.rare.get_or_insert_with(Box::default).run = Some(run);
    }

    pub fn run_mut(&mut self) -> Option<&mut Run> {
        self.rare.as_mut().and_then(|rare| rare.run.as_mut())
    }

    /// The job's state at `now_us`: a retryable job whose backoff has passed is `available`.
    pub fn state(&self, now_us: u64) -> JobState {
        if self.cancellation().is_none()
            && let Some(run) = self.run()
        {
            return match run.state {
                JobState::Retryable if now_us >= run.next_attempt_at_us => JobState::Available,
                state => state,
            };
        }
        JobState::of(
            self.scheduled_at_us(),
            self.cancellation().is_some(),
            now_us,
        )
    }

    /// Whether this job, holding a unique fingerprint, still blocks a job claiming `states`.
    fn blocks(&self, claim_states: u8, now_us: u64) -> bool {
        let expired = self
            .rare
            .as_ref()
            .and_then(|rare| rare.unique_period_us)
            .is_some_and(|period| now_us >= self.received_at_us.saturating_add(period));
        !expired && claim_states & self.state(now_us).bit() != 0
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

/// Why an enqueue stored nothing.
pub(crate) enum Refused {
    /// An id already stored, or repeated within the batch (`index`: its position).
    DuplicateId { index: usize, id: u128 },
    /// A unique `reject` (or `replace_except_schedule`) conflict with a job the backend holds
    /// or with an earlier job of the same batch.
    UniqueConflict {
        index: usize,
        existing_id: u128,
        existing_state: JobState,
        fingerprint: [u8; 32],
    },
}

/// Where one job of an accepted request went.
pub(crate) enum Placed {
    /// Stored under `id`; `state` as it is at the end of the request.
    Created { id: u128, state: JobState },
    /// Not stored: a unique `ignore` found this stored job (slot).
    Existing { slot: u32 },
}

/// What an accepted request stored.
pub(crate) struct Stored {
    /// Per job of the request.
    pub placed: Vec<Placed>,
    pub received_at_us: u64,
    /// The jobs a unique `replace` cancelled: (index of the replacing job in the request,
    /// slot of the cancelled job), in request order.
    pub cancelled: Vec<(usize, u32)>,
}

/// The holder of a fingerprint while a request is decided: a stored job or an earlier job of
/// the same request.
#[derive(Clone, Copy)]
enum Holder {
    Stored(u32),
    New(usize),
}

enum Decision {
    /// Store the job; `cancels`: the job its unique `replace` cancels.
    Create { cancels: Option<Holder> },
    /// Store nothing; answer with the holder (unique `ignore`).
    Ignore(Holder),
}

pub(crate) struct State {
    jobs: Vec<StoredJob>,
    ids: HashMap<u128, IdEntry, BuildHasherDefault<IdHasher>>,
    /// Deliveries of id strings that are not valid ids (such jobs are never stored).
    malformed_deliveries: HashMap<Box<str>, u32>,
    types: HashSet<Arc<str>>,
    /// Per unique fingerprint, the slot of the job that claimed it last.
    unique_holders: HashMap<[u8; 32], u32>,
    /// Stored jobs cancelled by a unique `replace`.
    replaced: u64,
    requests: RequestCounts,
    faults: VecDeque<Fault>,
    batch_enqueue: bool,
    initial_batch_enqueue: bool,
    /// Where fetches find work; empty until the first fetch.
    work: WorkIndex,
}

impl State {
    pub fn new(batch_enqueue: bool) -> State {
        State {
            jobs: Vec::new(),
            ids: HashMap::default(),
            malformed_deliveries: HashMap::new(),
            types: HashSet::new(),
            unique_holders: HashMap::new(),
            replaced: 0,
            requests: RequestCounts::default(),
            faults: VecDeque::new(),
            batch_enqueue,
            initial_batch_enqueue: batch_enqueue,
            work: WorkIndex::default(),
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

    /// A fresh UUIDv7 no stored or delivered job has.
    fn new_id(&self, taken: &[u128]) -> u128 {
        loop {
            let id = uuid::Uuid::now_v7().as_u128();
            if !self.ids.contains_key(&id) && !taken.contains(&id) {
                return id;
            }
        }
    }

    /// Stores the jobs of one request atomically, or none: a repeated id or a unique conflict
    /// refuses the whole request. Deliveries must already be counted. Unique policies apply in
    /// request order, so a job can conflict with an earlier job of the same batch.
    pub fn store(&mut self, jobs: &[ValidJob<'_>], batch_request: u64) -> Result<Stored, Refused> {
        let mut seen: HashSet<u128, BuildHasherDefault<IdHasher>> = HashSet::default();
        for (index, job) in jobs.iter().enumerate() {
            if let Some(id) = job.id
                && (self.is_stored(id) || (jobs.len() > 1 && !seen.insert(id)))
            {
                return Err(Refused::DuplicateId { index, id });
            }
        }
        let received_at_us = now_us();
        let mut ids: Vec<u128> = Vec::with_capacity(jobs.len());
        for job in jobs {
            let id = job.id.unwrap_or_else(|| self.new_id(&ids));
            ids.push(id);
        }
        let decisions = self.decide(jobs, &ids, received_at_us)?;

        let mut slots: Vec<u32> = Vec::with_capacity(jobs.len());
        let mut placed: Vec<Placed> = Vec::with_capacity(jobs.len());
        let mut cancelled: Vec<(usize, u32)> = Vec::new();
        for (index, ((job, id), decision)) in jobs.iter().zip(&ids).zip(&decisions).enumerate() {
            let cancels = match decision {
                Decision::Ignore(holder) => {
                    let slot = self.slot_of(*holder, &slots);
                    slots.push(NOT_STORED);
                    placed.push(Placed::Existing { slot });
                    continue;
                }
                Decision::Create { cancels } => *cancels,
            };
            let slot = self.push_job(job, *id, received_at_us, batch_request);
            if let Some(claim) = &job.unique {
                self.unique_holders.insert(claim.fingerprint, slot);
            }
            if let Some(holder) = cancels {
                let slot = self.slot_of(holder, &slots);
                if self.cancel(slot, *id, received_at_us) {
                    cancelled.push((index, slot));
                }
            }
            slots.push(slot);
            placed.push(Placed::Created {
                id: *id,
                state: JobState::Available,
            });
        }
        for (placed, slot) in placed.iter_mut().zip(&slots) {
            if let Placed::Created { state, .. } = placed {
                *state = self.jobs[*slot as usize].state(received_at_us);
            }
        }
        Ok(Stored {
            placed,
            received_at_us,
            cancelled,
        })
    }

    /// The unique decision for each job of a request, without changing anything.
    fn decide(
        &self,
        jobs: &[ValidJob<'_>],
        ids: &[u128],
        now_us: u64,
    ) -> Result<Vec<Decision>, Refused> {
        let mut decisions = Vec::with_capacity(jobs.len());
        if jobs.iter().all(|job| job.unique.is_none()) {
            decisions.resize_with(jobs.len(), || Decision::Create { cancels: None });
            return Ok(decisions);
        }
        // Holders set by earlier jobs of this request, and which of those a later one cancels.
        let mut claimed: HashMap<[u8; 32], usize> = HashMap::new();
        let mut cancelled = vec![false; jobs.len()];
        for (index, job) in jobs.iter().enumerate() {
            let Some(claim) = &job.unique else {
                decisions.push(Decision::Create { cancels: None });
                continue;
            };
            let holder = match claimed.get(&claim.fingerprint) {
                Some(&earlier) => Some(Holder::New(earlier)),
                None => self
                    .unique_holders
                    .get(&claim.fingerprint)
                    .map(|&slot| Holder::Stored(slot)),
            };
            let blocking = holder.filter(|holder| match *holder {
                Holder::Stored(slot) => self.jobs[slot as usize].blocks(claim.states, now_us),
                Holder::New(earlier) => {
                    let state =
                        JobState::of(jobs[earlier].scheduled_at_us, cancelled[earlier], now_us);
                    let period = jobs[earlier].unique.as_ref().and_then(|c| c.period_us);
                    period != Some(0) && claim.states & state.bit() != 0
                }
            });
            let decision = match blocking {
                None => Decision::Create { cancels: None },
                Some(holder) => match claim.on_conflict {
                    OnConflict::Reject | OnConflict::ReplaceExceptSchedule => {
                        let (existing_id, existing_state) = match holder {
                            Holder::Stored(slot) => {
                                let job = &self.jobs[slot as usize];
                                (job.id, job.state(now_us))
                            }
                            Holder::New(earlier) => (
                                ids[earlier],
                                JobState::of(
                                    jobs[earlier].scheduled_at_us,
                                    cancelled[earlier],
                                    now_us,
                                ),
                            ),
                        };
                        return Err(Refused::UniqueConflict {
                            index,
                            existing_id,
                            existing_state,
                            fingerprint: claim.fingerprint,
                        });
                    }
                    OnConflict::Ignore => Decision::Ignore(holder),
                    OnConflict::Replace => {
                        if let Holder::New(earlier) = holder {
                            cancelled[earlier] = true;
                        }
                        Decision::Create {
                            cancels: Some(holder),
                        }
                    }
                },
            };
            if let Decision::Create { .. } = decision {
                claimed.insert(claim.fingerprint, index);
            }
            decisions.push(decision);
        }
        Ok(decisions)
    }

    /// The slot of a holder; `slots[i]` is the slot of the request's job `i` once placed.
    fn slot_of(&self, holder: Holder, slots: &[u32]) -> u32 {
        match holder {
            Holder::Stored(slot) => slot,
            Holder::New(earlier) => slots[earlier],
        }
    }

    /// Cancels the job at `slot`; true when it was not cancelled before.
    fn cancel(&mut self, slot: u32, replaced_by: u128, at_us: u64) -> bool {
        let job = &mut self.jobs[slot as usize];
        let first = job.cancellation().is_none();
        if first {
            self.replaced += 1;
        }
        job.rare.get_or_insert_with(Box::default).cancelled = Some(Cancellation {
            at_us,
            replaced_by: Some(replaced_by),
        });
        first
    }

    fn push_job(
        &mut self,
        job: &ValidJob<'_>,
        id: u128,
        received_at_us: u64,
        batch_request: u64,
    ) -> u32 {
        let slot = self.jobs.len() as u32;
        match self.ids.entry(id) {
            Entry::Occupied(mut carried) => carried.get_mut().slot = slot,
            Entry::Vacant(generated) => {
                generated.insert(IdEntry {
                    slot,
                    deliveries: 1,
                });
            }
        }
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
        let mut raw = String::with_capacity(
            job.args.len() + meta.len() + options.len() + job.attributes.len(),
        );
        raw.push_str(job.args);
        raw.push_str(meta);
        raw.push_str(options);
        raw.push_str(&job.attributes);
        let rare = (job.scheduled_at_us.is_some() || job.unique.is_some()).then(|| {
            Box::new(Rare {
                scheduled_at_us: job.scheduled_at_us,
                unique_period_us: job.unique.as_ref().and_then(|claim| claim.period_us),
                cancelled: None,
                run: None,
            })
        });
        self.jobs.push(StoredJob {
            id,
            job_type,
            raw: raw.into_boxed_str(),
            args_len: job.args.len() as u32,
            meta_len: meta.len() as u32,
            options_len: options.len() as u32,
            received_at_us,
            batch_request,
            rare,
        });
        slot
    }

    pub fn job(&self, id: u128) -> Option<&StoredJob> {
        let entry = self.ids.get(&id)?;
        self.jobs.get(entry.slot as usize)
    }

    pub fn job_at(&self, slot: u32) -> &StoredJob {
        &self.jobs[slot as usize]
    }

    /// The slot of a stored job.
    pub fn stored_slot(&self, id: u128) -> Option<u32> {
        self.ids
            .get(&id)
            .map(|entry| entry.slot)
            .filter(|&slot| slot != NOT_STORED)
    }

    /// The stored jobs and the work index, borrowed together.
    pub fn work_parts(&mut self) -> (&mut [StoredJob], &mut WorkIndex) {
        (&mut self.jobs, &mut self.work)
    }

    pub fn stats(&self) -> Stats {
        let valid: u64 = self.ids.values().map(|e| u64::from(e.deliveries)).sum();
        let malformed: u64 = self
            .malformed_deliveries
            .values()
            .map(|&n| u64::from(n))
            .sum();
        Stats {
            jobs: self.jobs.len() as u64 - self.replaced,
            replaced: self.replaced,
            deliveries: valid + malformed,
            requests: self.requests,
        }
    }

    /// Writes the `GET /_dev/received` document.
    pub fn write_received(&self, out: &mut Vec<u8>) {
        let now = now_us();
        out.extend_from_slice(b"{\"jobs\":[");
        let mut first = true;
        for (seq, job) in self.jobs.iter().enumerate() {
            if job.replaced() {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            write_received_job(out, seq, job, now);
            out.push(b'}');
        }
        out.extend_from_slice(b"],\"replaced\":[");
        let mut first = true;
        for (seq, job) in self.jobs.iter().enumerate() {
            let Some((cancelled, replaced_by)) = job
                .cancellation()
                .and_then(|c| c.replaced_by.map(|by| (c, by)))
            else {
                continue;
            };
            if !first {
                out.push(b',');
            }
            first = false;
            write_received_job(out, seq, job, now);
            let _ = write!(
                out,
                ",\"replaced_by\":\"{}\",\"cancelled_at_us\":{}}}",
                format_job_id(replaced_by),
                cancelled.at_us
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

/// One `/_dev/received` record, without its closing brace.
fn write_received_job(out: &mut Vec<u8>, seq: usize, job: &StoredJob, now_us: u64) {
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
    out.extend_from_slice(b",\"attributes\":");
    let attributes = job.attributes();
    if attributes.is_empty() {
        out.extend_from_slice(b"null");
    } else {
        out.push(b'{');
        out.extend_from_slice(attributes.as_bytes());
        out.push(b'}');
    }
    let _ = write!(
        out,
        ",\"state\":\"{}\",\"received_at_us\":{},\"batch_request\":{}",
        job.state(now_us).as_str(),
        job.received_at_us,
        job.batch_request
    );
}

/// Appends `text` as a JSON string literal.
pub(crate) fn write_json_string(out: &mut Vec<u8>, text: &str) {
    serde_json::to_writer(out, text).expect("writing JSON to a Vec cannot fail");
}
