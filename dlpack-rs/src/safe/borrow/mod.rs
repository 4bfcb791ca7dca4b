//! The process-wide registry of borrowed byte ranges; [rules](super#the-borrow-registry).

pub(super) mod guard;
pub(crate) mod overlap;

use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use crate::safe::borrow::overlap::Span;
use crate::safe::Error;

/// The [`BorrowApi`] version this crate publishes; later versions only append fields.
pub(crate) const BORROW_API_VERSION: u64 = 2;

// `acquire`'s answers.
const ACQUIRED: i32 = 0;
const CONFLICT: i32 = 1;
const NO_MEMORY: i32 = -1;

/// The borrow registry as a C table, shared between copies of this crate in one process.
///
/// `acquire(state, start, end, exclusive)` registers `start..end` and returns 0, or 1 on a
/// conflict (nothing registered), or -1 when out of memory (or a span's count is full).
/// `release` with the same arguments removes one registration. `acquire_strided` and
/// `release_strided` do the same for `width`-byte elements every `period` bytes from `start`
/// below `end` (a [`Span`]). All are thread-safe, never block on Python and never unwind.
/// Versions before 2 were never released and are refused; later ones only append fields.
#[repr(C)]
pub(crate) struct BorrowApi {
    /// [`BORROW_API_VERSION`] of the copy of the crate that made the table.
    pub version: u64,
    /// Passed back to the functions.
    pub state: *mut c_void,
    /// Registers a range.
    pub acquire: unsafe extern "C" fn(*mut c_void, usize, usize, bool) -> i32,
    /// Releases a range.
    pub release: unsafe extern "C" fn(*mut c_void, usize, usize, bool),
    /// Registers a strided span.
    pub acquire_strided: unsafe extern "C" fn(*mut c_void, usize, usize, usize, usize, bool) -> i32,
    /// Releases a strided span.
    pub release_strided: unsafe extern "C" fn(*mut c_void, usize, usize, usize, usize, bool),
}

impl BorrowApi {
    /// Calls this table's `range` function (or, for a strided span, `strided`) on `span`.
    ///
    /// # Safety
    /// The table keeps the contract above; `range` and `strided` are its fields of one kind.
    unsafe fn call<R>(
        &self,
        span: Span,
        exclusive: bool,
        range: unsafe extern "C" fn(*mut c_void, usize, usize, bool) -> R,
        strided: unsafe extern "C" fn(*mut c_void, usize, usize, usize, usize, bool) -> R,
    ) -> R {
        if span.is_range() {
            // SAFETY: the table's contract (this function's).
            unsafe { range(self.state, span.start, span.end, exclusive) }
        } else {
            let s = span;
            // SAFETY: as above.
            unsafe { strided(self.state, s.start, s.end, s.period, s.width, exclusive) }
        }
    }

    /// Registers `span` and returns the table's answer.
    ///
    /// # Safety
    /// The table keeps the contract above.
    #[inline]
    unsafe fn acquire_span(&self, span: Span, exclusive: bool) -> i32 {
        if ptr::eq(self, &LOCAL_API) {
            // This copy's own table, called directly rather than through its C function.
            return local_acquire_span(span.start, span.end, span.period, span.width, exclusive);
        }
        // SAFETY: this function's contract.
        unsafe { self.call(span, exclusive, self.acquire, self.acquire_strided) }
    }

    /// Releases one registration of `span`.
    ///
    /// # Safety
    /// As `acquire_span`, and such a registration is live.
    #[inline]
    unsafe fn release_span(&self, span: Span, exclusive: bool) {
        if ptr::eq(self, &LOCAL_API) {
            return local_release_span(span.start, span.end, span.period, span.width, exclusive);
        }
        // SAFETY: this function's contract.
        unsafe { self.call(span, exclusive, self.release, self.release_strided) }
    }
}

// SAFETY: the table is immutable; only its own functions use `state`, under their lock.
unsafe impl Sync for BorrowApi {}

/// `count` borrows of one span and kind, `migrated` of them also in the shared table.
struct Entry {
    span: Span,
    exclusive: bool,
    count: usize,
    migrated: usize,
}

/// The state of this copy's table: live entries behind a spin lock.
struct Registry {
    locked: AtomicBool,
    entries: UnsafeCell<Vec<Entry>>,
}

// SAFETY: `entries` is only touched while `locked` is held (see `Registry::with`).
unsafe impl Sync for Registry {}

impl Registry {
    /// Runs `f` under the lock; `f` must not take it again (another copy's table never does).
    fn with<R>(&self, f: impl FnOnce(&mut Vec<Entry>) -> R) -> R {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins = spins.wrapping_add(1);
            if spins % 64 == 0 {
                #[cfg(feature = "std")]
                std::thread::yield_now();
            }
            core::hint::spin_loop();
        }
        // SAFETY: the lock is held, and `f` does not reach this registry again.
        let result = f(unsafe { &mut *self.entries.get() });
        self.locked.store(false, Ordering::Release);
        result
    }
}

static LOCAL: Registry = Registry {
    locked: AtomicBool::new(false),
    entries: UnsafeCell::new(Vec::new()),
};

/// The shared table this copy switched to, if any (read under `LOCAL`'s lock).
fn switched() -> Option<&'static BorrowApi> {
    let p = CURRENT.load(Ordering::Acquire);
    // SAFETY: CURRENT holds NULL or a table that lives for the process.
    let api = unsafe { p.as_ref() }?;
    (!ptr::eq(api, &LOCAL_API)).then_some(api)
}

#[cfg(test)]
/// Registers `start..end` in `entries` (the table logic, under the caller's lock).
fn add_entry(entries: &mut Vec<Entry>, start: usize, end: usize, exclusive: bool) -> i32 {
    add_span(entries, Span::range(start, end), exclusive)
}

/// Registers `span` (under the caller's lock); conflicts with a byte-sharing exclusive borrow.
fn add_span(entries: &mut Vec<Entry>, span: Span, exclusive: bool) -> i32 {
    // One scan: a conflict anywhere refuses; else the shared entry of the same span (at most
    // one: they merge) counts up. Only a shared entry: an exclusive one of an equal span that
    // shares no byte (an empty range another copy passed) is no conflict and keeps its kind.
    let mut same = None;
    for (i, e) in entries.iter().enumerate() {
        if (exclusive || e.exclusive) && e.span.shares_byte(&span) {
            return CONFLICT;
        }
        if !exclusive && !e.exclusive && e.span == span {
            same = Some(i);
        }
    }
    if let Some(i) = same {
        // A full count refuses (leaked guards only): wrapping would free a live borrow's bytes,
        // and a panic here would unwind with the lock held.
        let Some(count) = entries[i].count.checked_add(1) else {
            return NO_MEMORY;
        };
        entries[i].count = count;
        return ACQUIRED;
    }
    if entries.try_reserve(1).is_err() {
        return NO_MEMORY;
    }
    entries.push(Entry {
        span,
        exclusive,
        count: 1,
        migrated: 0,
    });
    ACQUIRED
}

/// `acquire` and `acquire_strided` of this copy's table, on a [`Span`]'s fields (passed in
/// registers: a span read back from the caller's stack stalls the store-to-load forwarding).
#[inline(never)]
fn local_acquire_span(
    start: usize,
    end: usize,
    period: usize,
    width: usize,
    exclusive: bool,
) -> i32 {
    // Normalised as it was registered (unchanged for a span our own code made).
    let span = Span::strided(start, end, period, width);
    LOCAL.with(|entries| {
        if let Some(shared) = switched() {
            // Looked up this table just before the switch: forward it.
            // SAFETY: `shared` keeps the `BorrowApi` contract (`install`'s precondition).
            return unsafe { shared.acquire_span(span, exclusive) };
        }
        add_span(entries, span, exclusive)
    })
}

unsafe extern "C" fn local_acquire(
    _state: *mut c_void,
    start: usize,
    end: usize,
    exclusive: bool,
) -> i32 {
    local_acquire_span(start, end, 0, 0, exclusive)
}

unsafe extern "C" fn local_acquire_strided(
    _state: *mut c_void,
    start: usize,
    end: usize,
    period: usize,
    width: usize,
    exclusive: bool,
) -> i32 {
    local_acquire_span(start, end, period, width, exclusive)
}

#[cfg(test)]
/// Removes one registration of `start..end` from `entries`; `Some(migrated)` when found, with
/// whether that one had been registered in a shared table too.
fn remove_entry(
    entries: &mut Vec<Entry>,
    start: usize,
    end: usize,
    exclusive: bool,
) -> Option<bool> {
    remove_span(entries, Span::range(start, end), exclusive)
}

/// Removes one registration of `span`; `Some(migrated)` when found.
fn remove_span(entries: &mut Vec<Entry>, span: Span, exclusive: bool) -> Option<bool> {
    let i = entries
        .iter()
        .position(|e| e.span == span && e.exclusive == exclusive)?;
    let e = &mut entries[i];
    e.count -= 1;
    let migrated = e.migrated > 0;
    if migrated {
        e.migrated -= 1;
    }
    if e.count == 0 {
        // `swap_remove` would read the entry back even when it is the last one (a stall).
        let last = entries.len() - 1;
        if i != last {
            entries.swap(i, last);
        }
        entries.truncate(last);
    }
    Some(migrated)
}

/// `release` and `release_strided` of this copy's table, on a span's fields as above.
#[inline(never)]
fn local_release_span(start: usize, end: usize, period: usize, width: usize, exclusive: bool) {
    let span = Span::strided(start, end, period, width);
    LOCAL.with(|entries| {
        // Not found: registered in the shared table by `local_acquire` after the switch.
        let forward = remove_span(entries, span, exclusive).unwrap_or(true);
        if let (true, Some(shared)) = (forward, switched()) {
            // SAFETY: releases the span's registration in `shared` (migrated or forwarded).
            unsafe { shared.release_span(span, exclusive) };
        }
    })
}

unsafe extern "C" fn local_release(_state: *mut c_void, start: usize, end: usize, exclusive: bool) {
    local_release_span(start, end, 0, 0, exclusive)
}

unsafe extern "C" fn local_release_strided(
    _state: *mut c_void,
    start: usize,
    end: usize,
    period: usize,
    width: usize,
    exclusive: bool,
) {
    local_release_span(start, end, period, width, exclusive)
}

/// This copy's own table.
static LOCAL_API: BorrowApi = BorrowApi {
    version: BORROW_API_VERSION,
    state: ptr::null_mut(),
    acquire: local_acquire,
    release: local_release,
    acquire_strided: local_acquire_strided,
    release_strided: local_release_strided,
};

/// The table in use; NULL until the first borrow or [`install`].
static CURRENT: AtomicPtr<BorrowApi> = AtomicPtr::new(ptr::null_mut());

/// The table this copy's borrows go to now: the installed one, or its own.
pub(crate) fn current_api() -> &'static BorrowApi {
    let p = CURRENT.load(Ordering::Acquire);
    if p.is_null() {
        let local = &LOCAL_API as *const BorrowApi as *mut BorrowApi;
        let _ =
            CURRENT.compare_exchange(ptr::null_mut(), local, Ordering::AcqRel, Ordering::Acquire);
        // SAFETY: CURRENT holds NULL or a table that lives for the process.
        return unsafe { &*CURRENT.load(Ordering::Acquire) };
    }
    // SAFETY: as above.
    unsafe { &*p }
}

/// Why [`install`] refused to switch tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // used by the layers above safe/
pub(crate) enum InstallError {
    /// This copy already uses another copy's table.
    AlreadySwitched,
    /// A live borrow conflicts with the shared table (or memory ran out); nothing changed.
    Conflict,
}

/// Makes `api` (another copy's published table) the one this copy's later borrows go to.
///
/// Live local borrows are registered in `api` too, under the lock; a conflict undoes that.
/// Installing the current table does nothing; a copy switches at most once.
///
/// # Safety
/// `api` keeps the [`BorrowApi`] contract, has `version >= 2`, lives for the rest of the
/// process, and never calls back into this copy's table.
#[allow(dead_code)] // used by the layers above safe/
pub(crate) unsafe fn install(api: &'static BorrowApi) -> Result<(), InstallError> {
    LOCAL.with(|entries| {
        let now = CURRENT.load(Ordering::Acquire);
        if ptr::eq(now, api) {
            return Ok(());
        }
        if !now.is_null() && !ptr::eq(now, &LOCAL_API) {
            return Err(InstallError::AlreadySwitched);
        }
        if ptr::eq(api, &LOCAL_API) {
            CURRENT.store(api as *const BorrowApi as *mut BorrowApi, Ordering::Release);
            return Ok(());
        }
        let mut failed = false;
        'migrate: for e in entries.iter_mut() {
            while e.migrated < e.count {
                // SAFETY: `api` keeps the `BorrowApi` contract (this function's precondition).
                if unsafe { api.acquire_span(e.span, e.exclusive) } != ACQUIRED {
                    failed = true;
                    break 'migrate;
                }
                e.migrated += 1;
            }
        }
        if failed {
            for e in entries.iter_mut() {
                while e.migrated > 0 {
                    // SAFETY: releases a registration this migration made in `api`.
                    unsafe { api.release_span(e.span, e.exclusive) };
                    e.migrated -= 1;
                }
            }
            return Err(InstallError::Conflict);
        }
        CURRENT.store(api as *const BorrowApi as *mut BorrowApi, Ordering::Release);
        Ok(())
    })
}

/// One registered borrow; dropping it releases it (and any [`ExternalHold`] after it).
#[derive(Debug)]
pub(crate) struct BorrowToken {
    api: Option<&'static BorrowApi>,
    span: Span,
    /// 1: exclusive (a byte without a niche: a `Result` around a token then keeps its tag
    /// apart, and its copies stay whole words the processor can forward).
    exclusive: u8,
    external: Option<ExternalHold>,
}

/// A borrow in a checker outside this registry (rust-numpy's), released when the token drops.
#[derive(Debug)]
pub(crate) struct ExternalHold {
    /// Releases the external borrow; must not unwind, and may run on any thread.
    pub(crate) release: unsafe fn(*mut c_void, bool),
    /// The checker's key, kept alive by the token's owner.
    pub(crate) ctx: *mut c_void,
}

// SAFETY: `ctx` is only handed back to `release`, which may run on any thread (its contract).
unsafe impl Send for ExternalHold {}
// SAFETY: `&ExternalHold` gives no access to `ctx`'s pointee.
unsafe impl Sync for ExternalHold {}

impl core::fmt::Debug for BorrowApi {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BorrowApi")
            .field("version", &self.version)
            .finish()
    }
}

impl BorrowToken {
    /// A token for an empty range: nothing to release.
    pub(crate) const EMPTY: BorrowToken = BorrowToken {
        api: None,
        span: Span::range(0, 0),
        exclusive: 0,
        external: None,
    };

    /// Whether the token registered bytes (not [`BorrowToken::EMPTY`]).
    pub(crate) fn holds_bytes(&self) -> bool {
        self.api.is_some()
    }

    /// The same token, also holding `hold`, released after the registry's borrow.
    ///
    /// # Safety
    /// `hold` was taken with the kind of the token's registry borrow: one kind byte releases both
    /// (a wrong kind could release another view's registration in a shared table).
    pub(crate) unsafe fn with_external(mut self, hold: ExternalHold) -> Self {
        self.external = Some(hold);
        self
    }

    /// Registers the bytes of elements `low..=high` of `bits` bits, counted from address `first`.
    ///
    /// The caller has validated that the range lies within an `isize` of `first`.
    pub(crate) fn acquire_elements(
        first: usize,
        low: i64,
        high: i64,
        bits: u64,
        exclusive: bool,
    ) -> Result<Self, Error> {
        let bits = bits as i128;
        let start_bit = low as i128 * bits;
        let end_bit = (high as i128 + 1) * bits;
        let start = first.wrapping_add_signed(start_bit.div_euclid(8) as isize);
        let end = first.wrapping_add_signed((end_bit + 7).div_euclid(8) as isize);
        Self::acquire(start, end, exclusive)
    }

    /// Registers a strided view's bytes, as [`Span::strided`] describes them.
    pub(crate) fn acquire_strided(
        start: usize,
        end: usize,
        period: usize,
        width: usize,
        exclusive: bool,
    ) -> Result<Self, Error> {
        if start >= end {
            return Ok(Self::EMPTY);
        }
        Self::acquire_in(
            current_api(),
            Span::strided(start, end, period, width),
            exclusive,
        )
    }

    /// Registers the bytes `start..end` (nothing for an empty range).
    #[inline(always)]
    pub(crate) fn acquire(start: usize, end: usize, exclusive: bool) -> Result<Self, Error> {
        if start >= end {
            return Ok(Self::EMPTY);
        }
        Self::acquire_in(current_api(), Span::range(start, end), exclusive)
    }

    /// Registers the non-empty `span` in `api`.
    #[inline(always)]
    fn acquire_in(api: &'static BorrowApi, span: Span, exclusive: bool) -> Result<Self, Error> {
        // SAFETY: `api` keeps the `BorrowApi` contract (`install`'s precondition, or ours).
        match unsafe { api.acquire_span(span, exclusive) } {
            ACQUIRED => Ok(BorrowToken {
                api: Some(api),
                span,
                exclusive: exclusive as u8,
                external: None,
            }),
            CONFLICT => Err(Error::AlreadyBorrowed { exclusive }),
            _ => Err(Error::OutOfMemory),
        }
    }
}

impl Drop for BorrowToken {
    fn drop(&mut self) {
        if let Some(api) = self.api {
            // SAFETY: releases exactly the registration `acquire` made in this table.
            unsafe { api.release_span(self.span, self.exclusive != 0) };
        }
        if let Some(hold) = self.external.take() {
            // SAFETY: released once; the view's owner keeps `ctx` alive.
            unsafe { (hold.release)(hold.ctx, self.exclusive != 0) };
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod table_tests;
