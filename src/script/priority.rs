//! The scheduling priority of threads kite has given up on: a script stuck inside one
//! builtin (which never looks at its deadline) cannot be stopped in-process, so its
//! thread is left to finish at the lowest priority, taking a core only while nothing
//! else wants one.

#![allow(
    unsafe_code,
    reason = "gettid and setpriority (libc); Linux only, hence allow rather than expect"
)]

/// A thread's kernel id (Linux), for [`lowest`].
pub fn thread_id() -> Option<i32> {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid has no preconditions and cannot fail.
    return Some(unsafe { libc::gettid() });
    #[cfg(not(target_os = "linux"))]
    None
}

/// Gives the thread `tid` the lowest priority (nice 19). Linux keeps nice per thread.
///
/// # Caveats
/// An unprivileged process cannot raise it again: a thread given up on must not go
/// back to serving other work. Elsewhere than on Linux this does nothing.
pub fn lowest(tid: Option<i32>) {
    #[cfg(target_os = "linux")]
    if let Some(tid) = tid.and_then(|t| libc::id_t::try_from(t).ok()) {
        // SAFETY: setpriority only reads its arguments; a thread that has ended makes
        // it fail with ESRCH, which is harmless here.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, tid, 19);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = tid;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_given_up_on_runs_at_the_lowest_priority() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            tx.send(thread_id()).unwrap();
            std::thread::park();
        });
        let tid = rx.recv().unwrap();
        lowest(tid);
        #[cfg(target_os = "linux")]
        {
            let stat =
                std::fs::read_to_string(format!("/proc/self/task/{}/stat", tid.unwrap())).unwrap();
            // Field 19 (after the command in parentheses, the 17th) is the nice value.
            let after = stat.rsplit_once(')').unwrap().1;
            let nice: i32 = after.split_whitespace().nth(16).unwrap().parse().unwrap();
            assert_eq!(nice, 19, "{stat}");
        }
        t.thread().unpark();
        t.join().unwrap();
    }
}
