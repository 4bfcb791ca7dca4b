//! Tests of `managed.rs`: the owner, its deleter and its views.

use super::*;
use crate::safe::managed_views::{External, ExternalApi};
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
        super::super::cpu_device(),
        super::super::dtype_u8(),
        alloc::vec![0],
    );
    // SAFETY: an empty tensor: no memory is described.
    unsafe {
        super::super::pack_owned::<DLManagedTensorVersioned, _>(
            Counted,
            info,
            0,
            super::super::Readers::ExportOnly,
            None,
        )
    }
    .unwrap()
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

static EXT_LOG: AtomicUsize = AtomicUsize::new(0);
static EXT_REFUSE: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// A test checker: counts acquires (x1), releases (x100) and context drops (x10000) in
/// `EXT_LOG`; refuses while `EXT_REFUSE` is set.
unsafe fn ext_acquire(ctx: *mut c_void, exclusive: bool) -> Result<(), Error> {
    assert_eq!(ctx as usize, 0x5EED);
    if EXT_REFUSE.load(Ordering::SeqCst) {
        return Err(Error::AlreadyBorrowed { exclusive });
    }
    EXT_LOG.fetch_add(1, Ordering::SeqCst);
    Ok(())
}
unsafe fn ext_release(ctx: *mut c_void, _exclusive: bool) {
    assert_eq!(ctx as usize, 0x5EED);
    EXT_LOG.fetch_add(100, Ordering::SeqCst);
}
unsafe fn ext_drop(ctx: *mut c_void) {
    assert_eq!(ctx as usize, 0x5EED);
    EXT_LOG.fetch_add(10_000, Ordering::SeqCst);
}
static EXT_API: ExternalApi = ExternalApi {
    acquire: ext_acquire,
    release: ext_release,
    drop_ctx: ext_drop,
};

/// Every view of an owner with an external checker takes its borrow after the registry's and
/// releases it with the view; a refusal refuses the view (and leaves no registry borrow);
/// the context is released once, when the owner drops or gives the tensor up.
#[test]
fn an_external_checker_sees_every_view_and_its_context_is_released_once() {
    let external = External {
        api: &EXT_API,
        ctx: 0x5EED as *mut c_void,
    };
    let mut t = crate::safe::Export::new(alloc::vec![1u8, 2, 3])
        .versioned()
        .unwrap();
    // SAFETY: the test context is a plain number the test functions only compare.
    unsafe { t.set_external(external) };
    EXT_LOG.store(0, Ordering::SeqCst);
    {
        let view = t.as_slice::<u8>().unwrap();
        assert_eq!(*view, [1, 2, 3]);
        assert_eq!(EXT_LOG.load(Ordering::SeqCst), 1);
    }
    assert_eq!(EXT_LOG.load(Ordering::SeqCst), 101);
    drop(t.as_mut_slice::<u8>().unwrap());
    assert_eq!(EXT_LOG.load(Ordering::SeqCst), 202);
    drop(t.copy().unwrap());
    assert_eq!(EXT_LOG.load(Ordering::SeqCst), 303);
    EXT_REFUSE.store(true, Ordering::SeqCst);
    assert_eq!(
        t.as_mut_slice::<u8>().unwrap_err(),
        Error::AlreadyBorrowed { exclusive: true }
    );
    EXT_REFUSE.store(false, Ordering::SeqCst);
    // The refused view left no registry borrow behind.
    drop(t.as_mut_slice::<u8>().unwrap());
    assert_eq!(EXT_LOG.load(Ordering::SeqCst), 404);
    drop(t);
    assert_eq!(
        EXT_LOG.load(Ordering::SeqCst),
        10_404,
        "context released once, on drop"
    );
    // Giving the tensor up releases the context too; setting a second one releases the first.
    let mut t = crate::safe::Export::new(alloc::vec![0u8])
        .versioned()
        .unwrap();
    // SAFETY: as above.
    unsafe {
        t.set_external(external);
        t.set_external(external);
    }
    assert_eq!(EXT_LOG.load(Ordering::SeqCst), 20_404);
    let raw = t.into_raw();
    assert_eq!(EXT_LOG.load(Ordering::SeqCst), 30_404);
    // SAFETY: our own export, deleted once.
    unsafe { ((*raw).deleter.unwrap())(raw) };
    assert_eq!(EXT_LOG.load(Ordering::SeqCst), 30_404);
}
