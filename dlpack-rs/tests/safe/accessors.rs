//! Every public accessor of an owner and of its views answers exactly: the kind, the flags as
//! the owner grants them, the raw struct, the run-time kind's conversions, `Debug`, and the
//! guards' comparisons and iterators.

use std::sync::atomic::Ordering;

use dlpack_rs::ffi::{
    DLManagedTensor, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_READ_ONLY,
};
use dlpack_rs::safe::{
    cpu_device, dtype_f32, pack, pack_versioned, AnyManaged, Export, ManagedTensor,
    ManagedTensorVersioned,
};

use crate::counted::counted;

#[test]
fn the_kind_is_the_producers() {
    let legacy = Export::new(vec![1u8]).legacy().unwrap();
    let versioned = Export::new(vec![1u8]).versioned().unwrap();
    assert!(!legacy.is_versioned());
    assert!(versioned.is_versioned());
    assert!(!legacy.into_any().is_versioned());
    assert!(AnyManaged::from(versioned).is_versioned());
}

#[test]
fn is_copied_is_the_producers_flag() {
    let t = Export::new(vec![1.0f32, 2.0]).versioned().unwrap();
    assert!(!t.is_copied());
    assert!(!Export::new(vec![1u8]).legacy().unwrap().is_copied());
    let c = t.copy().unwrap();
    assert!(c.is_copied());
    assert_eq!(c.flags(), DLPACK_FLAG_BITMASK_IS_COPIED);
    // Read-only does not make a tensor copied, nor copied read-only.
    let r = t.into_read_only();
    assert!(!r.is_copied());
    assert!(!c.is_read_only());
}

#[test]
fn into_read_only_keeps_a_producers_read_only_flag() {
    let t = Export::new(vec![1u8, 2]).read_only().versioned().unwrap();
    assert_eq!(t.flags(), DLPACK_FLAG_BITMASK_READ_ONLY);
    let t = t.into_read_only();
    assert_eq!(t.flags(), DLPACK_FLAG_BITMASK_READ_ONLY);
    assert!(t.is_read_only());
    // A copied producer's flag stays next to the owner's READ_ONLY.
    let c = t.copy().unwrap().into_read_only();
    assert_eq!(
        c.flags(),
        DLPACK_FLAG_BITMASK_IS_COPIED | DLPACK_FLAG_BITMASK_READ_ONLY
    );
    // Twice changes nothing.
    let c = c.into_read_only();
    assert_eq!(
        c.flags(),
        DLPACK_FLAG_BITMASK_IS_COPIED | DLPACK_FLAG_BITMASK_READ_ONLY
    );
    // The flag is the owner's: a writable tensor reports none.
    assert_eq!(Export::new(vec![1u8]).versioned().unwrap().flags(), 0);
}

#[test]
fn into_raw_of_a_writable_versioned_owner_leaves_its_flags_alone() {
    let (keep, info, drops) = counted(3);
    let raw = pack_versioned(keep, info, DLPACK_FLAG_BITMASK_IS_COPIED);
    // SAFETY: a fresh export, owned here.
    let t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
    let back = t.into_raw();
    assert_eq!(back, raw);
    // SAFETY: ours again (into_raw called no deleter); deleted once.
    unsafe {
        assert_eq!((*back).flags, DLPACK_FLAG_BITMASK_IS_COPIED);
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        ((*back).deleter.unwrap())(back);
    }
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn into_raw_of_a_read_only_legacy_owner_leaves_the_struct_alone() {
    let (keep, info, drops) = counted(3);
    let raw = pack(keep, info);
    // SAFETY: a fresh export, owned here; its fields are read before and after.
    let before = unsafe { std::ptr::read(raw) };
    // SAFETY: as above.
    let t = unsafe { ManagedTensor::from_raw(raw) }
        .unwrap()
        .into_read_only();
    assert!(t.is_read_only());
    assert_eq!(t.flags(), DLPACK_FLAG_BITMASK_READ_ONLY);
    let back: *mut DLManagedTensor = t.into_raw();
    assert_eq!(back, raw);
    // SAFETY: ours again; read, then deleted once.
    unsafe {
        let after = &*back;
        assert_eq!(after.dl_tensor.shape, before.dl_tensor.shape);
        assert_eq!(*after.dl_tensor.shape, 3);
        assert_eq!(after.dl_tensor.strides, before.dl_tensor.strides);
        assert_eq!(after.dl_tensor.data, before.dl_tensor.data);
        assert_eq!(after.dl_tensor.ndim, 1);
        assert_eq!(after.dl_tensor.byte_offset, 0);
        assert_eq!(after.manager_ctx, before.manager_ctx);
        (after.deleter.unwrap())(back);
    }
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn as_raw_is_the_owned_struct() {
    let (keep, info, drops) = counted(2);
    let raw = pack(keep, info);
    // SAFETY: a fresh export, owned here.
    let t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    assert_eq!(t.as_raw(), raw);
    // SAFETY: still owned by `t`, which is alive.
    assert_eq!(unsafe { (*t.as_raw()).dl_tensor.ndim }, 1);
    drop(t);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "as_raw keeps ownership");

    let (keep, info, drops) = counted(2);
    let raw: *mut DLManagedTensorVersioned = pack_versioned(keep, info, 0);
    // SAFETY: as above.
    let t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
    assert_eq!(t.as_raw(), raw);
    // SAFETY: as above.
    assert_eq!(unsafe { (*t.as_raw()).version.major }, 1);
    drop(t);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn any_managed_views_and_conversions_follow_the_run_time_kind() {
    let legacy = Export::new(vec![1u8, 2, 3]).legacy().unwrap();
    let raw = legacy.as_raw();
    let any = legacy.into_any();
    assert!(any.as_versioned().is_none());
    let inner = any.as_legacy().expect("a legacy tensor");
    assert_eq!(inner.as_raw(), raw);
    assert_eq!(inner.as_slice::<u8>().unwrap(), &[1, 2, 3]);
    let any = any.into_versioned().expect_err("not versioned");
    assert!(!any.is_versioned());
    let legacy = any.into_legacy().expect("legacy");
    assert_eq!(legacy.as_raw(), raw);

    let versioned = Export::new(vec![4u8, 5]).read_only().versioned().unwrap();
    let raw = versioned.as_raw();
    let any = AnyManaged::from(versioned);
    assert!(any.as_legacy().is_none());
    let inner = any.as_versioned().expect("a versioned tensor");
    assert_eq!(inner.as_raw(), raw);
    assert_eq!(inner.flags(), DLPACK_FLAG_BITMASK_READ_ONLY);
    let any = any.into_legacy().expect_err("versioned");
    let versioned = any.into_versioned().expect("versioned");
    assert_eq!(versioned.as_raw(), raw);
    assert_eq!(versioned.as_slice::<u8>().unwrap(), &[4, 5]);
}

#[test]
fn debug_shows_the_metadata() {
    let t = Export::new(vec![0.0f32; 6])
        .shape(&[2, 3])
        .strides(&[1, 2])
        .read_only()
        .versioned()
        .unwrap();
    assert_eq!(
        format!("{t:?}"),
        format!(
            "Tensor {{ shape: [2, 3], strides: Some([1, 2]), dtype: {:?}, device: {:?}, \
             byte_offset: 0, flags: 1 }}",
            dtype_f32(),
            cpu_device()
        )
    );
    let mut w = Export::new(vec![1u8, 2]).legacy().unwrap();
    assert_eq!(format!("{:?}", w.as_slice::<u8>().unwrap()), "[1, 2]");
    assert_eq!(format!("{:?}", w.as_mut_slice::<u8>().unwrap()), "[1, 2]");
}

#[test]
// `guard == &[1, 2, 3]` is written out on purpose: the `PartialEq<&[T; N]>` impls are under test.
#[allow(clippy::op_ref)]
fn guards_compare_as_their_slices() {
    let mut a = Export::new(vec![1u8, 2, 3]).versioned().unwrap();
    let b = Export::new(vec![1u8, 2, 3]).versioned().unwrap();
    let c = Export::new(vec![1u8, 2, 4]).versioned().unwrap();
    let (rb, rc) = (b.as_slice::<u8>().unwrap(), c.as_slice::<u8>().unwrap());
    let same: &[u8] = &[1, 2, 3];
    let other: &[u8] = &[1, 2, 4];
    // ReadGuard against every right-hand side, equal and not.
    let ra = a.as_slice::<u8>().unwrap();
    assert!(ra == rb && ra != rc);
    assert!(ra == *same && ra != *other);
    assert!(ra == same && ra != other);
    assert!(ra == [1, 2, 3] && ra != [1, 2, 4]);
    assert!(ra == &[1, 2, 3] && ra != &[1, 2, 4]);
    assert!(ra == vec![1, 2, 3] && ra != vec![1, 2, 4]);
    assert_eq!(ra.as_ref(), same);
    assert_eq!((&ra).into_iter().copied().collect::<Vec<_>>(), same);
    drop(ra);
    drop((rb, rc));
    // WriteGuard likewise.
    let mut d = Export::new(vec![1u8, 2, 3]).versioned().unwrap();
    let mut e = Export::new(vec![9u8, 2, 3]).versioned().unwrap();
    let wa = a.as_mut_slice::<u8>().unwrap();
    let wd = d.as_mut_slice::<u8>().unwrap();
    let we = e.as_mut_slice::<u8>().unwrap();
    assert!(wa == wd && wa != we);
    assert!(wa == *same && wa != *other);
    assert!(wa == same && wa != other);
    assert!(wa == [1, 2, 3] && wa != [1, 2, 4]);
    assert!(wa == &[1, 2, 3] && wa != &[1, 2, 4]);
    assert!(wa == vec![1, 2, 3] && wa != vec![1, 2, 4]);
    assert_eq!(wa.as_ref(), same);
    assert_eq!((&wa).into_iter().copied().collect::<Vec<_>>(), same);
}

#[test]
fn a_write_slice_iterates_mutably() {
    let mut t = Export::new(vec![1i32, 2, 3]).legacy().unwrap();
    let mut w = t.as_mut_slice::<i32>().unwrap();
    let mut seen = 0;
    for x in &mut w {
        *x *= 10;
        seen += 1;
    }
    assert_eq!(seen, 3);
    assert_eq!(w, [10, 20, 30]);
    drop(w);
    assert_eq!(t.as_slice::<i32>().unwrap(), &[10, 20, 30]);
}

/// `leak_on_drop_if` (kept in this one test: the API may change): the deleter runs unless the
/// predicate says leak at drop time, and the setting travels through conversions of the kind.
#[test]
fn leak_on_drop_if_skips_the_deleter_only_when_asked() {
    fn yes() -> bool {
        true
    }
    fn no() -> bool {
        false
    }
    // Leaked: the deleter did not run; call it here so that nothing stays allocated.
    let (keep, info, drops) = counted(2);
    let raw = pack_versioned(keep, info, 0);
    // SAFETY: a fresh export, owned here.
    let mut t = unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap();
    t.leak_on_drop_if(yes);
    let any = t.into_any();
    drop(any.into_versioned().unwrap());
    assert_eq!(drops.load(Ordering::SeqCst), 0, "leaked");
    // SAFETY: the leaked struct is still alive and nobody else deletes it.
    unsafe { ((*raw).deleter.unwrap())(raw) };
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    // Not leaked: the predicate said no.
    let (keep, info, drops) = counted(2);
    let raw = pack(keep, info);
    // SAFETY: as above.
    let mut t = unsafe { ManagedTensor::from_raw(raw) }.unwrap();
    t.leak_on_drop_if(no);
    drop(t.into_any());
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[cfg(feature = "ndarray")]
#[test]
fn array_guards_compare_and_print_as_their_arrays() {
    use ndarray::{arr1, arr2};
    let mut t = Export::new(vec![1i32, 2, 3, 4])
        .shape(&[2, 2])
        .versioned()
        .unwrap();
    let same = arr2(&[[1, 2], [3, 4]]).into_dyn();
    let other = arr2(&[[1, 2], [3, 5]]).into_dyn();
    {
        let r = t.as_array::<i32>().unwrap();
        assert!(r == same && r != other);
        assert!(r != arr1(&[1, 2, 3, 4]).into_dyn());
        assert_eq!(format!("{r:?}"), format!("{:?}", same.view()));
    }
    let w = t.as_array_mut::<i32>().unwrap();
    assert!(w == same && w != other);
    assert_eq!(format!("{w:?}"), format!("{:?}", same.view()));
}
