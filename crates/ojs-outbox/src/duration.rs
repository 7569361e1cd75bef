//! ISO-8601 durations (`PT1S`, `PT0.5S`, `PT5M`, `P1D`, `P1DT2H`), the form OJS uses for every
//! interval. One reader of the designator grammar, three rules on top of it:
//!
//! - [`parse`]: the adapter's own settings. Weeks, days, hours, minutes, seconds; a decimal
//!   fraction only on the last component (ISO 8601); years and months are refused, their length
//!   is not fixed.
//! - [`parse_retry_interval`]: `options.retry.initial_interval` and `.max_interval`, as the
//!   reference servers read them (`^PT(\d+H)?(\d+M)?(\d+(\.\d+)?S)?$`, not zero). The retry-policy
//!   schema would also allow days, months and years, but both reference servers refuse them with
//!   a 400, so a job carrying one could never be delivered.
//! - [`check_unique_period`]: `options.unique.period`, by the unique-policy schema: years,
//!   months, weeks, days, hours, minutes, seconds, a fraction only on seconds.
//!
//! Every rule wants the designators in their ISO order (`Y M W D T H M S`), each at most once,
//! ASCII digits, at least one component, and a `T` only when a time component follows it.

use std::time::Duration;

/// One `<number><designator>` of a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Component<'a> {
    /// `Y`, `M` (months), `W`, `D` before the `T`; `h`, `m`, `s` after it, so that months and
    /// minutes stay apart.
    unit: char,
    whole: &'a str,
    fraction: Option<&'a str>,
}

const DATE_UNITS: [char; 4] = ['Y', 'M', 'W', 'D'];
const TIME_UNITS: [char; 3] = ['H', 'M', 'S'];

fn unit_name(unit: char) -> &'static str {
    match unit {
        'Y' => "years",
        'M' => "months",
        'W' => "weeks",
        'D' => "days",
        'h' => "hours",
        'm' => "minutes",
        _ => "seconds",
    }
}

/// Splits a duration into its components, checking the grammar every rule shares.
fn components(text: &str) -> Result<Vec<Component<'_>>, String> {
    let not_iso = || format!("{text:?} is not an ISO-8601 duration (expected e.g. \"PT1S\")");
    let rest = text.strip_prefix('P').ok_or_else(not_iso)?;
    let (date, time) = match rest.split_once('T') {
        Some((date, time)) => (date, Some(time)),
        None => (rest, None),
    };
    let mut out = Vec::new();
    read_part(text, date, &DATE_UNITS, false, &mut out)?;
    if let Some(time) = time {
        if time.is_empty() {
            return Err(format!(
                "{text:?}: a \"T\" must be followed by hours, minutes or seconds"
            ));
        }
        read_part(text, time, &TIME_UNITS, true, &mut out)?;
    }
    if out.is_empty() {
        return Err(format!("{text:?} has no components"));
    }
    Ok(out)
}

fn read_part<'a>(
    text: &str,
    part: &'a str,
    units: &[char],
    in_time: bool,
    out: &mut Vec<Component<'a>>,
) -> Result<(), String> {
    let mut next_unit = 0; // index into `units` of the earliest designator still allowed
    let mut rest = part;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{text:?}: a number lacks its unit"))?;
        let (number, after) = rest.split_at(digits_end);
        let designator = after.chars().next().unwrap_or_default();
        rest = &after[designator.len_utf8()..];
        let (whole, fraction) = match number.split_once('.') {
            Some((whole, fraction)) => (whole, Some(fraction)),
            None => (number, None),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || !fraction.is_none_or(digits) {
            return Err(format!(
                "{text:?}: {designator:?} must follow a number such as 5 or 1.5"
            ));
        }
        let position = units[next_unit.min(units.len())..]
            .iter()
            .position(|&u| u == designator)
            .map(|p| p + next_unit);
        let Some(position) = position else {
            return Err(if units.contains(&designator) {
                format!(
                    "{text:?}: components must appear once each, in the order {}",
                    if in_time { "H, M, S" } else { "Y, M, W, D" }
                )
            } else if !in_time && TIME_UNITS.contains(&designator) && designator != 'M' {
                format!("{text:?}: hours and seconds come after a \"T\" (e.g. \"PT1H\")")
            } else {
                format!("{text:?}: unexpected {designator:?}")
            });
        };
        next_unit = position + 1;
        let unit = if in_time {
            designator.to_ascii_lowercase()
        } else {
            designator
        };
        out.push(Component {
            unit,
            whole,
            fraction,
        });
    }
    Ok(())
}

fn milliseconds(unit: char) -> f64 {
    match unit {
        'W' => 7.0 * 86_400_000.0,
        'D' => 86_400_000.0,
        'h' => 3_600_000.0,
        'm' => 60_000.0,
        _ => 1_000.0,
    }
}

fn total(text: &str, components: &[Component<'_>]) -> Result<Duration, String> {
    let mut total_ms = 0.0;
    for c in components {
        let number: f64 = match c.fraction {
            Some(fraction) => format!("{}.{fraction}", c.whole).parse(),
            None => c.whole.parse(),
        }
        .map_err(|_| format!("{text:?}: {} is not a number", c.whole))?;
        total_ms += number * milliseconds(c.unit);
    }
    if !total_ms.is_finite() || total_ms > 1e15 {
        return Err(format!("{text:?} is too long"));
    }
    Ok(Duration::from_micros((total_ms * 1000.0).round() as u64))
}

/// Parses a duration of the adapter's settings. Returns a short reason on failure.
pub fn parse(text: &str) -> Result<Duration, String> {
    let components = components(text)?;
    if components.iter().any(|c| matches!(c.unit, 'Y' | 'M')) {
        return Err(format!(
            "{text:?}: years and months have no fixed length; use days"
        ));
    }
    if let Some(i) = components.iter().position(|c| c.fraction.is_some())
        && i + 1 != components.len()
    {
        return Err(format!(
            "{text:?}: only the last component may have a fraction"
        ));
    }
    total(text, &components)
}

/// Parses `options.retry.initial_interval` or `.max_interval` by the rule of the reference
/// servers: hours, minutes and seconds only, a fraction only on seconds, not zero.
pub fn parse_retry_interval(text: &str) -> Result<Duration, String> {
    let components = components(text)?;
    if let Some(c) = components
        .iter()
        .find(|c| matches!(c.unit, 'Y' | 'M' | 'W' | 'D'))
    {
        return Err(format!(
            "{text:?}: OJS servers accept only hours, minutes and seconds here (e.g. \"PT1H\"), not {}",
            unit_name(c.unit)
        ));
    }
    fraction_only_on_seconds(text, &components)?;
    let duration = total(text, &components)?;
    if duration.is_zero() {
        return Err(format!("{text:?}: OJS servers refuse a zero interval"));
    }
    Ok(duration)
}

/// Checks `options.unique.period` by the unique-policy schema: any of years, months, weeks,
/// days, hours, minutes, seconds, a fraction only on seconds.
pub fn check_unique_period(text: &str) -> Result<(), String> {
    let components = components(text)?;
    fraction_only_on_seconds(text, &components)?;
    Ok(())
}

fn fraction_only_on_seconds(text: &str, components: &[Component]) -> Result<(), String> {
    match components
        .iter()
        .find(|c| c.fraction.is_some() && c.unit != 's')
    {
        Some(c) => Err(format!(
            "{text:?}: only seconds may have a fraction, not {}",
            unit_name(c.unit)
        )),
        None => Ok(()),
    }
}

/// Formats a duration as ISO-8601 seconds (`PT1.5S`), the inverse of `parse` for display.
pub fn format(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms.is_multiple_of(1000) {
        format!("PT{}S", ms / 1000)
    } else {
        format!("PT{}.{:03}S", ms / 1000, ms % 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_ojs_uses() {
        assert_eq!(parse("PT1S").unwrap(), Duration::from_secs(1));
        assert_eq!(parse("PT0.2S").unwrap(), Duration::from_millis(200));
        assert_eq!(parse("PT5M").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("PT24H").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse("P1DT1H").unwrap(), Duration::from_secs(90_000));
        assert_eq!(parse("P1W").unwrap(), Duration::from_secs(604_800));
        assert_eq!(parse("PT0S").unwrap(), Duration::ZERO);
        assert_eq!(parse("PT1.5M").unwrap(), Duration::from_secs(90));
    }

    #[test]
    fn refuses_what_is_not_a_fixed_duration() {
        for bad in [
            "",
            "1S",
            "P",
            "PT",
            "PT1",
            "P1M",
            "P1Y",
            "PTS",
            "PT1X",
            "PT1.2.3S",
            "pt1s",
            "PT5S1M",
            "PT1S1S",
            "P1DT",
            "P1H",
            "PT.5S",
            "PT1.S",
            "PT1.5M30S",
            " PT1S",
            "PT1S ",
            "PT-5S",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn retry_intervals_follow_the_reference_servers() {
        assert_eq!(
            parse_retry_interval("PT1H30M45S").unwrap(),
            Duration::from_secs(5445)
        );
        assert_eq!(
            parse_retry_interval("PT0.001S").unwrap(),
            Duration::from_millis(1)
        );
        assert_eq!(
            parse_retry_interval("PT120M").unwrap(),
            Duration::from_secs(7200)
        );
        for bad in [
            "P1D", "P1DT1H", "P1W", "P1Y", "P1M", "PT0S", "PT0H0M0S", "PT1.5M", "PT5S1M", "PT",
        ] {
            assert!(
                parse_retry_interval(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn unique_periods_follow_the_schema() {
        for ok in [
            "P1Y",
            "P1M",
            "P1Y2M3W4DT5H6M7.5S",
            "PT1H",
            "P1D",
            "PT0S",
            "P2W",
        ] {
            assert!(check_unique_period(ok).is_ok(), "{ok:?} should be accepted");
        }
        for bad in [
            "P", "PT", "P1DT", "PT1.5M", "P1.5D", "PT5S1M", "P1D1Y", "P1M1M", "1D", "p1d", "P1H",
        ] {
            assert!(
                check_unique_period(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn format_round_trips() {
        for ms in [0u64, 1, 200, 1000, 1500, 86_400_000] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse(&format(d)).unwrap(), d);
        }
    }
}
