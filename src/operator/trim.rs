//! Gives the memory freed after a burst back to the operating system.
//!
//! A restart of thousands of controllers holds, for some seconds, many connections to
//! the API server and the state of many reconciles at once; once they are done, glibc
//! keeps what they freed in its arenas, where freed blocks between live ones are never
//! returned on their own, and the operator's resident memory would stay at the burst's
//! peak for good (a heap profile at 1000 controllers found most of that peak in
//! connections and reconcile state). Every [`PERIOD`], when at least [`WORTH`] more is
//! kept free than after the last trim, it is trimmed.

use std::future::Future;
use std::time::Duration;

use crate::script::memory;

/// How often the free memory is looked at.
pub const PERIOD: Duration = Duration::from_secs(10);

/// Memory freed since the last trim that is worth another (a trim locks each arena
/// while it walks it, and what it gave back still counts as free).
pub const WORTH: usize = 8 << 20;

/// Trims every [`PERIOD`] until `end`, on a blocking thread.
pub async fn trim(end: impl Future<Output = ()>) {
    let mut end = std::pin::pin!(end);
    let mut floor = 0;
    loop {
        tokio::select! {
            () = tokio::time::sleep(PERIOD) => {}
            () = &mut end => return,
        }
        let looked = tokio::task::spawn_blocking(move || {
            let free = memory::kept_free();
            if due(free, floor) {
                memory::release();
                tracing::debug!(free_mib = free >> 20, "gave freed memory back");
                memory::kept_free()
            } else {
                free.min(floor)
            }
        })
        .await;
        if let Ok(now) = looked {
            floor = now;
        }
    }
}

/// Whether `free` bytes kept in the arenas call for a trim, `floor` being what was
/// free after the last one (lowered as the free memory is used again).
fn due(free: usize, floor: usize) -> bool {
    free > floor.saturating_add(WORTH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_was_freed_since_the_last_trim_calls_for_another() {
        assert!(!due(WORTH, 0), "8 MiB free is not yet worth it");
        assert!(due(WORTH + 1, 0));
        // What a trim gave back still counts as free: 100 MiB free after a trim calls
        // for no trim until 8 MiB more are freed.
        let floor = 100 << 20;
        assert!(!due(floor + WORTH, floor));
        assert!(due(floor + WORTH + 1, floor));
    }

    #[tokio::test]
    async fn it_ends_with_the_run() {
        let ended =
            tokio::time::timeout(Duration::from_secs(1), trim(std::future::ready(()))).await;
        assert!(ended.is_ok(), "it returns once the run ends");
    }
}
