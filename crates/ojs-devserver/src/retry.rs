//! What a failed attempt leads to, decided as both reference servers decide it (`Nack` in the
//! Redis backend's `internal/redis/jobs.go` and the Postgres backend's
//! `internal/postgres/ack_nack.go`, with `core.CalculateBackoff` and `DefaultRetryPolicy`):
//!
//! - discarded when the worker says the error is not retryable (`error.retryable: false`),
//!   when the error's type (else its code) or message matches an entry of
//!   `retry.non_retryable_errors`, or when the failures reach `max_attempts`;
//! - else retried after `initial_interval * backoff_coefficient^(failures - 1)`, capped by
//!   `max_interval`, times a random factor in [0.5, 1.5) when `jitter` is on. A job without a
//!   `retry` policy gets the default one (PT1S, 2.0, PT5M, jitter on); in a given policy an
//!   absent field falls back to 1 s and 2.0, and an absent `max_interval` or `jitter` means no
//!   cap and no jitter, because the servers read the policy into a Go struct.

use std::hash::BuildHasher;

use serde_json::{Map, Value};

use crate::envelope::max_attempts_of;
use crate::unique::period_us;

const DEFAULT_INITIAL_US: f64 = 1_000_000.0;
const DEFAULT_COEFFICIENT: f64 = 2.0;
const DEFAULT_MAX_US: f64 = 300_000_000.0;

/// The outcome of a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Retryable again after this many microseconds.
    Retry {
        delay_us: u64,
    },
    Discard,
}

/// What the worker said about the failure.
pub(crate) struct FailureFacts<'a> {
    /// `error.retryable`, when given.
    pub retryable: Option<bool>,
    /// `error.type`, else `error.code`.
    pub kind: Option<&'a str>,
    pub message: &'a str,
}

/// The decision for a job whose failed attempts now number `failures` (this one included).
pub(crate) fn decide(
    options: Option<&Map<String, Value>>,
    failures: u32,
    facts: &FailureFacts<'_>,
) -> Decision {
    let policy = options
        .and_then(|options| options.get("retry"))
        .and_then(Value::as_object);
    let non_retryable = facts.retryable == Some(false)
        || policy
            .and_then(|policy| policy.get("non_retryable_errors"))
            .and_then(Value::as_array)
            .is_some_and(|patterns| {
                patterns.iter().filter_map(Value::as_str).any(|pattern| {
                    facts
                        .kind
                        .is_some_and(|kind| matches_pattern(kind, pattern))
                        || matches_pattern(facts.message, pattern)
                })
            });
    if non_retryable || i64::from(failures) >= max_attempts_of(options) {
        return Decision::Discard;
    }
    Decision::Retry {
        delay_us: backoff_us(policy, failures),
    }
}

fn backoff_us(policy: Option<&Map<String, Value>>, failures: u32) -> u64 {
    let interval = |key: &str| {
        policy
            .and_then(|policy| policy.get(key))
            .and_then(Value::as_str)
            .and_then(period_us)
            .map(|us| us as f64)
    };
    let initial = interval("initial_interval").unwrap_or(DEFAULT_INITIAL_US);
    let coefficient = policy
        .and_then(|policy| policy.get("backoff_coefficient"))
        .and_then(Value::as_f64)
        .filter(|c| *c > 0.0)
        .unwrap_or(DEFAULT_COEFFICIENT);
    let mut delay = initial * coefficient.powi(failures.saturating_sub(1) as i32);
    let cap = match policy {
        None => Some(DEFAULT_MAX_US),
        Some(_) => interval("max_interval"),
    };
    if let Some(cap) = cap {
        delay = delay.min(cap);
    }
    let jitter = match policy {
        None => true,
        Some(policy) => policy.get("jitter").and_then(Value::as_bool) == Some(true),
    };
    if jitter {
        delay *= 0.5 + random_unit();
    }
    delay.clamp(0.0, u64::MAX as f64) as u64
}

/// A number in [0, 1), good enough for jitter.
fn random_unit() -> f64 {
    let bits = std::collections::hash_map::RandomState::new().hash_one(crate::timefmt::now_us());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// The servers match `non_retryable_errors` entries as anchored regular expressions
/// (`^pattern$`), falling back to equality. Without a regex engine, the devserver matches
/// equality and patterns made of literal text joined by `.*`; an entry with any other regex
/// syntax matches only itself.
fn matches_pattern(text: &str, pattern: &str) -> bool {
    if text == pattern {
        return true;
    }
    let parts: Vec<&str> = pattern.split(".*").collect();
    let literal = |part: &&str| !part.contains(|c| "\\^$.|?*+()[]{}".contains(c));
    if parts.len() < 2 || !parts.iter().all(literal) {
        return false;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn options(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    const PLAIN: FailureFacts<'static> = FailureFacts {
        retryable: None,
        kind: Some("handler_error"),
        message: "boom",
    };

    #[test]
    fn exponential_backoff_capped_without_jitter_in_a_given_policy() {
        let o = options(
            json!({"retry": {"max_attempts": 9, "initial_interval": "PT2S",
                                         "backoff_coefficient": 3.0, "max_interval": "PT20S"}}),
        );
        let delays: Vec<Decision> = (1..=4).map(|n| decide(Some(&o), n, &PLAIN)).collect();
        let secs = [2, 6, 18, 20].map(|s| Decision::Retry {
            delay_us: s * 1_000_000,
        });
        assert_eq!(delays, secs);
        let bare = options(json!({"retry": {"max_attempts": 20}}));
        assert_eq!(
            decide(Some(&bare), 12, &PLAIN),
            Decision::Retry {
                delay_us: 2048 * 1_000_000
            },
            "no max_interval in a given policy: no cap"
        );
    }

    #[test]
    fn the_default_policy_jitters_between_half_and_one_and_a_half() {
        for _ in 0..50 {
            let Decision::Retry { delay_us } = decide(None, 1, &PLAIN) else {
                panic!("attempts remain");
            };
            assert!((500_000..1_500_000).contains(&delay_us), "{delay_us}");
        }
        assert_eq!(decide(None, 3, &PLAIN), Decision::Discard, "3 of 3");
    }

    #[test]
    fn non_retryable_errors_discard_early() {
        let o = options(json!({"retry": {"max_attempts": 5,
            "non_retryable_errors": ["ValidationError", "auth.*", "x|y"]}}));
        let facts = |retryable, kind, message| FailureFacts {
            retryable,
            kind,
            message,
        };
        let cases = [
            (facts(Some(false), None, "m"), true),
            (facts(None, Some("ValidationError"), "m"), true),
            (facts(None, Some("authz_denied"), "m"), true),
            (facts(None, None, "auth failed"), true),
            (facts(None, Some("x"), "m"), false),
            (facts(None, Some("x|y"), "m"), true),
            (facts(Some(true), Some("other"), "m"), false),
        ];
        for (facts, discarded) in cases {
            let decision = decide(Some(&o), 1, &facts);
            assert_eq!(decision == Decision::Discard, discarded, "{:?}", facts.kind);
        }
    }
}
