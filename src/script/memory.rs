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
//! Frees are credited to the thread that makes them, which is not always the one that
//! allocated: large blocks a guard allocates carry its id in a header and credit only
//! it, a large block from outside any guard (an API response's chunks, read on the
//! runtime's threads) credits nothing, no credit takes a thread past its whole budget,
//! and in a hosted script's guard allocating [`CHURN`] times the budget in all counts
//! as over it (small and 16-aligned blocks carry no owner).
//!
//! # Caveats
//! A single builtin that builds a large Rust vector (`[0] * n`) still allocates it
//! before the copy into Starlark's heap is refused, so memory can peak at that size
//! for a moment. Memory is counted per thread, and nothing is counted unless the
//! binary installs [`Counting`] as its global allocator.

#![expect(
    unsafe_code,
    reason = "the counting global allocator: GlobalAlloc is an unsafe trait over the system allocator, and malloc tuning is libc"
)]

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
    /// Bytes this thread may still allocate in all, frees not counted, in a guard that
    /// parks (see [`CHURN`]).
    static CHURN_LEFT: Cell<Option<isize>> = const { Cell::new(None) };
    /// The active guard's id (0: none), written into the header of its large blocks.
    static GUARD_ID: Cell<u64> = const { Cell::new(0) };
}

static NEXT_GUARD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Blocks at least this large (with an alignment of 8 or less) that a guard allocates
/// carry its id in a header, so that a free is credited only to the guard that
/// allocated it. A large block freed without one was allocated outside any guard (an
/// API response's chunks, read on the runtime's threads) and gives no credit.
const OWNED: usize = 4096;

/// Whether blocks carry owners: where malloc aligns every block to 16 bytes (glibc on
/// 64-bit), so a block returned 8 past that alignment can only be one with a header.
const OWNERS: bool = cfg!(all(
    target_os = "linux",
    target_env = "gnu",
    target_pointer_width = "64"
));

/// The header before an owned block: its guard's id, at an address 16-aligned.
const HEADER: usize = 16;

fn owner() -> u64 {
    GUARD_ID.try_with(Cell::get).unwrap_or(0)
}

/// Whether a block of `layout` allocated now gets an owner header.
fn gets_owner(layout: Layout) -> bool {
    OWNERS && layout.align() <= 8 && layout.size() >= OWNED && owner() != 0
}

/// Whether the block at `ptr`, allocated with `layout`, has an owner header.
fn has_owner(ptr: *mut u8, layout: Layout) -> bool {
    OWNERS && layout.align() <= 8 && layout.size() >= OWNED && ptr.addr() % 16 == 8
}

/// The layout `System` allocated an owned block of `layout` with.
fn underlying(layout: Layout) -> Option<Layout> {
    Layout::from_size_align(layout.size().checked_add(HEADER)?, 16).ok()
}

/// How many times its budget a thread in a guard that parks may hold before its next
/// block over 4 KiB parks it: the backstop for a loop that copies script data without
/// looking at the budget.
pub const CEILING: isize = 8;

/// In a guard that parks (a hosted script), how many times its budget a thread may
/// allocate in all, however much it frees. A free is credited to the thread that makes
/// it, and memory another thread allocated (the chunks of an API response, read on the
/// runtime's threads) is freed on the script's: without this bound, a script making
/// many calls could hide as much live memory as those responses weighed.
pub const CHURN: isize = 8;

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

/// A tag no other thread of this process has had (never 0, which is "none"), for
/// [`tag_thread`].
pub fn new_tag() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Gives this thread a tag (from [`new_tag`]) that [`is_parked`] looks for once the
/// thread is parked.
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

/// Frees the slot of the parked thread tagged `tag`, once its owner has recorded it, so
/// that the table never fills up.
pub fn forget_parked(tag: u64) {
    use std::sync::atomic::Ordering;
    for slot in &PARKED_TAGS {
        if slot
            .compare_exchange(tag, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return;
        }
    }
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
/// the whole budget, or when the thread already holds [`CEILING`] times its budget;
/// returns otherwise.
///
/// A thread parked while it holds a lock others share (a cache's, discovery's) would
/// stall them all, so parking is kept for what no correct path does: one block larger
/// than the budget (blocks allocated under shared locks are far smaller), or a thread
/// so far past its budget that some loop over script data must have missed its
/// checks. Many smaller blocks that pass the budget inside one builtin call are
/// otherwise stopped by the builtin's own checks (`budget::walk_step`), or at the
/// next instruction.
fn park_if_hopeless(size: usize, align: usize) {
    if size <= OWNED || is_chunk(size, align) {
        return;
    }
    let left = BUDGET.try_with(Cell::get).ok().flatten();
    let hopeless = LIMIT
        .try_with(|l| {
            l.get().is_some_and(|(limit, overrun)| {
                let far_over = left.is_some_and(|left| left < -(CEILING - 1) * limit);
                overrun == Overrun::Park && (size.cast_signed() > limit || far_over)
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
    let _ = CHURN_LEFT.try_with(|c| {
        if let Some(left) = c.get() {
            c.set(Some(left - size.cast_signed()));
        }
    });
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

/// Credits a free to this thread's budget, never past the whole of it: memory other
/// threads allocated and this one frees (a response's chunks) is no allowance.
fn refund(size: usize) {
    let whole = LIMIT.try_with(Cell::get).ok().flatten().map(|(l, _)| l);
    let _ = BUDGET.try_with(|b| {
        if let Some(left) = b.get() {
            let credited = left.saturating_add(size.cast_signed());
            b.set(Some(whole.map_or(credited, |w| credited.min(w))));
        }
    });
}

/// Allocates `layout` from `System`, with an owner header when [`gets_owner`].
///
/// # Safety
/// As [`GlobalAlloc::alloc`].
unsafe fn allocate(layout: Layout, zeroed: bool) -> *mut u8 {
    if gets_owner(layout) {
        let Some(under) = underlying(layout) else {
            return std::ptr::null_mut();
        };
        // SAFETY: a non-zero size, a valid power-of-two alignment.
        let base = unsafe {
            if zeroed {
                System.alloc_zeroed(under)
            } else {
                System.alloc(under)
            }
        };
        if base.is_null() {
            return base;
        }
        // SAFETY: `base` is 16-aligned and has HEADER bytes before the block, which
        // starts 8 bytes before the end of the header (so it is 8 past 16-aligned) and
        // ends within the allocation (HEADER - 8 bytes spare).
        unsafe {
            base.cast::<[u8; 8]>().write(owner().to_ne_bytes());
            return base.add(HEADER / 2);
        }
    }
    // SAFETY: the caller's layout, as GlobalAlloc requires.
    unsafe {
        if zeroed {
            System.alloc_zeroed(layout)
        } else {
            System.alloc(layout)
        }
    }
}

/// Frees a block [`allocate`] returned, crediting this thread's budget if the block is
/// its guard's: a small one (whose owner is not recorded), or a large one with this
/// guard's id. A large block without a header was allocated outside any guard.
///
/// # Safety
/// As [`GlobalAlloc::dealloc`].
unsafe fn release_block(ptr: *mut u8, layout: Layout) {
    if has_owner(ptr, layout) {
        // SAFETY: an owned block: its header is 8 bytes before it, at `base`, and it
        // was allocated with `underlying(layout)`, which therefore exists.
        unsafe {
            let base = ptr.sub(HEADER / 2);
            if u64::from_ne_bytes(base.cast::<[u8; 8]>().read()) == owner() {
                refund(layout.size());
            }
            if let Some(under) = underlying(layout) {
                System.dealloc(base, under);
            }
        }
        return;
    }
    if !(OWNERS && layout.align() <= 8 && layout.size() >= OWNED) {
        refund(layout.size());
    }
    // SAFETY: `ptr` was allocated by `System` with `layout`.
    unsafe { System.dealloc(ptr, layout) }
}

// SAFETY: every block comes from `System`, with the caller's layout or, for an owned
// block, with `underlying(layout)` and a header before the pointer returned, and goes
// back to it the same way; the accounting touches only thread-local cells and atomics
// and never allocates or unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        park_if_hopeless(layout.size(), layout.align());
        if !charge(layout.size(), layout.align()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as GlobalAlloc::alloc.
        unsafe { allocate(layout, false) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        park_if_hopeless(layout.size(), layout.align());
        if !charge(layout.size(), layout.align()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        unsafe { allocate(layout, true) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` (or `realloc`) with `layout`.
        unsafe { release_block(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: GlobalAlloc::realloc's contract: the new layout is valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if has_owner(ptr, layout) || gets_owner(new_layout) {
            // Owners are per block: move it (copied, as realloc does for most growth
            // anyway).
            // SAFETY: as GlobalAlloc::alloc, with a valid layout.
            let new = unsafe { self.alloc(new_layout) };
            if !new.is_null() {
                // SAFETY: both blocks are valid for the smaller size and distinct.
                unsafe {
                    std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                    release_block(ptr, layout);
                }
            }
            return new;
        }
        if new_size > layout.size() {
            park_if_hopeless(new_size, layout.align());
        }
        if new_size > layout.size() && !charge(new_size - layout.size(), layout.align()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        let out = unsafe { System.realloc(ptr, layout, new_size) };
        // A large block without an owner is not this guard's: shrinking it is no credit.
        let foreign = OWNERS && layout.align() <= 8 && layout.size() >= OWNED;
        if new_size < layout.size() && !foreign {
            refund(layout.size() - new_size);
        }
        out
    }
}

/// True when this thread has allocated past the budget of the [`guard`] it runs in.
/// Allocations outside Starlark's heap (a dict's table, a builtin's vector) are never
/// refused, so the evaluator's cancel hook asks this between instructions.
pub fn exhausted() -> bool {
    let over = |cell: &'static std::thread::LocalKey<Cell<Option<isize>>>| {
        cell.try_with(|b| b.get().is_some_and(|left| left < 0))
            .unwrap_or(false)
    };
    over(&BUDGET) || over(&CHURN_LEFT)
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
    let churn = (overrun == Overrun::Park).then(|| whole.saturating_mul(CHURN));
    let outer = BUDGET.with(|b| b.replace(Some(whole)));
    let outer_limit = LIMIT.with(|l| l.replace(Some((whole, overrun))));
    let outer_churn = CHURN_LEFT.with(|c| c.replace(churn));
    let id = NEXT_GUARD.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let outer_id = GUARD_ID.with(|g| g.replace(id));
    REFUSED.with(|r| r.set(false));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    BUDGET.with(|b| b.set(outer));
    LIMIT.with(|l| l.set(outer_limit));
    CHURN_LEFT.with(|c| c.set(outer_churn));
    GUARD_ID.with(|g| g.set(outer_id));
    let refused = REFUSED.with(|r| r.replace(false));
    match result {
        Ok(v) => Ok(v),
        Err(_) if refused => Err(Exceeded { limit }),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

#[cfg(test)]
mod tests;
