//! Following a log (`k8s.logs_follow`): a task on the runtime reads the stream and hands
//! lines to the script thread through a bounded channel, so no worker thread blocks on
//! the script and a slow handler slows the read instead of buffering without end.
//!
//! kite's client closes a read that has been silent for `session::READ_TIMEOUT`, and a
//! quiet container is silent; the task then reconnects from the last line's timestamp
//! (the stream is asked for timestamps) and drops the lines it already delivered.

use std::time::Duration;

use futures::AsyncBufReadExt;
use jiff::Timestamp;
use tokio::sync::mpsc;

use super::{Error, LogOptions, Result};
use crate::k8s::exec::describe;
use crate::k8s::pods::PodRef;

/// Lines read ahead of the handler.
const BUFFER: usize = 256;
/// Reconnecting in a row without a successful connection gives up after this many.
const MAX_RECONNECTS: u32 = 3;
/// The pause before reconnecting a stream that delivered nothing, so a stream that
/// opens and breaks at once does not spin.
const BACKOFF: Duration = Duration::from_secs(1);

/// A followed log; dropping it stops the reading task.
pub struct Follow {
    rx: mpsc::Receiver<Result<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Follow {
    /// Starts following the log of `pod` on `runtime`.
    pub fn start(runtime: &tokio::runtime::Handle, pod: PodRef, opts: LogOptions) -> Self {
        let (tx, rx) = mpsc::channel(BUFFER);
        let task = runtime.spawn(pump(pod, opts, tx));
        Self { rx, task }
    }

    /// The next line; None once the container's log ended (it stopped, or the pod went).
    ///
    /// # Errors
    /// The stream could not be opened, or kept breaking.
    pub async fn next(&mut self) -> Option<Result<String>> {
        self.rx.recv().await
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(pod: PodRef, opts: LogOptions, tx: mpsc::Sender<Result<String>>) {
    let fail = |message: String| {
        Err(Error::Follow {
            target: pod.display(),
            message,
        })
    };
    let mut position = Position::default();
    let mut failures = 0;
    let mut connected_once = false;
    loop {
        let mut params = opts.params(&pod.container);
        params.follow = true;
        params.timestamps = true;
        if let Some(from) = position.resume() {
            params.tail_lines = None;
            params.since_seconds = None;
            params.since_time = Some(from);
        }
        let stream = match pod.api.log_stream(&pod.name, &params).await {
            Ok(s) => s,
            // The pod went away while followed: its log has ended.
            Err(kube::Error::Api(s)) if connected_once && s.code == 404 => return,
            Err(_) if connected_once && failures < MAX_RECONNECTS => {
                failures += 1;
                tokio::time::sleep(BACKOFF).await;
                continue;
            }
            Err(e) => {
                let _ = tx.send(fail(describe(&e))).await;
                return;
            }
        };
        if !connected_once {
            connected_once = true;
            position.started = Some(Timestamp::now());
        }
        failures = 0;
        let mut stream = std::pin::pin!(stream);
        let mut delivered = false;
        loop {
            match next_line(&mut stream).await {
                // The kubelet ends a followed stream when the container stops.
                None => return,
                Some(Ok(line)) => {
                    let Some(text) = position.take(&line) else {
                        continue;
                    };
                    delivered = true;
                    if tx.send(Ok(text)).await.is_err() {
                        return;
                    }
                }
                // Idled out or dropped: reconnect from where it got to.
                Some(Err(_)) => break,
            }
        }
        if !delivered {
            tokio::time::sleep(BACKOFF).await;
        }
    }
}

/// The longest line delivered whole; the rest of a longer one is dropped, so a pod that
/// writes without newlines cannot grow a buffer on the async runtime without bound.
const MAX_LINE: u64 = 64 * 1024;

/// The next line of `reader` (without its newline), at most [`MAX_LINE`] bytes of it;
/// None at the end.
async fn next_line<R: futures::AsyncBufRead + Unpin>(
    reader: &mut R,
) -> Option<std::io::Result<String>> {
    use futures::AsyncReadExt;
    let mut buf = Vec::new();
    match (&mut *reader)
        .take(MAX_LINE)
        .read_until(b'\n', &mut buf)
        .await
    {
        Err(e) => return Some(Err(e)),
        Ok(0) => return None,
        Ok(_) => {}
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
    } else if buf.len() as u64 == MAX_LINE {
        // Skip to the end of the overlong line, holding at most MAX_LINE at a time.
        loop {
            let mut rest = Vec::new();
            match (&mut *reader)
                .take(MAX_LINE)
                .read_until(b'\n', &mut rest)
                .await
            {
                Ok(0) => break,
                Ok(_) if rest.last() == Some(&b'\n') => break,
                Ok(_) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
    Some(Ok(String::from_utf8_lossy(&buf).into_owned()))
}

/// Where a followed stream got to: the last delivered line's timestamp and how many
/// delivered lines carried it (the API resumes from a whole second, inclusive).
#[derive(Debug, Default)]
struct Position {
    started: Option<Timestamp>,
    /// Set once reconnected: lines older than the resume point were delivered.
    resumed: bool,
    last: Option<Timestamp>,
    at_last: usize,
    skip: usize,
}

impl Position {
    /// Where a reconnection starts (whole seconds, rounded down); before any line, the
    /// first connection's time, so that `tail=` lines are not delivered twice.
    fn resume(&mut self) -> Option<Timestamp> {
        let from = self.last.or(self.started)?;
        self.resumed = true;
        self.skip = if self.last.is_some() { self.at_last } else { 0 };
        Timestamp::from_second(from.as_second()).ok()
    }

    /// The text of a `<RFC 3339 timestamp> <text>` line if it was not delivered before.
    fn take(&mut self, line: &str) -> Option<String> {
        let Some((ts, text)) = line
            .split_once(' ')
            .and_then(|(ts, text)| Some((ts.parse::<Timestamp>().ok()?, text)))
        else {
            // No timestamp to place it by: deliver it as it is.
            return Some(line.to_owned());
        };
        let floor = self.last.or(self.started).filter(|_| self.resumed);
        if floor.is_some_and(|f| ts < f) {
            return None;
        }
        if Some(ts) == self.last {
            if self.skip > 0 {
                self.skip -= 1;
                return None;
            }
            self.at_last += 1;
        } else {
            self.last = Some(ts);
            self.at_last = 1;
            self.skip = 0;
        }
        Some(text.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod writing without newlines cannot grow the reader's buffer past MAX_LINE.
    #[tokio::test]
    async fn overlong_lines_are_cut() {
        let mut text = b"short\r\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', 3 * 64 * 1024 + 5));
        text.extend(b"\nafter\nlast");
        let mut reader = futures::io::Cursor::new(text);
        let mut lines = Vec::new();
        while let Some(line) = next_line(&mut reader).await {
            lines.push(line.unwrap());
        }
        assert_eq!(
            lines.len(),
            4,
            "{:?}",
            lines.iter().map(String::len).collect::<Vec<_>>()
        );
        assert_eq!(lines[0], "short");
        assert_eq!(lines[1].len(), 64 * 1024);
        assert_eq!(lines[2], "after");
        assert_eq!(lines[3], "last");
    }

    #[test]
    fn a_reconnection_drops_the_lines_already_delivered() {
        let mut p = Position {
            started: Some("2026-01-01T00:00:09Z".parse().unwrap()),
            ..Position::default()
        };
        // Before any reconnection every line counts, tail= lines older than the start too.
        assert_eq!(p.take("2026-01-01T00:00:01.5Z a").as_deref(), Some("a"));
        assert_eq!(p.take("2026-01-01T00:00:02.25Z b").as_deref(), Some("b"));
        assert_eq!(p.take("2026-01-01T00:00:02.25Z c").as_deref(), Some("c"));
        let from = p.resume().unwrap();
        assert_eq!(from.to_string(), "2026-01-01T00:00:02Z");
        // The server repeats the whole second: earlier lines and the two delivered.
        assert_eq!(p.take("2026-01-01T00:00:02.1Z old"), None);
        assert_eq!(p.take("2026-01-01T00:00:02.25Z b"), None);
        assert_eq!(p.take("2026-01-01T00:00:02.25Z c"), None);
        assert_eq!(p.take("2026-01-01T00:00:02.25Z d").as_deref(), Some("d"));
        assert_eq!(p.take("2026-01-01T00:00:03Z e f").as_deref(), Some("e f"));
        assert_eq!(p.take("no timestamp").as_deref(), Some("no timestamp"));
    }

    #[test]
    fn a_reconnection_before_any_line_starts_at_the_first_connection() {
        let mut p = Position {
            started: Some("2026-01-01T00:00:05.7Z".parse().unwrap()),
            ..Position::default()
        };
        assert_eq!(p.resume().unwrap().to_string(), "2026-01-01T00:00:05Z");
        assert_eq!(p.take("2026-01-01T00:00:04Z tail line"), None);
        assert_eq!(p.take("2026-01-01T00:00:06Z new").as_deref(), Some("new"));
    }
}
