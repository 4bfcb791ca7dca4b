//! The raw export route: [`pack`], [`pack_versioned`] and their `try_` forms.

use core::ptr::NonNull;

use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned};
use crate::safe::export::block::{build_validated, PackAs, Readers};
use crate::safe::{Error, Managed, TensorInfo, Validated};

/// Wraps `keepalive` and `info` in a legacy [`DLManagedTensor`] whose deleter drops `keepalive`.
///
/// # Panics
/// If `info` is invalid (see [`TensorInfo::numel`]); [`try_pack`] returns the error instead.
///
/// ```
/// use dlpack_rs::safe::{pack, cpu_device, dtype_f32, TensorInfo};
///
/// let mut data = vec![1.0f32, 2.0, 3.0, 4.0];
/// let info = TensorInfo::contiguous(data.as_mut_ptr() as *mut _, cpu_device(), dtype_f32(), vec![2, 2]);
/// let mt: *mut dlpack_rs::ffi::DLManagedTensor = pack(data, info);
/// unsafe { ((*mt).deleter.unwrap())(mt) };
/// ```
pub fn pack<K: Send + 'static>(keepalive: K, info: TensorInfo) -> *mut DLManagedTensor {
    match try_pack(keepalive, info) {
        Ok(ptr) => ptr,
        Err(e) => panic!("dlpack_rs::safe::pack: invalid TensorInfo: {e}"),
    }
}

/// Like [`pack`], returning an error for invalid metadata (and dropping `keepalive`).
pub fn try_pack<K: Send + 'static>(
    keepalive: K,
    info: TensorInfo,
) -> Result<*mut DLManagedTensor, Error> {
    let info = Validated::new(info)?;
    build_validated::<DLManagedTensor, K>(keepalive, info, 0, Readers::ExportOnly, None, false)
        .map(NonNull::as_ptr)
}

/// As [`pack`], for a [`DLManagedTensorVersioned`] with `flags` (`DLPACK_FLAG_BITMASK_*`).
///
/// # Panics
/// If `info` is invalid; [`try_pack_versioned`] returns the error instead.
pub fn pack_versioned<K: Send + 'static>(
    keepalive: K,
    info: TensorInfo,
    flags: u64,
) -> *mut DLManagedTensorVersioned {
    match try_pack_versioned(keepalive, info, flags) {
        Ok(ptr) => ptr,
        Err(e) => panic!("dlpack_rs::safe::pack_versioned: invalid TensorInfo: {e}"),
    }
}

/// Like [`pack_versioned`], returning an error for invalid metadata (and dropping `keepalive`).
pub fn try_pack_versioned<K: Send + 'static>(
    keepalive: K,
    info: TensorInfo,
    flags: u64,
) -> Result<*mut DLManagedTensorVersioned, Error> {
    let info = Validated::new(info)?;
    build_validated::<DLManagedTensorVersioned, K>(
        keepalive,
        info,
        flags,
        Readers::ExportOnly,
        None,
        false,
    )
    .map(NonNull::as_ptr)
}

/// [`try_pack_versioned`] returning an owner; `data_of` and `readers` as in [`build_validated`].
///
/// # Safety
/// The metadata (with `data_of`'s pointer) describes initialised memory on its device, kept
/// valid and in place by `keepalive`, written by nobody but consumers and registered views.
/// With [`Readers::ExportOnly`] nothing but the export reaches it. Unless `flags` has
/// `READ_ONLY` (always for a legacy struct), the pointer carries write permission.
pub(crate) unsafe fn pack_validated<M: PackAs, K: Send + 'static>(
    keepalive: K,
    validated: Validated,
    flags: u64,
    readers: Readers,
    data_of: Option<fn(&mut K) -> *mut core::ffi::c_void>,
) -> Result<Managed<M>, Error> {
    let ptr = build_validated::<M, K>(keepalive, validated, flags, readers, data_of, false)?;
    // SAFETY: a block of kind `M` (versioned exactly when it has flags), owned by nobody else,
    // built from validated metadata; the memory keeps this function's contract.
    Ok(unsafe { Managed::from_parts(ptr.cast(), M::HAS_FLAGS) })
}

/// [`pack_validated`] of metadata not validated yet.
///
/// # Safety
/// As [`pack_validated`].
pub(crate) unsafe fn pack_owned<M: PackAs, K: Send + 'static>(
    keepalive: K,
    info: TensorInfo,
    flags: u64,
    readers: Readers,
    data_of: Option<fn(&mut K) -> *mut core::ffi::c_void>,
) -> Result<Managed<M>, Error> {
    let validated = Validated::new(info)?;
    // SAFETY: forwarded from this function's contract.
    unsafe { pack_validated::<M, K>(keepalive, validated, flags, readers, data_of) }
}
