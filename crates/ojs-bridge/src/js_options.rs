//! The JavaScript spelling of job options: camelCase keys (`delayUntil`, `retry.maxAttempts`)
//! and durations as whole milliseconds (`retry.initialInterval: 1000`), the forms Node
//! developers know from BullMQ. A binding whose language writes options this way opts in
//! ([`crate::Bridge::accept_js_options`]); the options are then respelled into the
//! spec's form before the one validation of `job.rs`, so the job on the wire is the same
//! whichever form the caller used, and an error names the field as the caller spelled it.

use serde_json::{Map, Value};

use ojs_outbox::error::{Error, ErrorCode, Result};

/// `(camelCase, spec)` per object: the keys whose spellings differ.
const TOP: &[(&str, &str)] = &[
    ("delayUntil", "delay_until"),
    ("scheduledAt", "scheduled_at"),
    ("expiresAt", "expires_at"),
    ("timeoutMs", "timeout_ms"),
    ("visibilityTimeoutMs", "visibility_timeout_ms"),
    ("orderingKey", "ordering_key"),
];
const RETRY: &[(&str, &str)] = &[
    ("maxAttempts", "max_attempts"),
    ("initialInterval", "initial_interval"),
    ("backoffCoefficient", "backoff_coefficient"),
    ("maxInterval", "max_interval"),
    ("onExhaustion", "on_exhaustion"),
    ("nonRetryableErrors", "non_retryable_errors"),
];
const UNIQUE: &[(&str, &str)] = &[
    ("argsKeys", "args_keys"),
    ("metaKeys", "meta_keys"),
    ("onConflict", "on_conflict"),
];
/// The ISO 8601 duration options (spec names): a number there is milliseconds.
const DURATIONS: &[&str] = &["initial_interval", "max_interval", "period"];

/// How the caller spelled each renamed field: `(spec field, caller's field)`, as `options.…`.
#[derive(Debug, Default)]
pub struct Renames(Vec<(String, String)>);

impl Renames {
    /// `error` (from validating the respelled options) naming the field as the caller wrote it.
    pub fn caller_error(&self, error: Error) -> Error {
        let Some(field) = error.field.as_deref() else {
            return error;
        };
        match self.0.iter().find(|(spec, _)| spec == field) {
            Some((spec, caller)) => Error {
                message: match error.message.strip_prefix(spec.as_str()) {
                    Some(rest) => format!("{caller}{rest}"),
                    None => error.message.clone(),
                },
                field: Some(caller.clone()),
                ..error
            },
            None => error,
        }
    }
}

/// The options in the spec's form. Spec spellings pass unchanged; a key given in both
/// spellings, or a duration that is neither a string nor whole milliseconds, is refused.
pub fn to_spec(mut options: Map<String, Value>) -> Result<(Map<String, Value>, Renames)> {
    let mut renames = Vec::new();
    respell(&mut options, TOP, "options", &mut renames)?;
    for (section, table) in [("retry", RETRY), ("unique", UNIQUE)] {
        if let Some(Value::Object(inner)) = options.get_mut(section) {
            respell(inner, table, &format!("options.{section}"), &mut renames)?;
        }
    }
    Ok((options, Renames(renames)))
}

fn respell(
    object: &mut Map<String, Value>,
    table: &[(&str, &str)],
    path: &str,
    renames: &mut Vec<(String, String)>,
) -> Result<()> {
    for (camel, spec) in table {
        let Some(value) = object.remove(*camel) else {
            continue;
        };
        let caller = format!("{path}.{camel}");
        if object.contains_key(*spec) {
            return Err(Error::field(
                ErrorCode::InvalidOptions,
                caller,
                format!("given twice: as {camel} and as {spec}; keep one"),
            ));
        }
        object.insert((*spec).to_owned(), value);
        renames.push((format!("{path}.{spec}"), caller));
    }
    if path != "options" {
        for key in DURATIONS {
            let Some(value) = object.get_mut(*key) else {
                continue;
            };
            if value.is_number() {
                let spec = format!("{path}.{key}");
                let caller = renames
                    .iter()
                    .find(|(s, _)| *s == spec)
                    .map_or(spec.clone(), |(_, c)| c.clone());
                *value = Value::String(millis_to_iso(value).ok_or_else(|| {
                    Error::field(
                        ErrorCode::InvalidOptions,
                        caller,
                        format!(
                            "must be an ISO 8601 duration string or a whole number of milliseconds, got {value}"
                        ),
                    )
                })?);
            }
        }
    }
    Ok(())
}

/// Whole milliseconds as the shortest `PT[nH][nM][n[.nnn]S]` (`90000` → `PT1M30S`); `0` gives
/// `PT0S`, which the validation then refuses where zero is refused.
fn millis_to_iso(value: &Value) -> Option<String> {
    let ms = value.as_u64()?;
    let (hours, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (minutes, rest) = (rest / 60_000, rest % 60_000);
    let (seconds, millis) = (rest / 1000, rest % 1000);
    let mut text = String::from("PT");
    if hours > 0 {
        text += &format!("{hours}H");
    }
    if minutes > 0 {
        text += &format!("{minutes}M");
    }
    if millis > 0 {
        let fraction = format!("{millis:03}");
        text += &format!("{seconds}.{}S", fraction.trim_end_matches('0'));
    } else if seconds > 0 || ms == 0 {
        text += &format!("{seconds}S");
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(options: Value) -> Result<Value> {
        let Value::Object(map) = options else {
            unreachable!()
        };
        to_spec(map).map(|(options, _)| Value::Object(options))
    }

    #[test]
    fn camel_case_and_milliseconds_become_the_spec_form() {
        let js = json!({
            "queue": "email", "delayUntil": "2030-01-01T00:00:00Z", "timeoutMs": 0,
            "visibilityTimeoutMs": 5000,
            "retry": {"maxAttempts": 3, "initialInterval": 1500, "maxInterval": 90000,
                      "backoffCoefficient": 2, "onExhaustion": "discard", "nonRetryableErrors": ["E"]},
            "unique": {"keys": ["args"], "argsKeys": ["id"], "period": 3600000, "onConflict": "ignore"}
        });
        assert_eq!(
            spec(js).unwrap(),
            json!({
                "queue": "email", "delay_until": "2030-01-01T00:00:00Z", "timeout_ms": 0,
                "visibility_timeout_ms": 5000,
                "retry": {"max_attempts": 3, "initial_interval": "PT1.5S", "max_interval": "PT1M30S",
                          "backoff_coefficient": 2, "on_exhaustion": "discard", "non_retryable_errors": ["E"]},
                "unique": {"keys": ["args"], "args_keys": ["id"], "period": "PT1H", "on_conflict": "ignore"}
            })
        );
    }

    #[test]
    fn the_spec_form_passes_unchanged() {
        let options = json!({"delay_until": "2030-01-01T00:00:00Z",
                             "retry": {"initial_interval": "PT1M"}, "unique": {"period": "P1D"}});
        assert_eq!(spec(options.clone()).unwrap(), options);
    }

    #[test]
    fn milliseconds_are_written_in_the_largest_units() {
        for (ms, iso) in [
            (0, "PT0S"),
            (1, "PT0.001S"),
            (250, "PT0.25S"),
            (1000, "PT1S"),
            (60_000, "PT1M"),
            (3_661_001, "PT1H1M1.001S"),
            (86_400_000, "PT24H"),
        ] {
            assert_eq!(millis_to_iso(&json!(ms)).as_deref(), Some(iso), "{ms}");
        }
        for bad in [json!(-1), json!(1.5)] {
            assert_eq!(millis_to_iso(&bad), None);
        }
    }

    #[test]
    fn both_spellings_or_bad_milliseconds_are_refused_naming_the_callers_field() {
        let error = spec(json!({"timeoutMs": 1, "timeout_ms": 1})).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("options.timeoutMs"));
        assert!(error.message.contains("timeout_ms"), "{}", error.message);
        let error = spec(json!({"retry": {"initialInterval": 1.5}})).unwrap_err();
        assert_eq!(
            error.field.as_deref(),
            Some("options.retry.initialInterval")
        );
        let error = spec(json!({"unique": {"period": -5}})).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("options.unique.period"));
    }

    #[test]
    fn a_validation_error_names_the_callers_spelling() {
        let Value::Object(map) = json!({"timeoutMs": -1}) else {
            unreachable!()
        };
        let (_, renames) = to_spec(map).unwrap();
        let error = Error::field(
            ErrorCode::InvalidOptions,
            "options.timeout_ms",
            "must be an integer of at least 0, got -1",
        );
        let error = renames.caller_error(error);
        assert_eq!(error.field.as_deref(), Some("options.timeoutMs"));
        assert_eq!(
            error.message,
            "options.timeoutMs: must be an integer of at least 0, got -1"
        );
    }
}
