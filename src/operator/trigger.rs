//! How the operator's watches feed its reconciler: watch calls that end before the
//! client's read timeout, and a short backoff after a watch error.
//!
//! kube-runtime merges every watch of a `Controller` into one trigger stream and applies
//! one backoff to the whole of it: an error in any watch (a ConfigMap watch, say) pauses
//! the events of all of them, StarlarkController deletions included. Two rules keep that
//! pause rare and short:
//! - each watch call ends cleanly after [`WATCH_TIMEOUT_SECS`], so a quiet watch (no
//!   generated Role changes for minutes) is never cut by the client's
//!   [`READ_TIMEOUT`] as if the connection were dead, which is an error;
//! - after a real error the pause is at most [`MAX_PAUSE`], not kube-runtime's 30 s.
//!
//! [`READ_TIMEOUT`]: crate::k8s::session::READ_TIMEOUT

use std::time::Duration;

use kube::runtime::utils::Backoff;
use kube::runtime::watcher;

use crate::k8s::session::WATCH_TIMEOUT_SECS;

/// The first pause after a watch error.
const FIRST_PAUSE: Duration = Duration::from_millis(500);
/// The longest pause of every trigger after watch errors in a row.
pub const MAX_PAUSE: Duration = Duration::from_secs(5);

/// A watch configuration whose calls end before the client's read timeout.
pub fn watch_config() -> watcher::Config {
    watcher::Config::default().timeout(WATCH_TIMEOUT_SECS)
}

/// Doubles from 500 ms to [`MAX_PAUSE`]; any event resets it.
#[derive(Debug, Default)]
pub struct TriggerBackoff {
    next: Option<Duration>,
}

impl Iterator for TriggerBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let pause = self.next.unwrap_or(FIRST_PAUSE);
        self.next = Some((pause * 2).min(MAX_PAUSE));
        Some(pause)
    }
}

impl Backoff for TriggerBackoff {
    fn reset(&mut self) {
        self.next = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::session::READ_TIMEOUT;

    #[test]
    fn pauses_double_up_to_the_cap_and_reset() {
        let mut b = TriggerBackoff::default();
        let first: Vec<_> = (&mut b).take(6).map(|d| d.as_millis()).collect();
        assert_eq!(first, [500, 1000, 2000, 4000, 5000, 5000]);
        b.reset();
        assert_eq!(b.next(), Some(FIRST_PAUSE));
    }

    #[test]
    fn watch_calls_end_before_the_read_timeout() {
        let secs = watch_config().timeout.expect("a watch timeout");
        assert!(Duration::from_secs(secs.into()) < READ_TIMEOUT);
    }
}
