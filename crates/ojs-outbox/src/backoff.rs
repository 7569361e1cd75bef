//! Retry delays: exponential from `initial`, doubled per consumed attempt, capped at `max`,
//! with "equal jitter" (half fixed, half random) so relays that failed together do not retry
//! together. Pure: the caller supplies the random fraction.

use std::time::Duration;

/// Delay before the next try after `attempt` consecutive failures (1 = first failure).
/// `random` is a fraction in `[0, 1)`.
pub fn delay(attempt: u32, initial: Duration, max: Duration, random: f64) -> Duration {
    let exponent = attempt.saturating_sub(1).min(32);
    let uncapped = initial.as_secs_f64() * f64::from(2u32).powi(exponent as i32);
    let capped = uncapped.min(max.as_secs_f64());
    let random = random.clamp(0.0, 1.0);
    Duration::from_secs_f64(capped / 2.0 + capped / 2.0 * random)
}

/// `delay` with a random fraction from the thread RNG.
pub fn jittered(attempt: u32, initial: Duration, max: Duration) -> Duration {
    delay(attempt, initial, max, rand::random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn doubles_per_attempt_within_the_jitter_band() {
        let max = Duration::from_secs(300);
        for attempt in 1..=6 {
            let full = S * 2u32.pow(attempt - 1);
            assert_eq!(
                delay(attempt, S, max, 0.0),
                full / 2,
                "lowest at attempt {attempt}"
            );
            assert_eq!(
                delay(attempt, S, max, 1.0),
                full,
                "highest at attempt {attempt}"
            );
        }
    }

    #[test]
    fn never_exceeds_the_cap() {
        let max = Duration::from_secs(300);
        for attempt in [9, 10, 20, 64, u32::MAX] {
            let d = delay(attempt, S, max, 0.999);
            assert!(d <= max, "attempt {attempt}: {d:?}");
            assert!(d >= max / 2, "attempt {attempt}: {d:?}");
        }
    }

    #[test]
    fn jitter_spreads_delays() {
        let max = Duration::from_secs(300);
        let samples: std::collections::HashSet<u128> =
            (0..50).map(|_| jittered(4, S, max).as_micros()).collect();
        assert!(
            samples.len() > 10,
            "jitter produced only {} distinct delays",
            samples.len()
        );
        assert!(
            samples
                .iter()
                .all(|&us| (4_000_000..=8_000_000).contains(&us))
        );
    }
}
