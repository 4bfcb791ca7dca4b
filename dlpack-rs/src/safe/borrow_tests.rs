//! The registry's table logic on tables of its own (no process-wide state): which ranges
//! conflict, how shared registrations of one range merge and are released, what the C table
//! answers, and how a token maps those answers.

use super::*;
use alloc::format;
use core::sync::atomic::AtomicUsize;

/// A table of its own, for the table logic alone.
fn table() -> Vec<Entry> {
    Vec::new()
}

#[test]
fn the_c_table_answers_0_1_and_minus_1() {
    // The values are the C contract written on `BorrowApi`: other copies of the crate compare
    // against them.
    assert_eq!((ACQUIRED, CONFLICT, NO_MEMORY), (0, 1, -1));
    let mut t = table();
    assert_eq!(add_entry(&mut t, 0x10, 0x20, true), ACQUIRED);
    assert_eq!(add_entry(&mut t, 0x1f, 0x30, false), CONFLICT);
    assert_eq!(add_entry(&mut t, 0x00, 0x11, true), CONFLICT);
    // A refused borrow registers nothing.
    assert_eq!(t.len(), 1);
    assert_eq!(add_entry(&mut t, 0x20, 0x30, true), ACQUIRED);
    assert_eq!(add_entry(&mut t, 0x00, 0x10, false), ACQUIRED);
    assert_eq!(t.len(), 3);
}

#[test]
fn shared_ranges_with_one_common_end_are_separate_entries() {
    for (short, long) in [((0, 16), (0, 64)), ((48, 64), (0, 64))] {
        let mut t = table();
        assert_eq!(add_entry(&mut t, short.0, short.1, false), ACQUIRED);
        assert_eq!(add_entry(&mut t, long.0, long.1, false), ACQUIRED);
        assert_eq!(t.len(), 2, "{short:?} {long:?}");
        // The bytes only the long range covers are borrowed too.
        assert_eq!(add_entry(&mut t, 32, 40, true), CONFLICT);
        // Releasing the short range leaves the long one.
        assert_eq!(remove_entry(&mut t, short.0, short.1, false), Some(false));
        assert_eq!(add_entry(&mut t, 32, 40, true), CONFLICT);
        assert_eq!(add_entry(&mut t, short.0, short.1, true), CONFLICT);
        assert_eq!(remove_entry(&mut t, short.0, short.1, false), None);
        assert_eq!(remove_entry(&mut t, long.0, long.1, false), Some(false));
        assert!(t.is_empty());
        // And the other way round: releasing the long range leaves the short one.
        assert_eq!(add_entry(&mut t, long.0, long.1, false), ACQUIRED);
        assert_eq!(add_entry(&mut t, short.0, short.1, false), ACQUIRED);
        assert_eq!(remove_entry(&mut t, long.0, long.1, false), Some(false));
        assert_eq!(add_entry(&mut t, 32, 40, true), ACQUIRED);
        assert_eq!(add_entry(&mut t, short.0, short.1, true), CONFLICT);
        assert_eq!(t.len(), 2);
    }
}

#[test]
fn shared_borrows_of_one_range_merge_and_release_one_at_a_time() {
    let mut t = table();
    for _ in 0..3 {
        assert_eq!(add_entry(&mut t, 0x100, 0x140, false), ACQUIRED);
    }
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].count, 3);
    for left in [2, 1] {
        assert_eq!(remove_entry(&mut t, 0x100, 0x140, false), Some(false));
        assert_eq!(t[0].count, left);
        assert_eq!(add_entry(&mut t, 0x13f, 0x140, true), CONFLICT);
    }
    assert_eq!(remove_entry(&mut t, 0x100, 0x140, false), Some(false));
    assert!(t.is_empty());
    assert_eq!(remove_entry(&mut t, 0x100, 0x140, false), None);
    // An exclusive registration is never merged (a second one conflicts), nor released by a
    // shared release of the same bytes.
    assert_eq!(add_entry(&mut t, 0x100, 0x140, true), ACQUIRED);
    assert_eq!(add_entry(&mut t, 0x100, 0x140, true), CONFLICT);
    assert_eq!(remove_entry(&mut t, 0x100, 0x140, false), None);
    assert_eq!(add_entry(&mut t, 0x100, 0x101, false), CONFLICT);
    assert_eq!(remove_entry(&mut t, 0x100, 0x140, true), Some(false));
    assert!(t.is_empty());
}

#[test]
fn releases_of_migrated_registrations_are_reported_as_such() {
    let mut t = table();
    assert_eq!(add_entry(&mut t, 0x10, 0x20, false), ACQUIRED);
    assert_eq!(add_entry(&mut t, 0x10, 0x20, false), ACQUIRED);
    assert_eq!(add_entry(&mut t, 0x30, 0x40, false), ACQUIRED);
    // One of the two borrows of 0x10..0x20 was also registered in a shared table.
    t[0].migrated = 1;
    assert_eq!(remove_entry(&mut t, 0x10, 0x20, false), Some(true));
    assert_eq!((t[0].count, t[0].migrated), (1, 0));
    assert_eq!(remove_entry(&mut t, 0x10, 0x20, false), Some(false));
    // The other entry is untouched (and moved into the freed slot).
    assert_eq!(t.len(), 1);
    assert_eq!((t[0].start, t[0].end, t[0].count), (0x30, 0x40, 1));
}

/// A fake table answering `ANSWER` and counting releases.
static RELEASES: AtomicUsize = AtomicUsize::new(0);
unsafe extern "C" fn answer<const ANSWER: i32>(_: *mut c_void, _: usize, _: usize, _: bool) -> i32 {
    ANSWER
}
unsafe extern "C" fn count_release(_: *mut c_void, start: usize, end: usize, exclusive: bool) {
    assert_eq!((start, end, exclusive), (0x40, 0x48, true));
    RELEASES.fetch_add(1, Ordering::SeqCst);
}
macro_rules! fake {
    ($answer:expr) => {{
        static API: BorrowApi = BorrowApi {
            version: BORROW_API_VERSION,
            state: ptr::null_mut(),
            acquire: answer::<{ $answer }>,
            release: count_release,
        };
        &API
    }};
}

#[test]
fn a_token_maps_the_tables_answers() {
    let ok = BorrowToken::acquire_in(fake!(ACQUIRED), 0x40, 0x48, true).unwrap();
    assert_eq!((ok.start, ok.end, ok.exclusive), (0x40, 0x48, true));
    assert_eq!(RELEASES.load(Ordering::SeqCst), 0);
    drop(ok);
    assert_eq!(RELEASES.load(Ordering::SeqCst), 1, "dropping releases once");
    for exclusive in [false, true] {
        assert_eq!(
            BorrowToken::acquire_in(fake!(CONFLICT), 0x40, 0x48, exclusive).unwrap_err(),
            Error::AlreadyBorrowed { exclusive }
        );
    }
    assert_eq!(
        BorrowToken::acquire_in(fake!(NO_MEMORY), 0x40, 0x48, true).unwrap_err(),
        Error::OutOfMemory
    );
    // Nothing was registered by the refusals, so nothing is released.
    assert_eq!(RELEASES.load(Ordering::SeqCst), 1);
    // The empty token releases nothing.
    drop(BorrowToken::EMPTY);
    assert_eq!(RELEASES.load(Ordering::SeqCst), 1);
}

/// `acquire_elements` registers from the byte of the lowest element (rounded down) to the end
/// of the highest (rounded up). Addresses of their own: the process-wide registry is shared
/// with the other tests.
#[test]
fn element_ranges_round_out_to_whole_bytes() {
    let first = 0x20_0000usize;
    let probe = |a: usize, b: usize| BorrowToken::acquire(a, b, true).is_ok();
    // f32 elements -2..=1: bytes first-8 .. first+8.
    let t = BorrowToken::acquire_elements(first, -2, 1, 32, false).unwrap();
    assert_eq!((t.start, t.end), (first - 8, first + 8));
    assert!(!probe(first - 8, first - 7) && !probe(first + 7, first + 8));
    assert!(probe(first - 9, first - 8) && probe(first + 8, first + 9));
    drop(t);
    // 4-bit elements -3..=2: bits -12..12, bytes first-2 .. first+2.
    let t = BorrowToken::acquire_elements(first, -3, 2, 4, false).unwrap();
    assert_eq!((t.start, t.end), (first - 2, first + 2));
    drop(t);
    // 4-bit elements 1..=2: bits 4..12, bytes first .. first+2.
    let t = BorrowToken::acquire_elements(first, 1, 2, 4, true).unwrap();
    assert_eq!((t.start, t.end, t.exclusive), (first, first + 2, true));
    drop(t);
    // One element of 12 bits at index 1: bits 12..24, bytes first+1 .. first+3.
    let t = BorrowToken::acquire_elements(first, 1, 1, 12, false).unwrap();
    assert_eq!((t.start, t.end), (first + 1, first + 3));
    drop(t);
    assert!(probe(first - 16, first + 16));
}

#[test]
fn token_and_table_debug_name_their_fields() {
    let api = fake!(ACQUIRED);
    assert_eq!(format!("{api:?}"), "BorrowApi { version: 1 }");
    assert_eq!(
        format!("{:?}", BorrowToken::EMPTY),
        "BorrowToken { api: None, start: 0, end: 0, exclusive: false, external: None }"
    );
}
