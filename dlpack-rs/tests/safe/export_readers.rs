//! Exports of memory that Rust may still read hold a shared borrow of their bytes until their
//! deleter runs: a consumer that re-exports the memory writable (torch ignores `READ_ONLY`)
//! cannot get a mutable view of it through this crate meanwhile. A writable export of a buffer
//! the export owns alone holds none.

use std::sync::Arc;

use dlpack_rs::ffi::DLPACK_FLAG_BITMASK_READ_ONLY;
use dlpack_rs::safe::{
    cpu_device, dtype_f32, pack_versioned, try_pack_versioned, Error, Export,
    ManagedTensorVersioned, TensorInfo,
};

/// What torch does with a read-only export: a second, writable managed tensor over the same
/// bytes (its keepalive keeps nothing: the test keeps the memory alive itself).
fn writable_alias(data: *const f32, len: usize) -> ManagedTensorVersioned {
    let info = TensorInfo::contiguous(
        data.cast_mut().cast(),
        cpu_device(),
        dtype_f32(),
        vec![len as i64],
    );
    let raw = pack_versioned((), info, 0);
    // SAFETY: a fresh export owned here, over memory the test keeps alive for as long as the
    // alias lives (writes through it are refused or reach memory the test owns).
    unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap()
}

const REFUSED: Error = Error::AlreadyBorrowed { exclusive: true };

static STATIC_DATA: [f32; 3] = [1.0, 2.0, 3.0];

#[test]
fn static_export_refuses_mutable_views_of_its_bytes() {
    let export = Export::new(&STATIC_DATA[..]).versioned().unwrap();
    assert!(export.is_read_only());
    let mut alias = writable_alias(STATIC_DATA.as_ptr(), 3);
    assert_eq!(alias.as_mut_slice::<f32>().unwrap_err(), REFUSED);
    // A window starting inside the export's bytes conflicts too.
    // SAFETY: in bounds of the static array.
    let mut inner = writable_alias(unsafe { STATIC_DATA.as_ptr().add(2) }, 1);
    assert_eq!(inner.as_mut_slice::<f32>().unwrap_err(), REFUSED);
    // Shared views are fine.
    assert_eq!(*alias.as_slice::<f32>().unwrap(), [1.0, 2.0, 3.0]);
    drop(export);
    // The bytes are read-only memory: no write is tried; the borrow is gone with the export
    // (an exclusive view is granted; dropped unwritten).
    drop(alias.as_mut_slice::<f32>().unwrap());
}

#[test]
fn arc_exports_hold_their_borrow_until_the_deleter_runs() {
    let data: Arc<[f32]> = vec![0.0f32, 1.0, 2.0, 3.0].into();
    let ptr = data.as_ptr();
    let exports: [&dyn Fn() -> ManagedTensorVersioned; 2] =
        [&|| Export::new(data.clone()).versioned().unwrap(), &|| {
            Export::new(Arc::new(data.clone())).versioned().unwrap()
        }];
    for make in exports {
        let export = make();
        let mut alias = writable_alias(ptr, 4);
        assert_eq!(alias.as_mut_slice::<f32>().unwrap_err(), REFUSED);
        // Through the raw pointer, as a consumer holds it: the borrow lives until the deleter.
        let raw = export.into_raw();
        assert_eq!(alias.as_mut_slice::<f32>().unwrap_err(), REFUSED);
        // SAFETY: the export's own deleter, called once, as a consumer does.
        unsafe { ((*raw).deleter.unwrap())(raw) };
        alias.as_mut_slice::<f32>().unwrap()[0] = 0.0; // same value: Rust's reads unchanged
    }
    assert_eq!(*data, [0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn read_only_raw_packs_hold_a_borrow_and_refuse_while_one_is_exclusive() {
    let mut data = vec![5.0f32; 4];
    let ptr = data.as_mut_ptr();
    let info = TensorInfo::contiguous(ptr.cast(), cpu_device(), dtype_f32(), vec![4]);
    let raw = pack_versioned((), info.clone(), DLPACK_FLAG_BITMASK_READ_ONLY);
    let mut alias = writable_alias(ptr, 4);
    assert_eq!(alias.as_mut_slice::<f32>().unwrap_err(), REFUSED);
    // SAFETY: our export's deleter, once.
    unsafe { ((*raw).deleter.unwrap())(raw) };
    // While a mutable view lives, a read-only export of its bytes is refused (it would
    // promise readers a memory being written).
    let view = alias.as_mut_slice::<f32>().unwrap();
    assert_eq!(
        try_pack_versioned((), info.clone(), DLPACK_FLAG_BITMASK_READ_ONLY).unwrap_err(),
        Error::AlreadyBorrowed { exclusive: false }
    );
    assert_eq!(
        Export::new(vec![0.0f32; 4])
            .read_only()
            .versioned()
            .map(|t| t.is_read_only()),
        Ok(true)
    );
    drop(view);
    drop(alias);
    drop(data);
}

#[test]
fn writable_exports_of_owned_buffers_hold_no_borrow() {
    let mut export = Export::new(vec![1.0f32, 2.0]).versioned().unwrap();
    // The export's own mutable view: nothing else holds the bytes.
    export.as_mut_slice::<f32>().unwrap()[0] = 7.0;
    let ptr = export.data_ptr().cast::<f32>();
    let mut alias = writable_alias(ptr, 2);
    // (Two writable owners of one buffer alias only sequentially here.)
    assert_eq!(alias.as_mut_slice::<f32>().unwrap()[0], 7.0);
    drop(alias);
    drop(export);
}

#[cfg(feature = "ndarray")]
#[test]
fn shared_arcarray_exports_hold_a_borrow() {
    use dlpack_rs::IntoDLPack;
    let a = ndarray::ArcArray1::from(vec![1.0f32, 2.0, 3.0]);
    let export = a.clone().into_managed_tensor_versioned().unwrap();
    assert!(export.is_read_only());
    let mut alias = writable_alias(a.as_ptr(), 3);
    assert_eq!(alias.as_mut_slice::<f32>().unwrap_err(), REFUSED);
    drop(export);
    drop(alias.as_mut_slice::<f32>().unwrap());
}
