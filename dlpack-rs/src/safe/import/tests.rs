//! Tests of `safe/import/mod.rs`: the owner, its deleter and its views.

use super::*;
use crate::safe::import::test_checker::{seen, TestChecker};
use core::sync::atomic::{AtomicUsize, Ordering};

static DROPPED: AtomicUsize = AtomicUsize::new(0);

struct Counted;
impl Drop for Counted {
    fn drop(&mut self) {
        DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

fn owner() -> ManagedTensorVersioned {
    let info = TensorInfo::contiguous(
        NonNull::<u8>::dangling().as_ptr().cast(),
        crate::safe::cpu_device(),
        crate::safe::dtype_u8(),
        alloc::vec![0],
    );
    // SAFETY: an empty tensor: no memory is described.
    unsafe {
        crate::safe::pack_owned::<DLManagedTensorVersioned, _>(
            Counted,
            info,
            0,
            crate::safe::Readers::ExportOnly,
            None,
        )
    }
    .unwrap()
}

/// The first element is the data pointer itself, refused where it is not aligned for `T` (the
/// CUDA import's only check of the address it hands on).
#[test]
fn the_first_element_is_the_aligned_data_pointer() {
    static WORDS: [u16; 2] = [7, 9];
    let at = |offset: usize| {
        let info = TensorInfo::contiguous(
            WORDS
                .as_ptr()
                .cast::<u8>()
                .wrapping_add(offset)
                .cast_mut()
                .cast(),
            crate::safe::cpu_device(),
            crate::safe::dtype_u8(),
            alloc::vec![1],
        );
        // SAFETY: one byte of a static, never written through this tensor, alive forever.
        unsafe {
            crate::safe::pack_owned::<DLManagedTensorVersioned, _>(
                (), // not `Counted`: the drop counts of the tests beside this one stay theirs
                info,
                0,
                crate::safe::Readers::ExportOnly,
                None,
            )
        }
        .unwrap()
    };
    let aligned = WORDS.as_ptr().cast_mut();
    assert_eq!(at(0).first_element::<u16>(), Ok(aligned));
    assert_eq!(
        at(1).first_element::<u16>(),
        Err(Error::Misaligned {
            align: 2,
            address: aligned as usize + 1
        })
    );
}

/// The crate's leak guard stays in force whatever a safe caller sets afterwards (a
/// `PyTensor`'s shutdown guard, reachable through `DerefMut`), and travels through every
/// conversion of kind.
#[test]
fn the_crate_guard_cannot_be_replaced_from_safe_code() {
    let before = DROPPED.load(Ordering::SeqCst);
    let mut t = owner();
    t.set_leak_guard(|| true);
    t.leak_on_drop_if(|| false);
    let any = t.into_any();
    let back = any.into_versioned().unwrap();
    let raw = back.as_raw();
    drop(back);
    assert_eq!(
        DROPPED.load(Ordering::SeqCst),
        before,
        "leaked, not deleted"
    );
    // SAFETY: the owner leaked the tensor without calling its deleter: called once here.
    unsafe { ((*raw).deleter.unwrap())(raw) };
    assert_eq!(DROPPED.load(Ordering::SeqCst), before + 1);
    let before = before + 1;
    // Without the guard, the caller's predicate decides alone.
    let mut t = owner();
    t.leak_on_drop_if(|| false);
    drop(t);
    assert_eq!(DROPPED.load(Ordering::SeqCst), before + 1);
    let mut t = owner();
    t.leak_on_drop_if(|| true);
    let raw = t.as_raw();
    drop(t);
    assert_eq!(DROPPED.load(Ordering::SeqCst), before + 1);
    // SAFETY: leaked by the owner, not deleted: deleted once here.
    unsafe { ((*raw).deleter.unwrap())(raw) };
    assert_eq!(DROPPED.load(Ordering::SeqCst), before + 2);
}

/// Every view of an owner with an external checker takes its borrow after the registry's and
/// releases it with the view; a refusal refuses the view (and leaves no registry borrow);
/// the context is released once, when the owner drops or gives the tensor up.
#[test]
fn an_external_checker_sees_every_view_and_its_context_is_released_once() {
    static CHECKER: TestChecker = TestChecker::new();
    let mut t = crate::safe::Export::new(alloc::vec![1u8, 2, 3])
        .versioned()
        .unwrap();
    assert!(t.external().is_none());
    // SAFETY: the checker is static and keeps counts only.
    unsafe { t.set_external(CHECKER.external()) };
    // The owner reports its checker (the numpy layer asks before wrapping it again).
    assert!(t
        .external()
        .is_some_and(|e| core::ptr::eq(e.api, CHECKER.external().api)));
    {
        let view = t.as_slice::<u8>().unwrap();
        assert_eq!(*view, [1, 2, 3]);
        assert_eq!(CHECKER.seen(), seen([1, 0], [0, 0], 0));
    }
    assert_eq!(CHECKER.seen(), seen([1, 0], [1, 0], 0));
    drop(t.as_mut_slice::<u8>().unwrap());
    assert_eq!(CHECKER.seen(), seen([1, 1], [1, 1], 0));
    drop(t.copy().unwrap());
    assert_eq!(CHECKER.seen(), seen([2, 1], [2, 1], 0));
    CHECKER.refuse(true);
    assert_eq!(
        t.as_mut_slice::<u8>().unwrap_err(),
        Error::AlreadyBorrowed { exclusive: true }
    );
    CHECKER.refuse(false);
    // The refused view left no registry borrow behind.
    drop(t.as_mut_slice::<u8>().unwrap());
    assert_eq!(CHECKER.seen(), seen([2, 2], [2, 2], 0));
    drop(t);
    assert_eq!(
        CHECKER.seen(),
        seen([2, 2], [2, 2], 1),
        "context released once, on drop"
    );
    // Giving the tensor up releases the context too; setting a second one releases the first.
    let mut t = crate::safe::Export::new(alloc::vec![0u8])
        .versioned()
        .unwrap();
    // SAFETY: as above.
    unsafe {
        t.set_external(CHECKER.external());
        t.set_external(CHECKER.external());
    }
    assert_eq!(CHECKER.seen().dropped, 2);
    let raw = t.into_raw();
    assert_eq!(CHECKER.seen().dropped, 3);
    // SAFETY: our own export, deleted once.
    unsafe { ((*raw).deleter.unwrap())(raw) };
    assert_eq!(CHECKER.seen(), seen([2, 2], [2, 2], 3));
}
