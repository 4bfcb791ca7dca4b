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
    assert_eq!(
        (t[0].span.start, t[0].span.end, t[0].count),
        (0x30, 0x40, 1)
    );
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
unsafe extern "C" fn answer_strided<const ANSWER: i32>(
    _: *mut c_void,
    _: usize,
    _: usize,
    _: usize,
    _: usize,
    _: bool,
) -> i32 {
    ANSWER
}
unsafe extern "C" fn no_strided_release(
    _: *mut c_void,
    _: usize,
    _: usize,
    _: usize,
    _: usize,
    _: bool,
) {
    unreachable!("the fake tables register ranges only");
}
macro_rules! fake {
    ($answer:expr) => {{
        static API: BorrowApi = BorrowApi {
            version: BORROW_API_VERSION,
            state: ptr::null_mut(),
            acquire: answer::<{ $answer }>,
            release: count_release,
            acquire_strided: answer_strided::<{ $answer }>,
            release_strided: no_strided_release,
        };
        &API
    }};
}

#[test]
fn a_token_maps_the_tables_answers() {
    let ok = BorrowToken::acquire_in(fake!(ACQUIRED), Span::range(0x40, 0x48), true).unwrap();
    assert_eq!((ok.span.start, ok.span.end, ok.exclusive), (0x40, 0x48, 1));
    assert_eq!(RELEASES.load(Ordering::SeqCst), 0);
    drop(ok);
    assert_eq!(RELEASES.load(Ordering::SeqCst), 1, "dropping releases once");
    for exclusive in [false, true] {
        assert_eq!(
            BorrowToken::acquire_in(fake!(CONFLICT), Span::range(0x40, 0x48), exclusive)
                .unwrap_err(),
            Error::AlreadyBorrowed { exclusive }
        );
    }
    assert_eq!(
        BorrowToken::acquire_in(fake!(NO_MEMORY), Span::range(0x40, 0x48), true).unwrap_err(),
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
    assert_eq!((t.span.start, t.span.end), (first - 8, first + 8));
    assert!(!probe(first - 8, first - 7) && !probe(first + 7, first + 8));
    assert!(probe(first - 9, first - 8) && probe(first + 8, first + 9));
    drop(t);
    // 4-bit elements -3..=2: bits -12..12, bytes first-2 .. first+2.
    let t = BorrowToken::acquire_elements(first, -3, 2, 4, false).unwrap();
    assert_eq!((t.span.start, t.span.end), (first - 2, first + 2));
    drop(t);
    // 4-bit elements 1..=2: bits 4..12, bytes first .. first+2.
    let t = BorrowToken::acquire_elements(first, 1, 2, 4, true).unwrap();
    assert_eq!(
        (t.span.start, t.span.end, t.exclusive),
        (first, first + 2, 1)
    );
    drop(t);
    // One element of 12 bits at index 1: bits 12..24, bytes first+1 .. first+3.
    let t = BorrowToken::acquire_elements(first, 1, 1, 12, false).unwrap();
    assert_eq!((t.span.start, t.span.end), (first + 1, first + 3));
    drop(t);
    assert!(probe(first - 16, first + 16));
}

#[test]
fn token_and_table_debug_name_their_fields() {
    let api = fake!(ACQUIRED);
    assert_eq!(format!("{api:?}"), "BorrowApi { version: 2 }");
    assert_eq!(
        format!("{:?}", BorrowToken::EMPTY),
        "BorrowToken { api: None, span: Span { start: 0, end: 0, period: 0, width: 0 }, exclusive: 0, external: None }"
    );
}

#[test]
fn strided_borrows_conflict_only_on_shared_bytes() {
    // z[::2] and z[1::2] of 16 float32: disjoint exclusive borrows; either meets the whole.
    let mut t = table();
    let even = Span::strided(0x1000, 0x1000 + 15 * 8 + 4, 8, 4);
    let odd = Span::strided(0x1004, 0x1004 + 15 * 8 + 4, 8, 4);
    assert_eq!(add_span(&mut t, even, true), ACQUIRED);
    assert_eq!(add_span(&mut t, odd, true), ACQUIRED);
    assert_eq!(add_span(&mut t, even, false), CONFLICT);
    assert_eq!(add_entry(&mut t, 0x1004, 0x1005, false), CONFLICT);
    assert_eq!(add_entry(&mut t, 0x1000, 0x1080, false), CONFLICT);
    // The bytes past the last element are free.
    assert_eq!(add_entry(&mut t, 0x1000 + 16 * 8, 0x1100, true), ACQUIRED);
    // A release finds its own span, not a range of the same ends.
    assert_eq!(remove_entry(&mut t, even.start, even.end, true), None);
    assert_eq!(remove_span(&mut t, even, true), Some(false));
    assert_eq!(add_entry(&mut t, 0x1000, 0x1004, true), ACQUIRED);
    // Shared borrows of one span merge; of another span with the same ends they do not.
    let mut t = table();
    assert_eq!(add_span(&mut t, odd, false), ACQUIRED);
    assert_eq!(add_span(&mut t, odd, false), ACQUIRED);
    assert_eq!(add_entry(&mut t, odd.start, odd.end, false), ACQUIRED);
    assert_eq!(t.len(), 2);
    assert_eq!(t[0].count, 2);
}

#[test]
fn strided_views_register_their_progression() {
    // Addresses of their own (the process-wide registry is shared with the other tests).
    let first = 0x30_0000usize as *mut c_void;
    let f32 = crate::safe::dtype_f32();
    let even = crate::safe::import::views::addressed_token(first, &[8], &[2], f32, true).unwrap();
    assert_eq!(
        even.span,
        Span::strided(0x30_0000, 0x30_0000 + 7 * 8 + 4, 8, 4)
    );
    let odd_first = (0x30_0000usize + 4) as *mut c_void;
    let odd =
        crate::safe::import::views::addressed_token(odd_first, &[8], &[2], f32, true).unwrap();
    // Negative strides start at the lowest element; extent-1 axes do not count.
    let back = (0x30_0100usize + 7 * 8) as *mut c_void;
    let rev =
        crate::safe::import::views::addressed_token(back, &[1, 8], &[3, -2], f32, true).unwrap();
    assert_eq!(
        rev.span,
        Span::strided(0x30_0100, 0x30_0100 + 7 * 8 + 4, 8, 4)
    );
    // Two axes: the gcd of their byte strides (24 and 8 -> 8).
    let rows = (0x30_0200usize) as *mut c_void;
    let two =
        crate::safe::import::views::addressed_token(rows, &[2, 3], &[6, 2], f32, false).unwrap();
    assert_eq!(
        two.span,
        Span::strided(0x30_0200, 0x30_0200 + 24 + 16 + 4, 8, 4)
    );
    // Contiguous and sub-byte layouts register whole ranges.
    let c = crate::safe::import::views::addressed_token(
        rows.wrapping_add(0x100),
        &[4],
        &[1],
        f32,
        true,
    );
    assert!(c.unwrap().span.is_range());
    drop((even, odd, rev, two));
}

#[test]
fn empty_spans_keep_their_kind_apart() {
    // Another copy of the crate (an older release, or any caller of the C table) may register
    // an empty range: it conflicts with nothing, but shared and exclusive registrations of it
    // stay separate entries, so each release finds its own (an unfound release is forwarded to
    // the shared table after a switch, which never had it).
    let mut t = table();
    assert_eq!(add_entry(&mut t, 0x50, 0x50, true), ACQUIRED);
    assert_eq!(add_entry(&mut t, 0x50, 0x50, false), ACQUIRED);
    assert_eq!(add_entry(&mut t, 0x50, 0x50, true), ACQUIRED);
    assert_eq!(add_entry(&mut t, 0x50, 0x50, false), ACQUIRED);
    assert_eq!(t.len(), 3);
    assert_eq!(
        t.iter().map(|e| (e.exclusive, e.count)).collect::<Vec<_>>(),
        [(true, 1), (false, 2), (true, 1)]
    );
    assert_eq!(remove_entry(&mut t, 0x50, 0x50, false), Some(false));
    assert_eq!(remove_entry(&mut t, 0x50, 0x50, false), Some(false));
    assert_eq!(remove_entry(&mut t, 0x50, 0x50, true), Some(false));
    assert_eq!(remove_entry(&mut t, 0x50, 0x50, true), Some(false));
    assert!(t.is_empty());
}

#[test]
fn a_shared_count_never_wraps() {
    // `mem::forget` of guards leaks registrations; a count that wrapped would let the release of
    // one live borrow remove the entry while another still reads (on 32-bit targets 2^32
    // forgotten guards are within reach). A full count refuses instead, without unwinding (a
    // panic would leave the registry's lock held, now that this copy calls its table directly).
    let mut t = table();
    assert_eq!(add_entry(&mut t, 0x10, 0x20, false), ACQUIRED);
    t[0].count = usize::MAX;
    assert_eq!(add_entry(&mut t, 0x10, 0x20, false), NO_MEMORY);
    assert_eq!((t.len(), t[0].count), (1, usize::MAX));
    assert_eq!(add_entry(&mut t, 0x18, 0x19, true), CONFLICT);
    // Other spans are still registered.
    assert_eq!(add_entry(&mut t, 0x10, 0x21, false), ACQUIRED);
}

/// Counts an external checker's releases by kind (shared, exclusive); `ctx` is the counters.
unsafe fn count_external_release(ctx: *mut c_void, exclusive: bool) {
    // SAFETY: every `ctx` handed out below is a `'static` pair of counters.
    let counts = unsafe { &*ctx.cast::<[AtomicUsize; 2]>() };
    counts[usize::from(exclusive)].fetch_add(1, Ordering::SeqCst);
}

#[test]
fn an_external_hold_is_released_once_with_the_kind_it_was_taken_with() {
    // The hold records no kind: the token's `exclusive` is all the release has.
    static COUNTS: [AtomicUsize; 2] = [const { AtomicUsize::new(0) }; 2];
    let hold = || ExternalHold {
        release: count_external_release,
        ctx: (&COUNTS as *const [AtomicUsize; 2]).cast_mut().cast(),
    };
    let counts = || COUNTS.each_ref().map(|c| c.load(Ordering::SeqCst));
    // With a registry borrow (addresses of their own): both go back with one kind, once.
    let base = 0x40_0000usize;
    for exclusive in [true, false] {
        let t = BorrowToken::acquire(base, base + 16, exclusive).unwrap();
        // SAFETY: the hold's kind is `t`'s.
        drop(unsafe { t.with_external(hold()) });
        assert!(
            BorrowToken::acquire(base, base + 16, true).is_ok(),
            "registry borrow released"
        );
    }
    assert_eq!(counts(), [1, 1]);
}
