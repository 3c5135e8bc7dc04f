//! When `retry` tries again: how many attempts, the delay before each retry (fixed, or
//! doubling up to a cap), its jitter, and the overall timeout.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use crate::script::builtins::time::duration_nanos;
use starlark::values::Value;

/// A retry argument that does not make sense.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("max_attempts must be at least 1, got {0}")]
    Attempts(i32),
    #[error("{name}: {reason}")]
    Duration { name: &'static str, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a `retry` call retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub attempts: u32,
    /// The delay before the first retry.
    pub delay: Duration,
    /// With backoff, the delay doubles after each retry up to this cap.
    pub max_delay: Option<Duration>,
    /// Spread each delay by up to a quarter either way, so that many callers that
    /// failed together do not retry together.
    pub jitter: bool,
    /// The time all attempts together may take.
    pub timeout: Option<Duration>,
}

/// A non-negative duration argument (a string such as "1s" or a duration).
///
/// # Errors
/// A bad or negative duration, naming the argument.
pub fn duration(name: &'static str, value: Value) -> Result<Duration> {
    let fail = |reason: String| Error::Duration { name, reason };
    let nanos = duration_nanos(value).map_err(|e| fail(e.to_string()))?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| fail("must not be negative".to_owned()))
}

/// The timeout argument: "" (or None) for none.
///
/// # Errors
/// As [`duration`].
pub fn timeout(value: Value) -> Result<Option<Duration>> {
    if value.is_none() || value.unpack_str() == Some("") {
        return Ok(None);
    }
    duration("timeout", value).map(Some)
}

/// The attempts argument.
///
/// # Errors
/// Fewer than one attempt.
pub fn attempts(n: i32) -> Result<u32> {
    u32::try_from(n)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or(Error::Attempts(n))
}

/// A number in [0, 1) that differs from call to call: std's per-process random hash
/// keys, with a counter that changes per hasher, are random enough for jitter.
fn unit_random() -> f64 {
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    #[expect(clippy::cast_precision_loss, reason = "53 random bits are plenty")]
    let unit = (bits >> 11) as f64 / (1u64 << 53) as f64;
    unit
}

impl Policy {
    /// The delay before retry number `retry` (0 for the first).
    pub fn delay_before(&self, retry: u32) -> Duration {
        let base = match self.max_delay {
            Some(cap) => {
                let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
                self.delay.saturating_mul(factor).min(cap)
            }
            None => self.delay,
        };
        if self.jitter {
            base.mul_f64(0.75 + unit_random() / 2.0)
        } else {
            base
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_delay: Option<u64>, jitter: bool) -> Policy {
        Policy {
            attempts: 5,
            delay: Duration::from_millis(500),
            max_delay: max_delay.map(Duration::from_secs),
            jitter,
            timeout: None,
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = policy(Some(3), false);
        let delays: Vec<u128> = (0..5).map(|r| p.delay_before(r).as_millis()).collect();
        assert_eq!(delays, [500, 1000, 2000, 3000, 3000]);
        assert_eq!(p.delay_before(1000), Duration::from_secs(3));
        let fixed = policy(None, false);
        assert_eq!(fixed.delay_before(4), Duration::from_millis(500));
    }

    #[test]
    fn jitter_stays_within_a_quarter() {
        let p = policy(None, true);
        for _ in 0..100 {
            let d = p.delay_before(0).as_millis();
            assert!((375..=625).contains(&d), "{d}");
        }
    }

    #[test]
    fn rejects_nonsense() {
        assert!(matches!(attempts(0), Err(Error::Attempts(0))));
        assert_eq!(attempts(3).unwrap(), 3);
    }
}
