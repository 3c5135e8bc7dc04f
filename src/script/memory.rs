//! A per-thread memory budget for script evaluation: the process allocator counts what
//! each thread allocates, and a script that outgrows its budget in one step fails with
//! an error instead of taking the whole process down.
//!
//! Starlark's own heap limit (`Evaluator::set_max_heap_size`) is only checked every
//! thousand instructions, so `s = s + s` forty times would allocate a terabyte between
//! two checks. The allocator closes that gap for Starlark's heap: its arena (bumpalo)
//! turns a refused chunk into a panic, which unwinds to [`guard`] and becomes
//! [`Exceeded`]. The arena's chunks are the only allocations refused, recognized by
//! their shape (16-byte aligned, sized to fill whole pages after malloc's own 16 bytes);
//! a plain Rust allocation that failed would abort the process (`handle_alloc_error`),
//! which is exactly what this module exists to prevent.
//!
//! # Caveats
//! A single builtin that builds a large Rust vector (`[0] * n`) still allocates it
//! before the copy into Starlark's heap is refused, so memory can peak at that size
//! for a moment. Memory is counted per thread, and nothing is counted unless the
//! binary installs [`Counting`] as its global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The alignment of bumpalo's chunks, which Starlark's heap is made of.
const CHUNK_ALIGN: usize = 16;
/// bumpalo sizes a chunk of a page or more so that, with malloc's 16-byte header, it
/// fills whole pages: its size is 16 bytes short of a page multiple.
const PAGE: usize = 4096;
const MALLOC_OVERHEAD: usize = 16;
/// Allocations this small always succeed, so that unwinding and error messages work
/// even on a thread over its budget.
const SMALL: usize = 64 * 1024;

thread_local! {
    /// Bytes this thread may still allocate while a [`guard`] is active.
    static BUDGET: Cell<Option<isize>> = const { Cell::new(None) };
    /// Set when an allocation was refused, so the panic it causes is recognized.
    static REFUSED: Cell<bool> = const { Cell::new(false) };
    /// The whole budget of the active [`guard`], and what to do with one allocation
    /// larger than all of it.
    static LIMIT: Cell<Option<(isize, Overrun)>> = const { Cell::new(None) };
}

/// What happens to a thread that asks, in one allocation outside Starlark's heap, for
/// more than its whole budget (`"x" * 1048576 * 2000000000` builds its result in one
/// Rust string). Refusing it would abort the process (`handle_alloc_error`), and
/// granting it would exhaust the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overrun {
    /// Let the allocation go ahead: `kite run` trusts its user, and a failed allocation
    /// ends the run with the allocator's message.
    Abort,
    /// Park the thread for good: one hosted script loses one thread, and the operator
    /// and every other controller go on (counted by [`parked`]).
    Park,
}

static PARKED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Threads parked for good by [`Overrun::Park`].
pub fn parked() -> usize {
    PARKED.load(std::sync::atomic::Ordering::Acquire)
}

thread_local! {
    /// The tag [`tag_thread`] gave this thread (0: none).
    static TAG: Cell<u64> = const { Cell::new(0) };
}

/// The tags of parked threads, so that their owner (the worker pool) can tell which of
/// its threads will never come back. Fixed slots: the allocator may not allocate, and
/// a full table only means a thread parked without being told apart (it is still
/// counted by [`parked`]).
static PARKED_TAGS: [std::sync::atomic::AtomicU64; 256] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 256];

/// Gives this thread a tag (non-zero, unique to the caller) that [`is_parked`] looks
/// for once the thread is parked.
pub fn tag_thread(tag: u64) {
    TAG.with(|t| t.set(tag));
}

/// True when the thread tagged `tag` is parked for good.
pub fn is_parked(tag: u64) -> bool {
    tag != 0
        && PARKED_TAGS
            .iter()
            .any(|t| t.load(std::sync::atomic::Ordering::Acquire) == tag)
}

/// Records this thread's tag among the parked ones (no allocation, no lock).
fn record_parked() {
    use std::sync::atomic::Ordering;
    let tag = TAG.try_with(Cell::get).unwrap_or(0);
    if tag != 0 {
        for slot in &PARKED_TAGS {
            if slot
                .compare_exchange(0, tag, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                break;
            }
        }
    }
    PARKED.fetch_add(1, Ordering::Release);
}

/// Parks this thread for good, in a guard that parks, when `size` alone is more than
/// the whole budget, or would take the thread's use past twice its budget (a builtin
/// copying a shared string into one JSON text per reference, inside one instruction,
/// where the between-instructions check cannot stop it); returns otherwise.
fn park_if_hopeless(size: usize, align: usize) {
    if size <= SMALL || is_chunk(size, align) {
        return;
    }
    let left = BUDGET.try_with(Cell::get).ok().flatten();
    let hopeless = LIMIT
        .try_with(|l| {
            l.get().is_some_and(|(limit, overrun)| {
                let size = size.cast_signed();
                overrun == Overrun::Park
                    && (size > limit || left.is_some_and(|left| left - size < -limit))
            })
        })
        .unwrap_or(false);
    if hopeless {
        record_parked();
        loop {
            std::thread::park();
        }
    }
}

/// The system allocator with per-thread accounting; install it in the binary with
/// `#[global_allocator]`.
pub struct Counting;

fn charge(size: usize, align: usize) -> bool {
    // `try_with` never panics, and these const, drop-free thread locals never allocate.
    BUDGET
        .try_with(|b| match b.get() {
            None => true,
            Some(left) => {
                let next = left - size.cast_signed();
                if next < 0 && size > SMALL && is_chunk(size, align) {
                    let _ = REFUSED.try_with(|r| r.set(true));
                    return false;
                }
                b.set(Some(next));
                true
            }
        })
        .unwrap_or(true)
}

fn is_chunk(size: usize, align: usize) -> bool {
    align == CHUNK_ALIGN && size % PAGE == PAGE - MALLOC_OVERHEAD
}

fn refund(size: usize) {
    let _ = BUDGET.try_with(|b| {
        if let Some(left) = b.get() {
            b.set(Some(left.saturating_add(size.cast_signed())));
        }
    });
}

// SAFETY: every call is forwarded to `System` with the same layout; the accounting
// touches only thread-local cells and never allocates or unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        park_if_hopeless(layout.size(), layout.align());
        if !charge(layout.size(), layout.align()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, as GlobalAlloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        park_if_hopeless(layout.size(), layout.align());
        if !charge(layout.size(), layout.align()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        refund(layout.size());
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            park_if_hopeless(new_size, layout.align());
        }
        if new_size > layout.size() && !charge(new_size - layout.size(), layout.align()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        let out = unsafe { System.realloc(ptr, layout, new_size) };
        if new_size < layout.size() {
            refund(layout.size() - new_size);
        }
        out
    }
}

/// True when this thread has allocated past the budget of the [`guard`] it runs in.
/// Allocations outside Starlark's heap (a dict's table, a builtin's vector) are never
/// refused, so the evaluator's cancel hook asks this between instructions.
pub fn exhausted() -> bool {
    BUDGET
        .try_with(|b| b.get().is_some_and(|left| left < 0))
        .unwrap_or(false)
}

/// What this thread has allocated and not freed since the [`guard`] it runs in began
/// (0 outside one).
pub fn used() -> usize {
    let left = BUDGET.try_with(Cell::get).ok().flatten();
    let limit = LIMIT.try_with(Cell::get).ok().flatten();
    match (left, limit) {
        (Some(left), Some((limit, _))) => usize::try_from(limit - left).unwrap_or(0),
        _ => 0,
    }
}

/// Keeps the panic message of a refused allocation off stderr: the refusal becomes an
/// ordinary script error ([`Exceeded`]), reported where the script's errors go. Other
/// panics are reported as before. Call once, early in `main`.
pub fn quiet_refusals() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if REFUSED.try_with(Cell::get).unwrap_or(false) {
            return;
        }
        default(info);
    }));
}

/// Has large allocations (a script's long strings, big objects) always come from their
/// own mappings, which go back to the OS when freed. glibc otherwise raises this
/// threshold to the size of the largest block freed so far, and a script that built a
/// 10 MB object once would leave later ones in its heap for good. Call once, early.
pub fn return_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a glibc tunable; called before other threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

/// Gives memory that scripts freed back to the operating system. glibc keeps freed
/// memory in per-thread arenas, so without this a controller that stopped, or a script
/// that hit its limit, would leave the process larger for good. Blocks for a moment:
/// call it off the async runtime's workers.
pub fn release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas; any pad value is valid.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A script went over its memory budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the script exceeded its memory limit of {} MiB", .limit / (1024 * 1024))]
pub struct Exceeded {
    pub limit: usize,
}

/// Runs `f` with a budget of `limit` bytes for this thread. A panic that the budget
/// caused becomes [`Exceeded`]; any other panic continues to unwind.
///
/// # Errors
/// [`Exceeded`] when the budget refused an allocation and `f` could not finish.
pub fn guard<T>(limit: usize, f: impl FnOnce() -> T) -> Result<T, Exceeded> {
    guard_with(limit, Overrun::Abort, f)
}

/// [`guard`], with what to do with a single allocation larger than the whole budget.
///
/// # Errors
/// As [`guard`].
pub fn guard_with<T>(limit: usize, overrun: Overrun, f: impl FnOnce() -> T) -> Result<T, Exceeded> {
    let whole = isize::try_from(limit).unwrap_or(isize::MAX);
    let outer = BUDGET.with(|b| b.replace(Some(whole)));
    let outer_limit = LIMIT.with(|l| l.replace(Some((whole, overrun))));
    REFUSED.with(|r| r.set(false));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    BUDGET.with(|b| b.set(outer));
    LIMIT.with(|l| l.set(outer_limit));
    let refused = REFUSED.with(|r| r.replace(false));
    match result {
        Ok(v) => Ok(v),
        Err(_) if refused => Err(Exceeded { limit }),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bumpalo chunk of `pages` pages.
    fn chunk(pages: usize) -> usize {
        pages * PAGE - MALLOC_OVERHEAD
    }

    #[test]
    fn a_refused_chunk_is_reported_and_small_allocations_still_work() {
        assert!(
            charge(chunk(1 << 28), CHUNK_ALIGN),
            "no budget outside a guard"
        );
        let r = guard(1 << 20, || {
            assert!(charge(chunk(100), CHUNK_ALIGN));
            assert!(charge(100, 8), "small allocations always pass");
            assert!(
                charge(1 << 21, 8),
                "plain Rust allocations are never refused"
            );
            assert!(charge(1 << 21, CHUNK_ALIGN), "nor hash tables");
            assert!(!charge(chunk(100), CHUNK_ALIGN));
            panic!("out of memory");
        });
        assert_eq!(r, Err(Exceeded { limit: 1 << 20 }));
        assert!(
            charge(chunk(1 << 28), CHUNK_ALIGN),
            "the budget ends with the guard"
        );
        assert_eq!(guard(10, || 7), Ok(7));
    }

    /// Issue 26: a hosted script's one huge allocation parks its thread instead of
    /// aborting the process.
    #[test]
    fn a_hopeless_allocation_parks_the_thread_and_the_process_goes_on() {
        let before = parked();
        let t = std::thread::spawn(|| {
            tag_thread(0xfeed_0001);
            guard_with(1 << 20, Overrun::Park, || {
                let s = "x".repeat(1 << 20);
                // More than the machine has: without parking, the process would abort.
                let huge = s.repeat(1 << 40);
                huge.len()
            })
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while parked() == before {
            assert!(
                std::time::Instant::now() < deadline,
                "the thread was not parked"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!t.is_finished());
        // Its owner can tell it apart by its tag.
        assert!(is_parked(0xfeed_0001));
        assert!(!is_parked(0xfeed_0002) && !is_parked(0));
        // Allocations of the budget's size still go ahead (and are counted).
        assert_eq!(
            guard_with(1 << 20, Overrun::Park, || vec![0u8; 1 << 19].len()),
            Ok(1 << 19)
        );
        // Many allocations, each under the budget, that together pass twice the budget
        // inside one builtin call: parked too.
        let before = parked();
        std::thread::spawn(|| {
            guard_with(1 << 20, Overrun::Park, || {
                let copies: Vec<Vec<u8>> = (0..8).map(|_| vec![1u8; 1 << 19]).collect();
                copies.len()
            })
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while parked() == before {
            assert!(
                std::time::Instant::now() < deadline,
                "the copies were not stopped"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn used_counts_what_is_kept_until_it_is_freed() {
        assert_eq!(used(), 0, "nothing outside a guard");
        let r = guard(1 << 30, || {
            let kept = vec![1u8; 4 << 20];
            let with = used();
            drop(kept);
            (with, used())
        });
        let (with, without) = r.unwrap();
        assert!(with >= 4 << 20, "{with}");
        assert!(without < 1 << 20, "{without}");
    }

    #[test]
    fn other_panics_go_on_unwinding() {
        let r = std::panic::catch_unwind(|| guard(1 << 20, || panic!("a bug")));
        assert!(r.is_err());
    }
}
