//! Unique jobs (`options.unique`): the fingerprint of a job and the policy that decides a
//! conflict, as `docs/ojs-compat.md` (section *Unique jobs*) sets them out from the spec
//! (`ojs-unique-jobs.md`) and the reference servers (`computeFingerprint`, Redis `Push` and
//! `unique_check.lua`, Postgres `Push`).
//!
//! Pure: the store (`store.rs`) holds the fingerprint of every job that claimed one and applies
//! the decision under its lock. The policy object is already validated (`validate.rs`).

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

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

/// The dimensions of the fingerprint when `keys` is absent: what both reference servers use
/// (the spec's default is `["type"]`).
const DEFAULT_KEYS: [&str; 2] = ["type", "args"];

/// The claim of a job whose (validated) `options.unique` is `policy`.
pub(crate) fn claim(
    policy: &Map<String, Value>,
    job_type: &str,
    queue: &str,
    args: &Value,
    meta: Option<&Value>,
) -> Claim {
    let listed: Vec<&str> = policy
        .get("keys")
        .and_then(Value::as_array)
        .map(|keys| keys.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let keys: &[&str] = if listed.is_empty() {
        &DEFAULT_KEYS
    } else {
        &listed
    };
    let names = |field: &str| -> Option<Vec<&str>> {
        policy
            .get(field)
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
    };
    let mut dimensions = Map::new();
    for key in keys {
        let value = match *key {
            "type" => Value::String(job_type.to_owned()),
            "queue" => Value::String(queue.to_owned()),
            "args" => match names("args_keys") {
                Some(wanted) => selected_args(args, &wanted),
                None => args.clone(),
            },
            "meta" => selected_meta(meta, &names("meta_keys").unwrap_or_default()),
            _ => continue,
        };
        dimensions.insert((*key).to_owned(), value);
    }
    let mut canonical = String::new();
    write_canonical(&mut canonical, &Value::Object(dimensions));
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
        fingerprint: Sha256::digest(canonical.as_bytes()).into(),
        on_conflict,
        states,
        period_us: policy
            .get("period")
            .and_then(Value::as_str)
            .and_then(period_us),
    }
}

/// `args_keys`: OJS args are an array, so each named key is taken from the first object element
/// of `args` that has it; the dimension is the object of those keys. A key no element has is
/// left out.
fn selected_args(args: &Value, wanted: &[&str]) -> Value {
    let mut picked = Map::new();
    for name in wanted {
        let found = args
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .find_map(|element| element.get(*name));
        if let Some(value) = found {
            picked.insert((*name).to_owned(), value.clone());
        }
    }
    Value::Object(picked)
}

/// `meta_keys`: the object of those keys of `meta` (absent keys left out).
fn selected_meta(meta: Option<&Value>, wanted: &[&str]) -> Value {
    let mut picked = Map::new();
    if let Some(meta) = meta.and_then(Value::as_object) {
        for name in wanted {
            if let Some(value) = meta.get(*name) {
                picked.insert((*name).to_owned(), value.clone());
            }
        }
    }
    Value::Object(picked)
}

/// Compact JSON with object keys sorted at every level and integral numbers written as
/// integers (`1.0` is `1`), so equal values give equal text whatever their spelling.
pub(crate) fn write_canonical(out: &mut String, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(out, value);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(out, item);
            }
            out.push(']');
        }
        Value::Number(number) => match number.as_f64() {
            Some(f)
                if !number.is_i64() && !number.is_u64() && f.fract() == 0.0 && f.abs() < 9e15 =>
            {
                out.push_str(&(f as i64).to_string());
            }
            _ => out.push_str(&number.to_string()),
        },
        other => out.push_str(&other.to_string()),
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
pub(crate) fn hex(fingerprint: &[u8; 32]) -> String {
    fingerprint.iter().map(|b| format!("{b:02x}")).collect()
}

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
    fn default_keys_are_type_and_args_as_the_servers_have_them() {
        let a = claim_of(json!({}), "email.send", "q1", json!([1]), Value::Null);
        let same = claim_of(json!({}), "email.send", "q2", json!([1]), json!({"x": 1}));
        let other_args = claim_of(json!({}), "email.send", "q1", json!([2]), Value::Null);
        let other_type = claim_of(json!({}), "sms.send", "q1", json!([1]), Value::Null);
        assert_eq!(
            a.fingerprint, same.fingerprint,
            "queue and meta are not in it"
        );
        assert_ne!(a.fingerprint, other_args.fingerprint);
        assert_ne!(a.fingerprint, other_type.fingerprint);
        let explicit = claim_of(
            json!({"keys": ["args", "type"]}),
            "email.send",
            "q9",
            json!([1]),
            Value::Null,
        );
        assert_eq!(
            a.fingerprint, explicit.fingerprint,
            "key order does not matter"
        );
        assert_eq!(a.on_conflict, OnConflict::Reject);
        assert_eq!(a.states, states::DEFAULT);
        assert_eq!(a.period_us, None);
    }

    #[test]
    fn only_the_listed_dimensions_count() {
        let by_queue = |queue: &str, job_type: &str| {
            claim_of(
                json!({"keys": ["queue"]}),
                job_type,
                queue,
                json!([1]),
                Value::Null,
            )
        };
        assert_eq!(
            by_queue("a", "x").fingerprint,
            by_queue("a", "y").fingerprint
        );
        assert_ne!(
            by_queue("a", "x").fingerprint,
            by_queue("b", "x").fingerprint
        );
        let type_only = claim_of(json!({"keys": ["type"]}), "x", "a", json!([1]), Value::Null);
        let type_and_queue = claim_of(
            json!({"keys": ["type", "queue"]}),
            "x",
            "a",
            json!([1]),
            Value::Null,
        );
        assert_ne!(type_only.fingerprint, type_and_queue.fingerprint);
    }

    #[test]
    fn args_keys_select_from_object_elements_and_meta_keys_from_meta() {
        let policy = json!({"keys": ["type", "args"], "args_keys": ["user_id"]});
        let one = claim_of(
            policy.clone(),
            "t",
            "q",
            json!([{"user_id": 42, "template": "a"}]),
            Value::Null,
        );
        let two = claim_of(
            policy.clone(),
            "t",
            "q",
            json!(["x", {"template": "b", "user_id": 42.0}]),
            Value::Null,
        );
        let other = claim_of(policy, "t", "q", json!([{"user_id": 43}]), Value::Null);
        assert_eq!(one.fingerprint, two.fingerprint);
        assert_ne!(one.fingerprint, other.fingerprint);

        let policy = json!({"keys": ["type", "meta"], "meta_keys": ["tenant_id"]});
        let acme = claim_of(
            policy.clone(),
            "t",
            "q",
            json!([1]),
            json!({"tenant_id": "acme", "trace": "1"}),
        );
        let acme_again = claim_of(
            policy.clone(),
            "t",
            "q",
            json!([2]),
            json!({"trace": "2", "tenant_id": "acme"}),
        );
        let globex = claim_of(policy, "t", "q", json!([1]), json!({"tenant_id": "globex"}));
        assert_eq!(acme.fingerprint, acme_again.fingerprint);
        assert_ne!(acme.fingerprint, globex.fingerprint);
    }

    #[test]
    fn canonical_json_sorts_keys_and_normalises_integral_numbers() {
        let mut a = String::new();
        write_canonical(&mut a, &json!({"b": [1.0, {"y": 2, "x": 1.5}], "a": "é"}));
        assert_eq!(a, r#"{"a":"é","b":[1,{"x":1.5,"y":2}]}"#);
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
