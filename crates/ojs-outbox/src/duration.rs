//! ISO-8601 durations (`PT1S`, `PT0.5S`, `PT5M`, `P1D`, `P1DT2H`), the form OJS uses for every
//! interval. Years and months are refused: their length is not fixed.

use std::time::Duration;

/// Parses an ISO-8601 duration. Returns a short reason on failure.
pub fn parse(text: &str) -> Result<Duration, String> {
    let rest = text
        .strip_prefix('P')
        .ok_or_else(|| format!("{text:?} is not an ISO-8601 duration (expected e.g. \"PT1S\")"))?;
    if rest.is_empty() || rest == "T" {
        return Err(format!("{text:?} has no components"));
    }
    let mut total_ms: f64 = 0.0;
    let mut in_time = false;
    let mut number = String::new();
    let mut seen_component = false;
    for ch in rest.chars() {
        match ch {
            'T' if !in_time && number.is_empty() => in_time = true,
            '0'..='9' | '.' => number.push(ch),
            unit => {
                let value: f64 = number
                    .parse()
                    .map_err(|_| format!("{text:?}: a number must precede {unit:?}"))?;
                let unit_ms = match (in_time, unit) {
                    (false, 'W') => 7.0 * 86_400_000.0,
                    (false, 'D') => 86_400_000.0,
                    (true, 'H') => 3_600_000.0,
                    (true, 'M') => 60_000.0,
                    (true, 'S') => 1_000.0,
                    (false, 'Y') | (false, 'M') => {
                        return Err(format!(
                            "{text:?}: years and months have no fixed length; use days"
                        ));
                    }
                    _ => return Err(format!("{text:?}: unexpected {unit:?}")),
                };
                total_ms += value * unit_ms;
                number.clear();
                seen_component = true;
            }
        }
    }
    if !number.is_empty() || !seen_component {
        return Err(format!("{text:?}: a number lacks its unit"));
    }
    if !total_ms.is_finite() || total_ms > 1e15 {
        return Err(format!("{text:?} is too long"));
    }
    Ok(Duration::from_micros((total_ms * 1000.0).round() as u64))
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
    }

    #[test]
    fn refuses_what_is_not_a_fixed_duration() {
        for bad in [
            "", "1S", "P", "PT", "PT1", "P1M", "P1Y", "PTS", "PT1X", "PT1.2.3S", "pt1s",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
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
