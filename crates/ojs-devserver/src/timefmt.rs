//! Timestamps: reading RFC 3339 `date-time` values (the job options `delay_until`,
//! `scheduled_at`, `expires_at`) into an instant, and writing the envelope's timestamps the way
//! the reference servers do (UTC, millisecond precision, `2026-02-12T10:30:00.000Z`).

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall clock, microseconds since the Unix epoch.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12; // March = 0
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Parses RFC 3339 `date-time`: `YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)`, `T`/`Z` in either
/// case, real calendar dates, no leap second. Returns the instant in microseconds since the Unix
/// epoch (digits of the fraction beyond microseconds are dropped).
pub(crate) fn parse_rfc3339_us(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let s = b.get(from..from + len)?;
        s.iter()
            .all(u8::is_ascii_digit)
            .then(|| s.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day == 0 || day > days_in_month || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut at = 19;
    let mut micros = 0;
    if b.get(at) == Some(&b'.') {
        let digits = b[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        for i in 0..6 {
            let digit = if i < digits { b[at + 1 + i] - b'0' } else { 0 };
            micros = micros * 10 + i64::from(digit);
        }
        at += 1 + digits;
    }
    let offset_seconds = match &b[at..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), ..] => {
            if b.len() != at + 6 || b[at + 3] != b':' {
                return None;
            }
            let (hours, minutes) = (num(at + 1, 2)?, num(at + 4, 2)?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let offset = hours * 3600 + minutes * 60;
            if *sign == b'+' { offset } else { -offset }
        }
        _ => return None,
    };
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
        - offset_seconds;
    Some(seconds * 1_000_000 + micros)
}

/// RFC 3339 in UTC with milliseconds, e.g. `2026-03-01T09:00:00.123Z`: the reference servers'
/// format for every timestamp they write.
pub(crate) fn format_ms(unix_us: u64) -> String {
    let seconds = unix_us / 1_000_000;
    let millis = unix_us % 1_000_000 / 1000;
    let days = (seconds / 86_400) as i64;
    let second_of_day = seconds % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's `civil_from_days`).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
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
        assert_eq!(parse_rfc3339_us("1969-12-31T23:59:59Z"), Some(-1_000_000));
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
            "tomorrow",
            "+PT5S",
            "2026-03-01",
            "2026-03-01T09:00:00",
            "2025-02-29T09:00:00Z",
            "2026-13-01T09:00:00Z",
            "2026-03-01T24:00:00Z",
            "2026-03-01T09:00:60Z",
            "2026-03-01T09:00:00.Z",
            "2026-03-01T09:00:00+0100",
            "2026-03-01T09:00:00+24:00",
            "2026-03-01 09:00:00Z",
            "2026-03-01T09:00:00Zjunk",
        ] {
            assert_eq!(parse_rfc3339_us(bad), None, "{bad}");
        }
    }
}
