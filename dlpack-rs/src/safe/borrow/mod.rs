//! Who may touch which bytes now: the process-wide registry of borrowed address ranges that
//! every typed view of tensor memory takes a borrow in.
//!
//! The rules, and why DLPack needs them, are in [the module docs of `safe`](super#the-borrow-registry):
//! this file is the table (`BorrowApi`) and its spin-locked list of live borrows.

pub(super) mod guard;
pub(crate) mod overlap;

use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use crate::safe::borrow::overlap::Span;
use crate::safe::Error;

/// The version of [`BorrowApi`] this crate publishes; later versions only append fields. A
/// table of version 1 (ranges only) is still read: strided borrows are registered there as
/// their whole range.
pub(crate) const BORROW_API_VERSION: u64 = 2;

/// `acquire`'s answer: the range was registered.
const ACQUIRED: i32 = 0;
/// `acquire`'s answer: an overlapping borrow conflicts.
const CONFLICT: i32 = 1;
/// `acquire`'s answer: the registry could not grow (out of memory).
const NO_MEMORY: i32 = -1;

/// The borrow registry as a C table, shared between copies of this crate in one process.
///
/// `acquire(state, start, end, exclusive)` registers the bytes `start..end` and returns 0, or
/// returns 1 when an overlapping borrow conflicts (nothing registered), or -1 when it could not
/// allocate. `release(state, start, end, exclusive)` removes one registration made with the
/// same arguments. Version 2 appends `acquire_strided(state, start, end, period, width,
/// exclusive)` and `release_strided(...)`: the same for the elements of `width` bytes at
/// `start`, `start + period`, ... below `end` (a `safe::overlap::Span`), which conflict only
/// with borrows that share one of their bytes. All are thread-safe, never block on Python and
/// never unwind.
#[repr(C)]
pub(crate) struct BorrowApi {
    /// [`BORROW_API_VERSION`] of the copy of the crate that made the table.
    pub version: u64,
    /// The table's own state, passed back to its functions.
    pub state: *mut c_void,
    /// Registers a range, see above.
    pub acquire: unsafe extern "C" fn(*mut c_void, usize, usize, bool) -> i32,
    /// Releases a range registered by `acquire`.
    pub release: unsafe extern "C" fn(*mut c_void, usize, usize, bool),
    /// Version 2: registers a strided span, see above.
    pub acquire_strided: unsafe extern "C" fn(*mut c_void, usize, usize, usize, usize, bool) -> i32,
    /// Version 2: releases a span registered by `acquire_strided`.
    pub release_strided: unsafe extern "C" fn(*mut c_void, usize, usize, usize, usize, bool),
}

/// Version 1 of [`BorrowApi`]: its first four fields, as an older copy of the crate publishes
/// them.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(dead_code)] // crate API for the layers above safe/, none of which a featureless build has
pub(crate) struct BorrowApiV1 {
    version: u64,
    state: *mut c_void,
    acquire: unsafe extern "C" fn(*mut c_void, usize, usize, bool) -> i32,
    release: unsafe extern "C" fn(*mut c_void, usize, usize, bool),
}

/// `acquire_strided` of a table made from a version-1 one: never called (`registered` gives such
/// a table whole ranges); answers a conflict (a refusal, never an alias) all the same.
unsafe extern "C" fn v1_no_acquire_strided(
    _: *mut c_void,
    _: usize,
    _: usize,
    _: usize,
    _: usize,
    _: bool,
) -> i32 {
    CONFLICT
}

/// `release_strided` of a table made from a version-1 one: never called.
unsafe extern "C" fn v1_no_release_strided(
    _: *mut c_void,
    _: usize,
    _: usize,
    _: usize,
    _: usize,
    _: bool,
) {
}

/// A table of this crate's layout for a version-1 table (leaked: it lives for the process, as the
/// table it copies).
#[allow(dead_code)] // crate API for the layers above safe/, none of which a featureless build has
pub(crate) fn from_v1(v1: BorrowApiV1) -> &'static BorrowApi {
    alloc::boxed::Box::leak(alloc::boxed::Box::new(BorrowApi {
        version: 1,
        state: v1.state,
        acquire: v1.acquire,
        release: v1.release,
        acquire_strided: v1_no_acquire_strided,
        release_strided: v1_no_release_strided,
    }))
}

impl BorrowApi {
    /// What `api` registers for `span`: the span itself in a table of version 2 or later, its
    /// whole range in one of version 1 (conservative). Release uses the same answer.
    fn registered(&self, span: Span) -> Span {
        if self.version >= 2 {
            span
        } else {
            span.as_range()
        }
    }

    /// Registers `span` (as [`BorrowApi::registered`] says) and returns the table's answer.
    ///
    /// # Safety
    ///
    /// The table keeps the contract above.
    unsafe fn acquire_span(&self, span: Span, exclusive: bool) -> i32 {
        let span = self.registered(span);
        if span.is_range() {
            // SAFETY: the table's contract (this function's).
            unsafe { (self.acquire)(self.state, span.start, span.end, exclusive) }
        } else {
            // SAFETY: as above; a version-2 table has this field (`registered`).
            unsafe {
                (self.acquire_strided)(
                    self.state,
                    span.start,
                    span.end,
                    span.period,
                    span.width,
                    exclusive,
                )
            }
        }
    }

    /// Releases one registration [`BorrowApi::acquire_span`] made of `span`.
    ///
    /// # Safety
    ///
    /// As `acquire_span`, and such a registration is live.
    unsafe fn release_span(&self, span: Span, exclusive: bool) {
        let span = self.registered(span);
        if span.is_range() {
            // SAFETY: the table's contract (this function's).
            unsafe { (self.release)(self.state, span.start, span.end, exclusive) }
        } else {
            // SAFETY: as above; a version-2 table has this field (`registered`).
            unsafe {
                (self.release_strided)(
                    self.state,
                    span.start,
                    span.end,
                    span.period,
                    span.width,
                    exclusive,
                )
            }
        }
    }
}

// SAFETY: the table is immutable after construction; `state` is only used by the table's own
// functions, which synchronise every access with their lock.
unsafe impl Sync for BorrowApi {}

/// One registered range: `count` borrows of the same bytes and kind, `migrated` of which were
/// also registered in the shared table when this copy joined it.
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
    /// Runs `f` on the entries with the lock held. `f` must not take the lock again; it may
    /// call another copy's table (whose functions never call back into this one).
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
        // SAFETY: the lock is held: no other reference to `entries` exists until it is released
        // below, and `f` does not reach this registry again.
        let result = f(unsafe { &mut *self.entries.get() });
        self.locked.store(false, Ordering::Release);
        result
    }
}

static LOCAL: Registry = Registry {
    locked: AtomicBool::new(false),
    entries: UnsafeCell::new(Vec::new()),
};

/// The shared table this copy switched to, if any (read under `LOCAL`'s lock, where `install`
/// writes it).
fn switched() -> Option<&'static BorrowApi> {
    let p = CURRENT.load(Ordering::Acquire);
    // SAFETY: CURRENT only ever holds NULL, `&LOCAL_API` or a table passed to `install`, all of
    // which live for the rest of the process.
    let api = unsafe { p.as_ref() }?;
    (!ptr::eq(api, &LOCAL_API)).then_some(api)
}

/// Registers `start..end` in `entries` (the table logic, under the caller's lock).
#[cfg(test)]
fn add_entry(entries: &mut Vec<Entry>, start: usize, end: usize, exclusive: bool) -> i32 {
    add_span(entries, Span::range(start, end), exclusive)
}

/// Registers `span` in `entries` (the table logic, under the caller's lock): a conflict when a
/// borrow that shares one of its bytes is exclusive, or this one is.
fn add_span(entries: &mut Vec<Entry>, span: Span, exclusive: bool) -> i32 {
    if entries
        .iter()
        .any(|e| (exclusive || e.exclusive) && e.span.shares_byte(&span))
    {
        return CONFLICT;
    }
    if !exclusive {
        if let Some(e) = entries.iter_mut().find(|e| e.span == span && !e.exclusive) {
            e.count += 1;
            return ACQUIRED;
        }
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

/// `acquire` and `acquire_strided` of this copy's table.
fn local_acquire_span(span: Span, exclusive: bool) -> i32 {
    LOCAL.with(|entries| {
        if let Some(shared) = switched() {
            // A borrow that looked up the table just before this copy switched: register it
            // where every borrow goes now.
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
    local_acquire_span(Span::range(start, end), exclusive)
}

unsafe extern "C" fn local_acquire_strided(
    _state: *mut c_void,
    start: usize,
    end: usize,
    period: usize,
    width: usize,
    exclusive: bool,
) -> i32 {
    local_acquire_span(Span::strided(start, end, period, width), exclusive)
}

/// Removes one registration of `start..end` from `entries`; `Some(migrated)` when found, with
/// whether that one had been registered in a shared table too.
#[cfg(test)]
fn remove_entry(
    entries: &mut Vec<Entry>,
    start: usize,
    end: usize,
    exclusive: bool,
) -> Option<bool> {
    remove_span(entries, Span::range(start, end), exclusive)
}

/// Removes one registration of `span` from `entries`; `Some(migrated)` when found, with
/// whether that one had been registered in a shared table too.
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
        entries.swap_remove(i);
    }
    Some(migrated)
}

/// `release` and `release_strided` of this copy's table.
fn local_release_span(span: Span, exclusive: bool) {
    LOCAL.with(|entries| {
        // Not found: registered in the shared table by `local_acquire` after the switch.
        let forward = remove_span(entries, span, exclusive).unwrap_or(true);
        if let (true, Some(shared)) = (forward, switched()) {
            // SAFETY: releases the registration made in `shared` for this span (by `install`'s
            // migration or by a forwarded `local_acquire`).
            unsafe { shared.release_span(span, exclusive) };
        }
    })
}

unsafe extern "C" fn local_release(_state: *mut c_void, start: usize, end: usize, exclusive: bool) {
    local_release_span(Span::range(start, end), exclusive)
}

unsafe extern "C" fn local_release_strided(
    _state: *mut c_void,
    start: usize,
    end: usize,
    period: usize,
    width: usize,
    exclusive: bool,
) {
    local_release_span(Span::strided(start, end, period, width), exclusive)
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

/// This copy's own table, for publishing it to other copies.
#[allow(dead_code)] // crate API for the layers above safe/, none of which a featureless build has
pub(crate) fn local_api() -> &'static BorrowApi {
    &LOCAL_API
}

/// The table borrows go to: the installed one, or this copy's own.
fn current() -> &'static BorrowApi {
    let p = CURRENT.load(Ordering::Acquire);
    if p.is_null() {
        let local = &LOCAL_API as *const BorrowApi as *mut BorrowApi;
        let _ =
            CURRENT.compare_exchange(ptr::null_mut(), local, Ordering::AcqRel, Ordering::Acquire);
        // SAFETY: CURRENT only ever holds NULL, `&LOCAL_API` or a table passed to `install`,
        // all of which live for the rest of the process.
        return unsafe { &*CURRENT.load(Ordering::Acquire) };
    }
    // SAFETY: as above.
    unsafe { &*p }
}

/// Why [`install`] refused to switch tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // crate API for the layers above safe/, none of which a featureless build has
pub(crate) enum InstallError {
    /// This copy already uses another copy's table: it never switches twice.
    AlreadySwitched,
    /// A live borrow of this copy conflicts with one in the shared table (or memory ran out):
    /// nothing was switched, and the migration was undone.
    Conflict,
}

/// Makes `api` the table every later borrow of this copy goes to (the process-wide one that
/// another copy of the crate published). Under this copy's lock, every borrow live in its own
/// table is registered in `api` too (so other copies see it), and later releases of those are
/// forwarded there; a borrow that looked up the old table just before the switch is forwarded
/// by `local_acquire`. Installing the table already in use does nothing; a copy that switched
/// never switches again; a migration that meets a conflicting borrow is undone and reported.
///
/// # Safety
///
/// `api` must be a table made by a copy of this crate (or one that keeps the contract written on
/// [`BorrowApi`]), with `version >= 1`, that lives for the rest of the process, and that never
/// calls back into this copy's table (a copy that published its own table never installs
/// another, see the Python glue's `join`).
#[allow(dead_code)] // crate API for the layers above safe/, none of which a featureless build has
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

/// The table this copy's borrows go to now (its own until it joins another's).
#[allow(dead_code)] // crate API for the layers above safe/, none of which a featureless build has
pub(crate) fn current_api() -> &'static BorrowApi {
    current()
}

/// One registered borrow of `start..end`; dropping it releases the range (and then the
/// matching borrow of an external checker, when one was taken with it: see
/// [`BorrowToken::with_external`]).
#[derive(Debug)]
pub(crate) struct BorrowToken {
    api: Option<&'static BorrowApi>,
    span: Span,
    exclusive: bool,
    external: Option<ExternalHold>,
}

/// A borrow taken in a checker outside this registry (rust-numpy's, for memory of a numpy
/// array), released by `release(ctx, exclusive)` when the token drops.
#[derive(Debug)]
pub(crate) struct ExternalHold {
    /// Releases the external borrow; must not unwind, and may run on any thread.
    pub(crate) release: unsafe fn(*mut c_void, bool),
    /// What the external checker keys by, kept alive by the token's owner while it lives.
    pub(crate) ctx: *mut c_void,
    /// Whether the external borrow is exclusive.
    pub(crate) exclusive: bool,
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
    /// A token for an empty range: nothing to register, nothing to release.
    pub(crate) const EMPTY: BorrowToken = BorrowToken {
        api: None,
        span: Span::range(0, 0),
        exclusive: false,
        external: None,
    };

    /// The same token, also holding `hold` (an external borrow taken after this one), which is
    /// released after the registry's range when the token drops.
    #[allow(dead_code)] // crate API for the layers above safe/, none of which a featureless build has
    pub(crate) fn with_external(mut self, hold: ExternalHold) -> Self {
        self.external = Some(hold);
        self
    }

    /// Registers every byte of the elements `low..=high` (offsets in elements of `bits` bits
    /// from the element at address `first`; the first byte rounds down, the end up).
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

    /// Registers the bytes of elements of `width` bytes at `start`, `start + period`, ...
    /// below `end` (a whole range when they leave no gap; nothing when it is empty): a strided
    /// view's addressed bytes, as [`Span`] describes them.
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
            current(),
            Span::strided(start, end, period, width),
            exclusive,
        )
    }

    /// Registers the bytes `start..end` (nothing for an empty range).
    pub(crate) fn acquire(start: usize, end: usize, exclusive: bool) -> Result<Self, Error> {
        if start >= end {
            return Ok(Self::EMPTY);
        }
        Self::acquire_in(current(), Span::range(start, end), exclusive)
    }

    /// Registers the non-empty `span` in `api`, mapping its answer to a token or an error.
    fn acquire_in(api: &'static BorrowApi, span: Span, exclusive: bool) -> Result<Self, Error> {
        // SAFETY: `api` keeps the `BorrowApi` contract (`install`'s precondition, or ours).
        match unsafe { api.acquire_span(span, exclusive) } {
            ACQUIRED => Ok(BorrowToken {
                api: Some(api),
                span,
                exclusive,
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
            unsafe { api.release_span(self.span, self.exclusive) };
        }
        if let Some(hold) = self.external.take() {
            // SAFETY: releases the external borrow taken with this token, once; its context is
            // kept alive by the owner the token's view borrows (`Managed`'s external hook).
            unsafe { (hold.release)(hold.ctx, hold.exclusive) };
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod table_tests;
