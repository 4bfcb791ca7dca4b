//! An external borrow checker for the tests of the hook (`managed_views::External`) that owners
//! (`Managed`) and non-owning views (`Described`) share. Its context is the checker itself, so
//! tests that run at once keep counts of their own.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::safe::import::views::{External, ExternalApi};
use crate::safe::Error;

/// What a checker saw: borrows taken and released (shared, exclusive) and context drops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) acquired: [usize; 2],
    pub(crate) released: [usize; 2],
    pub(crate) dropped: usize,
}

/// What a checker should have seen.
pub(crate) const fn seen(acquired: [usize; 2], released: [usize; 2], dropped: usize) -> Seen {
    Seen {
        acquired,
        released,
        dropped,
    }
}

/// Counts every call; refuses borrows while told to.
pub(crate) struct TestChecker {
    counts: [AtomicUsize; 5],
    refuse: AtomicBool,
}

impl TestChecker {
    pub(crate) const fn new() -> Self {
        TestChecker {
            counts: [const { AtomicUsize::new(0) }; 5],
            refuse: AtomicBool::new(false),
        }
    }

    /// The hook with this checker as its context.
    pub(crate) fn external(&'static self) -> External {
        External {
            api: &API,
            ctx: (self as *const TestChecker).cast_mut().cast(),
        }
    }

    pub(crate) fn seen(&self) -> Seen {
        let n = |i: usize| self.counts[i].load(Ordering::SeqCst);
        Seen {
            acquired: [n(0), n(1)],
            released: [n(2), n(3)],
            dropped: n(4),
        }
    }

    /// Refuses (`true`) or grants (`false`) the borrows asked from now on.
    pub(crate) fn refuse(&self, refuse: bool) {
        self.refuse.store(refuse, Ordering::SeqCst);
    }
}

/// # Safety
/// `ctx` is a live `TestChecker`.
unsafe fn checker<'a>(ctx: *mut c_void) -> &'a TestChecker {
    // SAFETY: the caller's contract.
    unsafe { &*ctx.cast::<TestChecker>() }
}

/// `ExternalApi::acquire`: counts the borrow, or refuses it while told to.
///
/// # Safety
///
/// `ctx` is a `'static` `TestChecker` (what `TestChecker::external` hands out).
unsafe fn acquire(ctx: *mut c_void, exclusive: bool) -> Result<(), Error> {
    // SAFETY: every context of `API` is a `'static` checker (`TestChecker::external`).
    let c = unsafe { checker(ctx) };
    if c.refuse.load(Ordering::SeqCst) {
        return Err(Error::AlreadyBorrowed { exclusive });
    }
    c.counts[usize::from(exclusive)].fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// `ExternalApi::release`: counts the release.
///
/// # Safety
///
/// As `acquire`.
unsafe fn release(ctx: *mut c_void, exclusive: bool) {
    // SAFETY: as in `acquire`.
    let c = unsafe { checker(ctx) };
    c.counts[2 + usize::from(exclusive)].fetch_add(1, Ordering::SeqCst);
}

/// `ExternalApi::drop_ctx`: counts the drop (the checker itself lives for good).
///
/// # Safety
///
/// As `acquire`.
unsafe fn drop_ctx(ctx: *mut c_void) {
    // SAFETY: as in `acquire`.
    let c = unsafe { checker(ctx) };
    c.counts[4].fetch_add(1, Ordering::SeqCst);
}

static API: ExternalApi = ExternalApi {
    acquire,
    release,
    drop_ctx,
};
