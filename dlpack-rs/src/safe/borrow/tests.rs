//! Tests of `safe/borrow/mod.rs` through the process-wide registry: tokens, conflicts and releases.

use super::*;

#[test]
fn shared_shared_ok_exclusive_conflicts() {
    let a = BorrowToken::acquire(0x1000, 0x1010, false).unwrap();
    let b = BorrowToken::acquire(0x1008, 0x1018, false).unwrap();
    assert_eq!(
        BorrowToken::acquire(0x100f, 0x1011, true).unwrap_err(),
        Error::AlreadyBorrowed { exclusive: true }
    );
    drop(a);
    assert!(BorrowToken::acquire(0x1000, 0x1008, true).is_ok()); // released at once
    assert!(BorrowToken::acquire(0x1000, 0x1009, true).is_err()); // b still lives
    drop(b);
    let c = BorrowToken::acquire(0x1000, 0x1018, true).unwrap();
    assert_eq!(
        BorrowToken::acquire(0x1017, 0x1020, false).unwrap_err(),
        Error::AlreadyBorrowed { exclusive: false }
    );
    // Adjacent ranges do not overlap.
    assert!(BorrowToken::acquire(0x1018, 0x1020, true).is_ok());
    drop(c);
    assert!(BorrowToken::acquire(0x1000, 0x1018, true).is_ok());
}

/// Another copy's table, as `install` meets it.
static OTHER: Registry = Registry {
    locked: AtomicBool::new(false),
    entries: UnsafeCell::new(Vec::new()),
};
unsafe extern "C" fn other_acquire(_: *mut c_void, start: usize, end: usize, ex: bool) -> i32 {
    OTHER.with(|e| add_entry(e, start, end, ex))
}
unsafe extern "C" fn other_release(_: *mut c_void, start: usize, end: usize, ex: bool) {
    OTHER.with(|e| {
        remove_entry(e, start, end, ex);
    })
}
unsafe extern "C" fn other_acquire_strided(
    _: *mut c_void,
    start: usize,
    end: usize,
    period: usize,
    width: usize,
    ex: bool,
) -> i32 {
    OTHER.with(|e| add_span(e, Span::strided(start, end, period, width), ex))
}
unsafe extern "C" fn other_release_strided(
    _: *mut c_void,
    start: usize,
    end: usize,
    period: usize,
    width: usize,
    ex: bool,
) {
    OTHER.with(|e| {
        remove_span(e, Span::strided(start, end, period, width), ex);
    })
}
static OTHER_API: BorrowApi = BorrowApi {
    version: BORROW_API_VERSION,
    state: ptr::null_mut(),
    acquire: other_acquire,
    release: other_release,
    acquire_strided: other_acquire_strided,
    release_strided: other_release_strided,
};

/// Another copy's lookup in its own table.
fn other(start: usize, end: usize, exclusive: bool) -> i32 {
    // SAFETY: a table's own function, called as another copy would.
    unsafe { other_acquire(ptr::null_mut(), start, end, exclusive) }
}

#[test]
fn joining_a_shared_table_carries_live_borrows_over() {
    // A borrow taken in this copy's own table before it joins another copy's table...
    let before = BorrowToken::acquire(0x7000, 0x7100, true).unwrap();
    // SAFETY: OTHER_API is a static table keeping the contract, which never calls back.
    assert_eq!(unsafe { install(&OTHER_API) }, Ok(()));
    // SAFETY: as above; installing it again changes nothing, going back is refused.
    assert_eq!(unsafe { install(&OTHER_API) }, Ok(()));
    // SAFETY: our own table, which the copy no longer uses.
    let back = unsafe { install(&LOCAL_API) };
    assert_eq!(back, Err(InstallError::AlreadySwitched));
    // ...is seen by the other copy (its own lookups) and by this copy's new borrows.
    assert_eq!(other(0x7080, 0x7081, false), CONFLICT);
    assert_eq!(
        BorrowToken::acquire(0x70f0, 0x7200, false).unwrap_err(),
        Error::AlreadyBorrowed { exclusive: false }
    );
    // A borrow that looked up the old table just before the switch is forwarded...
    // SAFETY: this copy's own table function, as a racing `BorrowToken::acquire` calls it.
    let rc = unsafe { local_acquire(ptr::null_mut(), 0xa000, 0xa010, true) };
    assert_eq!(rc, ACQUIRED);
    assert_eq!(other(0xa000, 0xa001, false), CONFLICT);
    // ...and so is its release.
    // SAFETY: releases the registration made just above.
    unsafe { local_release(ptr::null_mut(), 0xa000, 0xa010, true) };
    // Releasing the old borrow releases it in the shared table too.
    drop(before);
    let after = BorrowToken::acquire(0x7000, 0x7100, true).unwrap();
    assert!(core::ptr::eq(after.api.unwrap(), &OTHER_API));
    drop(after);
    assert_eq!(other(0x7000, 0x7100, true), ACQUIRED);
    assert_eq!(other(0xa000, 0xa010, true), ACQUIRED);
    // SAFETY: releases the two registrations made just above.
    unsafe {
        other_release(ptr::null_mut(), 0x7000, 0x7100, true);
        other_release(ptr::null_mut(), 0xa000, 0xa010, true);
    }
}

#[test]
fn empty_ranges_never_conflict() {
    let _all = BorrowToken::acquire(0x9000, 0x9100, true).unwrap();
    assert!(BorrowToken::acquire(0x9010, 0x9010, true).is_ok());
}
