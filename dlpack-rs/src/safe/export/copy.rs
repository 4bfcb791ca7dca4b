//! Copying a tensor into compact, 64-byte aligned host storage, without aborting on OOM.

use core::ffi::c_void;

use crate::ffi::{DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED};
use crate::safe::import::{Kind, Managed, ManagedTensorVersioned};
use crate::safe::layout::{compact_strides, is_c_contiguous};
use crate::safe::{
    cpu_device, element_bits, host_viewable, pack_validated, AlignedBuffer, Error, Readers,
    TensorInfo, Validated,
};

/// Zeroed, 64-byte aligned storage of at least one byte (never dangling).
pub(crate) struct AlignedBytes(AlignedBuffer<u8>);

impl AlignedBytes {
    /// `nbytes` zeroed bytes, or [`Error::OutOfMemory`] ([`Error::Overflow`] past `isize::MAX`).
    pub(crate) fn zeroed(nbytes: usize) -> Result<Self, Error> {
        AlignedBuffer::zeroed(nbytes.max(1)).map(AlignedBytes)
    }

    /// The first byte, with write permission (from `&mut`).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut c_void {
        self.0.as_mut_ptr().cast()
    }
}

/// Copies the `esize`-byte elements `validated` describes to `dst`, in C order.
///
/// # Safety
/// `validated` describes initialised host-readable memory of `esize`-byte elements that nobody
/// writes during the call; `dst` is valid for writing `numel * esize` bytes, apart from it.
pub(crate) unsafe fn copy_elements(validated: &Validated, dst: *mut u8, esize: usize) {
    let info = validated.info();
    let numel = validated.extent().numel;
    if numel == 0 {
        // An empty tensor's data may be NULL, which not even a zero-byte copy may be given.
        return;
    }
    // Validated: data + byte_offset stays within an isize of data.
    let src = info
        .data
        .cast::<u8>()
        .wrapping_add(info.byte_offset as usize);
    let strides = info
        .strides
        .clone()
        .unwrap_or_else(|| compact_strides(&info.shape));
    if is_c_contiguous(&info.shape, &strides) {
        // SAFETY: `numel` contiguous source elements (caller's contract) into `dst`'s room.
        unsafe { core::ptr::copy_nonoverlapping(src, dst, numel * esize) };
        return;
    }
    let ndim = info.shape.len();
    let mut index = alloc::vec![0i64; ndim];
    for i in 0..numel {
        let offset: i64 = index.iter().zip(&strides).map(|(&k, &s)| k * s).sum();
        // SAFETY: `index` is within `shape`, so `offset` is addressed by the validated layout;
        // slot `i` is inside `dst`'s room.
        unsafe {
            core::ptr::copy_nonoverlapping(
                src.offset(offset as isize * esize as isize),
                dst.add(i * esize),
                esize,
            )
        };
        for axis in (0..ndim).rev() {
            index[axis] += 1;
            if index[axis] < info.shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

/// Copies the elements `validated` describes into new compact storage, with its metadata.
///
/// # Safety
/// `validated` describes initialised host-readable memory that nobody writes during the call.
pub(crate) unsafe fn copy_described(
    validated: &Validated,
) -> Result<(AlignedBytes, Validated), Error> {
    let info = validated.info();
    let numel = validated.extent().numel;
    let bits = element_bits(info.dtype);
    if bits % 8 != 0 {
        return Err(Error::SubByteCopy);
    }
    let esize = (bits / 8) as usize;
    // Validated not to overflow; a broadcast layout may still be too large to allocate.
    let nbytes = numel * esize;
    let mut storage = AlignedBytes::zeroed(nbytes)?;
    let dst = storage.as_mut_ptr().cast::<u8>();
    // SAFETY: the source by this function's contract; `dst` holds `nbytes` fresh bytes.
    unsafe { copy_elements(validated, dst, esize) };
    let copy = TensorInfo::contiguous(
        dst.cast::<c_void>(),
        cpu_device(),
        info.dtype,
        info.shape.clone(),
    );
    Ok((storage, Validated::new(copy)?))
}

// The copy of an owner is an export: it lives on this floor, above the owner's.
impl<K: Kind> Managed<K> {
    /// A compact, writable, 64-byte aligned host copy flagged `IS_COPIED` (refused while a
    /// mutable view of the source exists).
    ///
    /// ```
    /// use dlpack_rs::safe::Export;
    ///
    /// let t = Export::new(vec![1u16, 2, 3, 4, 5, 6]).shape(&[2, 3]).strides(&[1, 2]).versioned()?;
    /// let c = t.copy()?;
    /// assert!(c.is_copied() && c.is_contiguous());
    /// assert_eq!(c.as_slice::<u16>()?, &[1, 3, 5, 2, 4, 6]);
    /// # Ok::<(), dlpack_rs::safe::Error>(())
    /// ```
    pub fn copy(&self) -> Result<ManagedTensorVersioned, Error> {
        host_viewable(self.device())?;
        let _source = self.borrow_addressed(false)?;
        let source = Validated::new(self.tensor_info())?;
        // SAFETY: host memory alive while `self` is, borrowed (shared) above.
        let (storage, copy) = unsafe { copy_described(&source) }?;
        // SAFETY: `copy` describes the new storage, which the keepalive owns alone; writable.
        unsafe {
            pack_validated::<DLManagedTensorVersioned, _>(
                storage,
                copy,
                DLPACK_FLAG_BITMASK_IS_COPIED,
                Readers::ExportOnly,
                Some(AlignedBytes::as_mut_ptr),
            )
        }
    }
}
