//! Unique jobs (`options.unique`): the fingerprint of a job and the policy that decides a
//! conflict, as `docs/ojs-compat.md` (section *Unique jobs*) sets them out from the spec
//! (`ojs-unique-jobs.md`) and the reference servers (`computeFingerprint`, Redis `Push` and
//! `unique_check.lua`, Postgres `Push`).
//!
//! Pure: the store (`store.rs`) holds the fingerprint of every job that claimed one and applies
//! the decision under its lock. The policy object is already validated (`validate.rs`).

use serde_json::{Map, Value};

/// What to do when a relevant job with the same fingerprint exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnConflict {
    /// `409 duplicate`, nothing stored.
    Reject,
    /// `200` with the existing job, nothing stored.
    Ignore,
    /// The existing job is cancelled and the new one stored.
    Replace,
    /// Answered like `Reject`: both reference servers fall through to their reject branch for
    /// this policy (the spec would update the existing job and keep its schedule).
    ReplaceExceptSchedule,
}

/// The job states, as bits of a set.
pub(crate) mod states {
    pub const SCHEDULED: u8 = 1;
    pub const AVAILABLE: u8 = 1 << 1;
    pub const PENDING: u8 = 1 << 2;
    pub const ACTIVE: u8 = 1 << 3;
    pub const COMPLETED: u8 = 1 << 4;
    pub const RETRYABLE: u8 = 1 << 5;
    pub const CANCELLED: u8 = 1 << 6;
    pub const DISCARDED: u8 = 1 << 7;
    /// The non-terminal states: the spec's default `states`, and the set both servers check.
    pub const DEFAULT: u8 = SCHEDULED | AVAILABLE | PENDING | ACTIVE | RETRYABLE;

    pub fn bit(name: &str) -> u8 {
        match name {
            "scheduled" => SCHEDULED,
            "available" => AVAILABLE,
            "pending" => PENDING,
            "active" => ACTIVE,
            "completed" => COMPLETED,
            "retryable" => RETRYABLE,
            "cancelled" => CANCELLED,
            "discarded" => DISCARDED,
            _ => 0,
        }
    }
}

/// A job's claim on a fingerprint, with the policy it was sent with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    /// SHA-256 of the canonical JSON of the fingerprint's dimensions.
    pub fingerprint: [u8; 32],
    pub on_conflict: OnConflict,
    /// States in which an existing job counts as a duplicate (bits of [`states`]).
    pub states: u8,
    /// How long after its creation this job blocks others; `None`: as long as it is relevant.
    pub period_us: Option<u64>,
}

/// The claim of a job whose (validated) `options.unique` is `policy`.
pub(crate) fn claim(
    policy: &Map<String, Value>,
    job_type: &str,
    queue: &str,
    args: &Value,
    meta: Option<&Value>,
) -> Claim {
    let names = |field: &str| -> Option<Vec<&str>> {
        policy
            .get(field)
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
    };
    let states = match names("states") {
        Some(names) => names.iter().fold(0, |set, name| set | states::bit(name)),
        None => states::DEFAULT,
    };
    let on_conflict = match policy.get("on_conflict").and_then(Value::as_str) {
        Some("ignore") => OnConflict::Ignore,
        Some("replace") => OnConflict::Replace,
        Some("replace_except_schedule") => OnConflict::ReplaceExceptSchedule,
        _ => OnConflict::Reject,
    };
    Claim {
        fingerprint: ojs_fingerprint::fingerprint(policy, job_type, queue, args, meta),
        on_conflict,
        states,
        period_us: policy
            .get("period")
            .and_then(Value::as_str)
            .and_then(period_us),
    }
}

/// `options.unique.period` (validated: `P[nY][nM][nW][nD][T[nH][nM][n[.n]S]]`) in microseconds.
/// A year counts 365 days and a month 30: the unique window has no calendar to follow.
pub(crate) fn period_us(text: &str) -> Option<u64> {
    let rest = text.strip_prefix('P')?;
    let mut total: f64 = 0.0;
    let mut in_time = false;
    let mut number = String::new();
    for c in rest.chars() {
        match c {
            'T' => in_time = true,
            '0'..='9' | '.' => number.push(c),
            unit => {
                let n: f64 = number.parse().ok()?;
                number.clear();
                let seconds = match (unit, in_time) {
                    ('Y', false) => 365.0 * 86_400.0,
                    ('M', false) => 30.0 * 86_400.0,
                    ('W', false) => 7.0 * 86_400.0,
                    ('D', false) => 86_400.0,
                    ('H', true) => 3600.0,
                    ('M', true) => 60.0,
                    ('S', true) => 1.0,
                    _ => return None,
                };
                total += n * seconds;
            }
        }
    }
    number
        .is_empty()
        .then(|| (total * 1_000_000.0).min(u64::MAX as f64) as u64)
}

/// Lowercase hex of a fingerprint: the `unique_key` of a conflict answer.
pub(crate) use ojs_fingerprint::hex;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim_of(policy: Value, job_type: &str, queue: &str, args: Value, meta: Value) -> Claim {
        let meta = (!meta.is_null()).then_some(meta);
        claim(
            policy.as_object().expect("object"),
            job_type,
            queue,
            &args,
            meta.as_ref(),
        )
    }

    #[test]
    fn policy_fields_are_read() {
        let c = claim_of(
            json!({"on_conflict": "ignore", "states": ["scheduled", "completed"], "period": "PT1H30M"}),
            "t",
            "q",
            json!([]),
            Value::Null,
        );
        assert_eq!(c.on_conflict, OnConflict::Ignore);
        assert_eq!(c.states, states::SCHEDULED | states::COMPLETED);
        assert_eq!(c.period_us, Some(5_400_000_000));
        for (policy, expected) in [
            ("replace", OnConflict::Replace),
            ("replace_except_schedule", OnConflict::ReplaceExceptSchedule),
            ("reject", OnConflict::Reject),
        ] {
            let c = claim_of(
                json!({"on_conflict": policy}),
                "t",
                "q",
                json!([]),
                Value::Null,
            );
            assert_eq!(c.on_conflict, expected);
        }
    }

    #[test]
    fn periods_in_microseconds() {
        assert_eq!(period_us("PT0.5S"), Some(500_000));
        assert_eq!(period_us("PT0S"), Some(0));
        assert_eq!(period_us("P1D"), Some(86_400_000_000));
        assert_eq!(period_us("P1W"), Some(7 * 86_400_000_000));
        assert_eq!(period_us("P1M"), Some(30 * 86_400_000_000));
        assert_eq!(period_us("P1Y"), Some(365 * 86_400_000_000));
        assert_eq!(period_us("P1DT1H1M1S"), Some(90_061_000_000));
        assert_eq!(period_us("PT1"), None);
    }
}
