//! The hot queue's overflow, told once per burst (seed 001 §14.4: a WARNING when the hot queue
//! drops; §16.2). A full queue drops ids at the rate of the commits, so a line per id would
//! bury the log: the first drop after a quiet period is told with the count so far, a busy
//! period again at most every [`HOT_DROP_TELL_EVERY`] with the count since, and its end (no
//! drop for [`HOT_DROP_TELL_EVERY`]) with the burst's total. Pure: the caller passes the time
//! (`relay.rs` keeps one behind a lock, taken only when ids are dropped or a burst may end).

use std::time::{Duration, Instant};

/// At most one warning this often while ids are dropped; a burst ends after this long without
/// a drop.
pub(crate) const HOT_DROP_TELL_EVERY: Duration = Duration::from_secs(10);

/// What to tell about the hot queue's drops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Notice {
    /// The first drop after a quiet period: `dropped` ids so far.
    Started { dropped: u64 },
    /// Still dropping: `since` ids since the last warning, `dropped` since the burst began,
    /// `lasted` ago.
    Continuing {
        since: u64,
        dropped: u64,
        lasted: Duration,
    },
    /// No drop for `HOT_DROP_TELL_EVERY`: the burst dropped `dropped` ids over `lasted` (its
    /// first drop to its last).
    Ended { dropped: u64, lasted: Duration },
}

#[derive(Debug, Default)]
pub(crate) struct HotDrops {
    burst: Option<Burst>,
}

#[derive(Debug)]
struct Burst {
    started: Instant,
    last_drop: Instant,
    last_told: Instant,
    dropped: u64,
    /// `dropped` when the last warning was told.
    told: u64,
}

impl HotDrops {
    /// `count` ids were just dropped: what to tell now (an ended burst first, if it had).
    pub(crate) fn dropped(&mut self, count: u64, now: Instant) -> Vec<Notice> {
        let mut notices: Vec<Notice> = self.quiet(now).into_iter().collect();
        match &mut self.burst {
            None => {
                self.burst = Some(Burst {
                    started: now,
                    last_drop: now,
                    last_told: now,
                    dropped: count,
                    told: count,
                });
                notices.push(Notice::Started { dropped: count });
            }
            Some(burst) => {
                burst.dropped += count;
                burst.last_drop = now;
                if now.saturating_duration_since(burst.last_told) >= HOT_DROP_TELL_EVERY {
                    notices.push(Notice::Continuing {
                        since: burst.dropped - burst.told,
                        dropped: burst.dropped,
                        lasted: now.saturating_duration_since(burst.started),
                    });
                    burst.last_told = now;
                    burst.told = burst.dropped;
                }
            }
        }
        notices
    }

    /// The end of the burst, once no id was dropped for `HOT_DROP_TELL_EVERY`.
    pub(crate) fn quiet(&mut self, now: Instant) -> Option<Notice> {
        let burst = self.burst.as_ref()?;
        if now.saturating_duration_since(burst.last_drop) < HOT_DROP_TELL_EVERY {
            return None;
        }
        let burst = self.burst.take()?;
        Some(Notice::Ended {
            dropped: burst.dropped,
            lasted: burst.last_drop.saturating_duration_since(burst.started),
        })
    }

    /// Ids are being dropped (a burst has not ended).
    pub(crate) fn in_burst(&self) -> bool {
        self.burst.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_told_when_it_starts_at_most_every_interval_and_when_it_ends() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut drops = HotDrops::default();
        assert_eq!(drops.quiet(at(0)), None);
        assert_eq!(
            drops.dropped(3, at(0)),
            vec![Notice::Started { dropped: 3 }]
        );
        assert!(drops.in_burst());
        // Every id for 9.9 s: nothing more.
        for ms in (100..10_000).step_by(100) {
            assert_eq!(drops.dropped(1, at(ms)), vec![], "at {ms} ms");
        }
        assert_eq!(drops.quiet(at(9_950)), None);
        assert_eq!(
            drops.dropped(1, at(10_000)),
            vec![Notice::Continuing {
                since: 100,
                dropped: 103,
                lasted: Duration::from_secs(10),
            }]
        );
        assert_eq!(drops.dropped(1, at(12_000)), vec![]);
        // Quiet for 10 s after the last drop: the end, once.
        assert_eq!(drops.quiet(at(21_999)), None);
        assert_eq!(
            drops.quiet(at(22_000)),
            Some(Notice::Ended {
                dropped: 104,
                lasted: Duration::from_secs(12),
            })
        );
        assert!(!drops.in_burst());
        assert_eq!(drops.quiet(at(30_000)), None);
        // A new burst is told again.
        assert_eq!(
            drops.dropped(2, at(40_000)),
            vec![Notice::Started { dropped: 2 }]
        );
    }

    #[test]
    fn a_drop_after_an_untold_end_tells_the_end_first() {
        let t0 = Instant::now();
        let mut drops = HotDrops::default();
        drops.dropped(1, t0);
        let later = t0 + Duration::from_secs(60);
        assert_eq!(
            drops.dropped(5, later),
            vec![
                Notice::Ended {
                    dropped: 1,
                    lasted: Duration::ZERO,
                },
                Notice::Started { dropped: 5 },
            ]
        );
    }
}
