//! The per-source rate limit of ingress: one bucket per source named in `X-Acme-Source`
//! (`finance`, `contracts`) and one shared by every request that names no known source,
//! checked before the body is read, so a refused request costs no HMAC and never reaches
//! Redis.
//!
//! Each bucket is a token bucket of `burst` tokens refilled at `per_second`, kept in the
//! equivalent GCRA form (one "theoretical arrival time" in nanoseconds, integer arithmetic
//! only). [`Bucket::take`] is pure (the time is a parameter); [`RateLimiter`] reads the
//! monotonic clock.

use crate::facts::envelope::Source;
use std::sync::Mutex;
use std::time::Instant;

/// The default rate: far above what drills, load runs and `conform` send, so only a flood
/// trips it.
pub const DEFAULT_PER_SECOND: u32 = 10_000;

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// A rate: `per_second` requests a second on average, up to `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per second, at least 1.
    pub per_second: u32,
    /// Requests let through at once after a quiet spell, at least 1.
    pub burst: u32,
}

impl RateLimit {
    /// `per_second`, with a burst of one second's worth.
    pub fn per_second(per_second: u32) -> RateLimit {
        RateLimit {
            per_second: per_second.max(1),
            burst: per_second.max(1),
        }
    }

    /// The time one token stands for, in nanoseconds (at least 1).
    fn interval_ns(self) -> u64 {
        (NANOS_PER_SECOND / u64::from(self.per_second.max(1))).max(1)
    }
}

impl Default for RateLimit {
    fn default() -> RateLimit {
        RateLimit::per_second(DEFAULT_PER_SECOND)
    }
}

/// One token bucket in GCRA form: `tat` is the time (ns) at which the bucket would be full
/// again if nothing more were taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    tat: u64,
}

impl Bucket {
    /// Takes one token at `now` (ns on a monotonic clock): `Ok` when one was there,
    /// otherwise `Err` with the whole seconds until one will be (at least 1). A refusal
    /// takes nothing.
    pub fn take(&mut self, limit: RateLimit, now: u64) -> Result<(), u64> {
        let interval = limit.interval_ns();
        let tolerance = interval.saturating_mul(u64::from(limit.burst.max(1)) - 1);
        let tat = self.tat.max(now);
        if tat - now > tolerance {
            let wait = tat - tolerance - now;
            return Err(wait.div_ceil(NANOS_PER_SECOND).max(1));
        }
        self.tat = tat.saturating_add(interval);
        Ok(())
    }
}

/// A request refused by the rate limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limited {
    /// The bucket: a source's name, or `other` for requests that name no known source.
    pub bucket: &'static str,
    /// Whole seconds until the bucket lets one more through (`Retry-After`).
    pub retry_after: u64,
    /// The limit in force.
    pub limit: RateLimit,
}

impl Limited {
    /// The receipt's detail.
    pub fn detail(&self) -> String {
        format!(
            "bucket `{}` is over {} requests/s (burst {}); retry after {} s",
            self.bucket, self.limit.per_second, self.limit.burst, self.retry_after
        )
    }
}

/// The buckets of one ingress, or none when the limit is off.
#[derive(Debug)]
pub struct RateLimiter {
    limit: Option<RateLimit>,
    start: Instant,
    /// One bucket per source in [`Source::ALL`] order, then `other`.
    buckets: Mutex<[Bucket; 3]>,
}

impl RateLimiter {
    /// A limiter at `limit` per bucket; `None` lets everything through.
    pub fn new(limit: Option<RateLimit>) -> RateLimiter {
        RateLimiter {
            limit,
            start: Instant::now(),
            buckets: Mutex::new([Bucket::default(); 3]),
        }
    }

    /// The limit in force, if any.
    pub fn limit(&self) -> Option<RateLimit> {
        self.limit
    }

    /// Takes a token from the bucket of the `X-Acme-Source` header as sent, now.
    pub fn check(&self, source_header: Option<&str>) -> Result<(), Limited> {
        let now = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.check_at(source_header, now)
    }

    /// [`RateLimiter::check`] at `now` nanoseconds after the limiter was made.
    pub fn check_at(&self, source_header: Option<&str>, now: u64) -> Result<(), Limited> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        let (index, bucket) = bucket_of(source_header);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        buckets[index]
            .take(limit, now)
            .map_err(|retry_after| Limited {
                bucket,
                retry_after,
                limit,
            })
    }
}

/// The bucket a source header falls in: a known source's own, else the shared `other`
/// (so headers an attacker makes up cannot create buckets).
fn bucket_of(source_header: Option<&str>) -> (usize, &'static str) {
    source_header
        .and_then(Source::from_wire)
        .and_then(|source| {
            Source::ALL
                .iter()
                .position(|known| *known == source)
                .map(|index| (index, source.as_str()))
        })
        .unwrap_or((Source::ALL.len(), "other"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = NANOS_PER_SECOND;

    #[test]
    fn a_full_bucket_lets_a_burst_through_then_refuses_with_a_whole_second_wait() {
        let limit = RateLimit {
            per_second: 2,
            burst: 3,
        };
        let mut bucket = Bucket::default();
        for _ in 0..3 {
            assert_eq!(bucket.take(limit, 10 * SECOND), Ok(()));
        }
        assert_eq!(bucket.take(limit, 10 * SECOND), Err(1));
        // A refusal takes nothing: half a second later exactly one token is back.
        assert_eq!(bucket.take(limit, 10 * SECOND + SECOND / 2), Ok(()));
        assert_eq!(bucket.take(limit, 10 * SECOND + SECOND / 2), Err(1));
    }

    #[test]
    fn the_bucket_refills_at_the_rate_and_never_holds_more_than_the_burst() {
        let limit = RateLimit {
            per_second: 10,
            burst: 5,
        };
        let mut bucket = Bucket::default();
        // A long quiet spell refills only up to the burst.
        let now = 1_000 * SECOND;
        let taken = (0..20).filter(|_| bucket.take(limit, now).is_ok()).count();
        assert_eq!(taken, 5);
        // One second later, 10 more tokens would have come, but the bucket holds 5.
        let taken = (0..20)
            .filter(|_| bucket.take(limit, now + SECOND).is_ok())
            .count();
        assert_eq!(taken, 5);
        // Steady sending at the rate is never refused.
        for n in 1..=100 {
            assert_eq!(
                bucket.take(limit, now + 2 * SECOND + n * SECOND / 10),
                Ok(())
            );
        }
    }

    #[test]
    fn retry_after_counts_the_whole_seconds_until_a_token_is_back() {
        let limit = RateLimit {
            per_second: 1,
            burst: 1,
        };
        let mut bucket = Bucket::default();
        assert_eq!(bucket.take(limit, 0), Ok(()));
        assert_eq!(bucket.take(limit, 0), Err(1));
        assert_eq!(bucket.take(limit, SECOND / 4), Err(1));
        let slow = RateLimit {
            per_second: 1,
            burst: 1,
        };
        let mut drained = Bucket { tat: 5 * SECOND };
        assert_eq!(drained.take(slow, SECOND), Err(4));
        assert_eq!(drained.take(slow, SECOND + 1), Err(4), "3.99 s rounds up");
        assert_eq!(drained.take(slow, 4 * SECOND), Err(1));
        assert_eq!(drained.take(slow, 5 * SECOND), Ok(()));
    }

    #[test]
    fn each_source_has_its_own_bucket_and_unknown_names_share_one() {
        let limiter = RateLimiter::new(Some(RateLimit {
            per_second: 1,
            burst: 1,
        }));
        let at = |source| limiter.check_at(source, 7 * SECOND);
        assert_eq!(at(Some("finance")), Ok(()));
        assert_eq!(at(Some("contracts")), Ok(()));
        assert_eq!(at(Some("made-up")), Ok(()));
        let refused = at(Some("finance")).unwrap_err();
        assert_eq!(refused.bucket, "finance");
        assert_eq!(refused.retry_after, 1);
        assert!(refused
            .detail()
            .contains("bucket `finance` is over 1 requests/s"));
        assert_eq!(at(None).unwrap_err().bucket, "other");
        assert_eq!(at(Some("another")).unwrap_err().bucket, "other");
        assert_eq!(at(Some("contracts")).unwrap_err().bucket, "contracts");
        assert_eq!(limiter.check_at(Some("finance"), 8 * SECOND), Ok(()));
    }

    #[test]
    fn a_limiter_that_is_off_lets_everything_through() {
        let limiter = RateLimiter::new(None);
        for _ in 0..100_000 {
            assert_eq!(limiter.check(Some("finance")), Ok(()));
        }
    }

    #[test]
    fn very_high_rates_do_not_overflow() {
        let limit = RateLimit {
            per_second: u32::MAX,
            burst: u32::MAX,
        };
        let mut bucket = Bucket::default();
        for n in 0..1_000 {
            assert_eq!(bucket.take(limit, n), Ok(()));
        }
        assert_eq!(bucket.take(limit, u64::MAX - 1), Ok(()));
    }
}
