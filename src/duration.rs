//! Go-style duration strings ("30s", "1m30s", "500ms", "2h"), as scripts write them.

use std::time::Duration;

/// A duration string that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (expected e.g. \"30s\", \"1m30s\", \"500ms\")")]
pub struct Error {
    pub input: String,
    pub reason: &'static str,
}

/// Whole milliseconds of `d`, for logs and metrics (saturating: no duration here
/// comes near 584 million years).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Parses a duration such as `"1h2m3.5s"`. Units: ns, us, ms, s, m, h.
///
/// # Errors
/// Empty input, a missing or unknown unit, a negative value, or an overflow.
pub fn parse(input: &str) -> Result<Duration, Error> {
    let err = |reason| Error {
        input: input.to_owned(),
        reason,
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') {
        return Err(err("negative durations are not allowed"));
    }
    let mut total = 0f64;
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(err("expected a number"));
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| err("bad number"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(err("missing unit")),
            _ => return Err(err("unknown unit")),
        };
        rest = &rest[unit_len..];
        total += value * secs;
    }
    Duration::try_from_secs_f64(total).map_err(|_| err("out of range"))
}

/// `period` plus a random part of up to `factor` times it, like client-go's
/// `wait.Jitter`: spreads retries that would otherwise all come back at once.
pub fn jittered(period: Duration, factor: f64) -> Duration {
    use std::hash::BuildHasher;
    // RandomState is seeded from the OS: good enough randomness without a dependency.
    let bits =
        std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now());
    let fraction = (bits >> 11) as f64 / (1u64 << 53) as f64;
    period + period.mul_f64(factor * fraction)
}

/// Formats a duration the way `parse` reads it back, e.g. `1m30s`.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_style_durations() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_mins(90)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_bad_input_with_a_reason() {
        for bad in ["", "10", "s", "5x", "-1s", "1..2s", "1e400h"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(parse("10").unwrap_err().reason, "missing unit");
    }

    #[test]
    fn formats_round_trip() {
        for d in [1, 59, 60, 90, 3600, 3661] {
            let d = Duration::from_secs(d);
            assert_eq!(parse(&format(d)), Ok(d));
        }
    }
}
