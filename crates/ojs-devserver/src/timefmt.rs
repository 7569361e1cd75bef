//! Timestamps: reading RFC 3339 `date-time` values (the job options `delay_until`,
//! `scheduled_at`, `expires_at`, the event stream's `?since=`) into an instant, and writing the
//! envelope's timestamps the way the reference servers do (UTC, millisecond precision,
//! `2026-02-12T10:30:00.000Z`).
//!
//! The `time` crate does the reading and the calendar. This module adds only the two rules of
//! docs/ojs-compat.md that its RFC 3339 parser is more lenient about: `time` accepts any byte
//! between date and time (RFC 3339 §5.6's note allows "say, a space"), and a leap second
//! (`:60`) at the end of a UTC month. The devserver refuses both, as the Go reference servers'
//! `time.RFC3339` does; `T` and `Z` may be lowercase (RFC 3339 §5.6).

use std::time::{SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;
use time::format_description::BorrowedFormatItem;
use time::format_description::well_known::Rfc3339;
use time::macros::{datetime, format_description};

/// The reference servers' timestamp layout (Go: `2006-01-02T15:04:05.000Z`).
const UTC_MILLIS: &[BorrowedFormatItem<'_>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// Wall clock, microseconds since the Unix epoch.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Parses RFC 3339 `date-time`: `YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)`, `T`/`Z` in either
/// case, real calendar dates, no leap second. Returns the instant in microseconds since the Unix
/// epoch (digits of the fraction beyond microseconds are dropped).
pub(crate) fn parse_rfc3339_us(text: &str) -> Option<i64> {
    if !matches!(text.as_bytes().get(10), Some(b'T' | b't')) || text.get(17..19) == Some("60") {
        return None;
    }
    let at = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos().div_euclid(1000)).ok()
}

/// RFC 3339 in UTC with milliseconds, e.g. `2026-03-01T09:00:00.123Z`: the reference servers'
/// format for every timestamp they write. Sub-millisecond digits are cut, not rounded; an
/// instant past year 9999 (never a wall-clock time) is written as the last millisecond of 9999.
pub(crate) fn format_ms(unix_us: u64) -> String {
    let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_us) * 1000)
        .unwrap_or(datetime!(9999-12-31 23:59:59.999 UTC));
    at.format(UTC_MILLIS)
        .expect("a UTC date-time with a four-digit year formats")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_with_milliseconds() {
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000Z");
        // 2024-02-29T12:34:56.789012Z (a leap day): the microseconds are cut, not rounded.
        assert_eq!(format_ms(1_709_210_096_789_912), "2024-02-29T12:34:56.789Z");
        assert_eq!(format_ms(1_767_225_599_000_001), "2025-12-31T23:59:59.000Z");
        assert_eq!(format_ms(u64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn parses_rfc3339_into_an_instant() {
        assert_eq!(parse_rfc3339_us("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_us("2024-02-29T12:34:56.789912Z"),
            Some(1_709_210_096_789_912)
        );
        assert_eq!(
            parse_rfc3339_us("2024-02-29T13:34:56.7899129+01:00"),
            Some(1_709_210_096_789_912),
            "offsets are applied, digits beyond microseconds dropped"
        );
        assert_eq!(
            parse_rfc3339_us("2024-02-29t07:04:56.5-05:30"),
            Some(1_709_210_096_500_000)
        );
        assert_eq!(
            parse_rfc3339_us("2024-02-29T12:34:56z"),
            Some(1_709_210_096_000_000)
        );
        assert_eq!(
            parse_rfc3339_us("2024-02-29T12:34:56.123456789123Z"),
            Some(1_709_210_096_123_456),
            "more digits than nanoseconds"
        );
        assert_eq!(parse_rfc3339_us("1969-12-31T23:59:59Z"), Some(-1_000_000));
        assert_eq!(
            parse_rfc3339_us("1969-12-31T23:59:59.9999999Z"),
            Some(-1),
            "before the epoch the fraction is still dropped toward the earlier microsecond"
        );
        for (text, ms) in [
            ("2026-03-01T09:00:00Z", 1_772_355_600_000_i64),
            ("2000-03-01T00:00:00Z", 951_868_800_000),
        ] {
            assert_eq!(parse_rfc3339_us(text), Some(ms * 1000), "{text}");
            assert_eq!(format_ms(ms as u64 * 1000).replace(".000", ""), text);
        }
    }

    #[test]
    fn refuses_what_is_not_rfc3339() {
        for bad in [
            "",
            "tomorrow",
            "+PT5S",
            "2026-03-01",
            "2026-03-01T09:00:00",
            "2025-02-29T09:00:00Z",
            "2026-13-01T09:00:00Z",
            "2026-03-01T24:00:00Z",
            "2026-03-01T09:00:60Z",
            // A real leap second, which `time` alone would accept.
            "2016-12-31T23:59:60Z",
            "2026-03-01T09:00:00.Z",
            "2026-03-01T09:00:00+0100",
            "2026-03-01T09:00:00+24:00",
            "2026-03-01T09:00:00+01:60",
            // Separators other than `T`, which `time` alone would accept.
            "2026-03-01 09:00:00Z",
            "2026-03-01X09:00:00Z",
            "2026-03-01T09:00:00Zjunk",
            "2026-03-01T09:00:00+01:00junk",
        ] {
            assert_eq!(parse_rfc3339_us(bad), None, "{bad}");
        }
    }
}
