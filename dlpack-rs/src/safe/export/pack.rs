//! The raw export route: [`pack`] / [`pack_versioned`] (and their `try_` forms) wrap a keepalive
//! and a [`TensorInfo`] in a heap-allocated managed tensor and return its raw pointer.

use core::ptr::NonNull;

use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned};
use crate::safe::export::block::{build, build_validated, ManagedStruct, Readers};
use crate::safe::import::{ManagedTensor, ManagedTensorVersioned};
use crate::safe::{Error, TensorInfo, Validated};

/// Wraps `keepalive` and `info` in a heap-allocated legacy [`DLManagedTensor`] whose deleter
/// drops `keepalive` (and the block itself) exactly once.
///
/// The caller hands the pointer to a consumer, which calls `deleter` when done; if it never
/// reaches a consumer, wrap it in [`ManagedTensor::from_raw`] or call the deleter to free it.
///
/// # Panics
///
/// If `info` is invalid (see [`TensorInfo::numel`]); [`try_pack`] returns the error instead.
///
/// ```
/// use dlpack_rs::safe::{pack, cpu_device, dtype_f32, TensorInfo};
///
/// let mut data = vec![1.0f32, 2.0, 3.0, 4.0];
/// let info = TensorInfo::contiguous(data.as_mut_ptr() as *mut _, cpu_device(), dtype_f32(), vec![2, 2]);
/// let mt: *mut dlpack_rs::ffi::DLManagedTensor = pack(data, info);
/// // The consumer calls the deleter exactly once when done.
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
    build::<DLManagedTensor, K>(keepalive, info, 0, Readers::ExportOnly, None).map(NonNull::as_ptr)
}

/// Wraps `keepalive` and `info` in a heap-allocated [`DLManagedTensorVersioned`] stamped with
/// the version this crate implements (1.3) and the given `flags`
/// (`DLPACK_FLAG_BITMASK_*`); its deleter drops `keepalive` exactly once.
///
/// # Panics
///
/// If `info` is invalid; [`try_pack_versioned`] returns the error instead.
///
/// ```
/// use dlpack_rs::ffi::DLPACK_FLAG_BITMASK_READ_ONLY;
/// use dlpack_rs::safe::{pack_versioned, cpu_device, dtype_u8, TensorInfo};
///
/// let mut data = vec![0u8; 6];
/// let info = TensorInfo::contiguous(data.as_mut_ptr().cast(), cpu_device(), dtype_u8(), vec![2, 3]);
/// let mt = pack_versioned(data, info, DLPACK_FLAG_BITMASK_READ_ONLY);
/// unsafe {
///     assert_eq!((*mt).version.minor, 3);
///     ((*mt).deleter.unwrap())(mt);
/// }
/// ```
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
    build::<DLManagedTensorVersioned, K>(keepalive, info, flags, Readers::ExportOnly, None)
        .map(NonNull::as_ptr)
}

/// The managed struct an owned export is packed as, with its owner type.
pub(crate) trait PackAs: ManagedStruct {
    /// The owner of this struct.
    type Owner;
    /// Takes ownership of a block [`build_validated`] made.
    ///
    /// # Safety
    ///
    /// `ptr` came from `build_validated::<Self, _>` and is owned by nobody else; the memory it
    /// describes keeps `pack_validated`'s contract.
    unsafe fn own(ptr: NonNull<Self>) -> Self::Owner;
}

impl PackAs for DLManagedTensor {
    type Owner = ManagedTensor;
    unsafe fn own(ptr: NonNull<Self>) -> ManagedTensor {
        // SAFETY: forwarded from this function's contract (built from validated metadata).
        unsafe { ManagedTensor::from_raw_unchecked(ptr) }
    }
}

impl PackAs for DLManagedTensorVersioned {
    type Owner = ManagedTensorVersioned;
    unsafe fn own(ptr: NonNull<Self>) -> ManagedTensorVersioned {
        // SAFETY: forwarded from this function's contract (built from validated metadata).
        unsafe { ManagedTensorVersioned::from_raw_unchecked(ptr) }
    }
}

/// [`try_pack`] / [`try_pack_versioned`], owned (`M` picks the struct: a legacy one carries no
/// flags, though `READ_ONLY` still makes the export hold its borrow): for crate code that hands
/// the export on. `data_of`, when given, takes the data pointer from the keepalive in its final
/// place (see [`build_validated`]); `readers` says whether Rust code outside the export may read
/// the memory (see [`Readers`]: a read-only export always holds a shared borrow of its bytes).
///
/// # Safety
///
/// The metadata (with the pointer `data_of` gives, when given) must describe initialised memory,
/// on its device, that `keepalive` keeps valid and in place until it is dropped, and that nobody
/// writes meanwhile but consumers and this crate's registered views; with
/// [`Readers::ExportOnly`], nothing but the export reaches it; unless `flags` has `READ_ONLY`
/// (and always for a legacy struct), consumers may write it through the pointer, so it must
/// carry write permission.
pub(crate) unsafe fn pack_validated<M: PackAs, K: Send + 'static>(
    keepalive: K,
    validated: Validated,
    flags: u64,
    readers: Readers,
    data_of: Option<fn(&mut K) -> *mut core::ffi::c_void>,
) -> Result<M::Owner, Error> {
    let ptr = build_validated::<M, K>(keepalive, validated, flags, readers, data_of)?;
    // SAFETY: built just now from validated metadata; the memory keeps this function's
    // contract.
    Ok(unsafe { M::own(ptr) })
}

/// [`pack_validated`] of metadata not validated yet.
///
/// # Safety
///
/// As [`pack_validated`].
pub(crate) unsafe fn pack_owned<M: PackAs, K: Send + 'static>(
    keepalive: K,
    info: TensorInfo,
    flags: u64,
    readers: Readers,
    data_of: Option<fn(&mut K) -> *mut core::ffi::c_void>,
) -> Result<M::Owner, Error> {
    let validated = Validated::new(info)?;
    // SAFETY: forwarded from this function's contract.
    unsafe { pack_validated::<M, K>(keepalive, validated, flags, readers, data_of) }
}
