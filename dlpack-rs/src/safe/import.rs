//! Import: owned managed tensors whose `Drop` calls the producer's deleter exactly once, and
//! validated views of their metadata and data.

use alloc::borrow::Cow;
use core::ffi::c_void;
use core::fmt;
use core::ptr::NonNull;

use super::layout::{check, compact_strides, is_c_contiguous};
use super::{Element, Error};
use crate::ffi::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DLPACK_FLAG_BITMASK_ALL_KNOWN, DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY,
    DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION,
};

/// Validates a `DLTensor` a producer handed over.
///
/// # Safety
///
/// `t.shape` and `t.strides`, when non-NULL and `t.ndim > 0`, must point at `t.ndim` readable
/// `i64`s (the DLPack contract).
unsafe fn validate(t: &DLTensor) -> Result<(), Error> {
    if t.ndim < 0 {
        return Err(Error::NegativeNdim(t.ndim));
    }
    if t.ndim as usize > super::MAX_NDIM {
        return Err(Error::TooManyDims(t.ndim));
    }
    if t.ndim > 0 && t.shape.is_null() {
        return Err(Error::NullShape);
    }
    // SAFETY: forwarded from this function's contract; ndim and NULL were checked above.
    let (shape, strides) = unsafe { (raw_shape(t), raw_strides(t)) };
    check(shape, strides, t.dtype, t.byte_offset, t.data.is_null()).map(|_| ())
}

/// # Safety
/// `t.ndim >= 0`, and `t.shape` points at `ndim` `i64`s when `ndim > 0`.
unsafe fn raw_shape(t: &DLTensor) -> &[i64] {
    if t.ndim <= 0 || t.shape.is_null() {
        &[]
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { core::slice::from_raw_parts(t.shape, t.ndim as usize) }
    }
}

/// # Safety
/// `t.ndim >= 0`, and `t.strides` is NULL or points at `ndim` `i64`s.
unsafe fn raw_strides(t: &DLTensor) -> Option<&[i64]> {
    if t.strides.is_null() {
        None
    } else if t.ndim <= 0 {
        Some(&[])
    } else {
        // SAFETY: forwarded from the caller.
        Some(unsafe { core::slice::from_raw_parts(t.strides, t.ndim as usize) })
    }
}

/// A borrowed, validated view of a tensor's metadata and data. Every value it returns was
/// checked when the owning tensor was constructed.
#[derive(Copy, Clone)]
pub struct TensorView<'a> {
    tensor: &'a DLTensor,
    flags: u64,
}

impl<'a> TensorView<'a> {
    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.tensor.ndim as usize
    }

    /// Extent of each dimension (empty for a 0-d tensor).
    pub fn shape(&self) -> &'a [i64] {
        // SAFETY: the tensor was validated at construction (ndim >= 0, shape non-NULL when
        // ndim > 0) and the producer keeps its metadata alive until the deleter runs.
        unsafe { raw_shape(self.tensor) }
    }

    /// Strides in elements; compact row-major strides are synthesised when the producer sent
    /// NULL (allowed before DLPack 1.2).
    pub fn strides(&self) -> Cow<'a, [i64]> {
        match self.raw_strides() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(compact_strides(self.shape())),
        }
    }

    /// The strides exactly as the producer sent them (`None` for NULL).
    pub fn raw_strides(&self) -> Option<&'a [i64]> {
        // SAFETY: as in `shape`.
        unsafe { raw_strides(self.tensor) }
    }

    /// Offset in bytes from the data pointer to the first element.
    pub fn byte_offset(&self) -> u64 {
        self.tensor.byte_offset
    }

    /// Element type.
    pub fn dtype(&self) -> DLDataType {
        self.tensor.dtype
    }

    /// Where the memory lives.
    pub fn device(&self) -> DLDevice {
        self.tensor.device
    }

    /// The `DLPACK_FLAG_BITMASK_*` flags (always 0 for a legacy tensor).
    pub fn flags(&self) -> u64 {
        self.flags
    }

    /// Whether the producer forbids writes.
    pub fn is_read_only(&self) -> bool {
        self.flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0
    }

    /// Whether the producer copied the data for this export.
    pub fn is_copied(&self) -> bool {
        self.flags & DLPACK_FLAG_BITMASK_IS_COPIED != 0
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        // Validated at construction: the product does not overflow unless a zero extent makes
        // the tensor empty (whatever the other extents multiply to).
        let shape = self.shape();
        if shape.contains(&0) {
            return 0;
        }
        shape.iter().map(|&d| d as usize).product()
    }

    /// Bytes the elements occupy when packed densely (`ceil(numel * bits * lanes / 8)`);
    /// validated at construction not to overflow.
    pub fn nbytes(&self) -> usize {
        let bits = super::dtype::element_bits(self.dtype()) as u128;
        ((self.numel() as u128 * bits).div_ceil(8)) as usize
    }

    /// Whether the layout is compact row-major (size-1 dimensions may have any stride).
    pub fn is_contiguous(&self) -> bool {
        match self.raw_strides() {
            None => true,
            Some(strides) => is_c_contiguous(self.shape(), strides),
        }
    }

    /// The address of the first element (`data + byte_offset`), or NULL for a NULL data pointer.
    pub fn data_ptr(&self) -> *mut c_void {
        if self.tensor.data.is_null() {
            return core::ptr::null_mut();
        }
        // Validated at construction: the offset fits in isize. wrapping_add keeps this safe
        // even for device pointers, which are never dereferenced here.
        self.tensor
            .data
            .cast::<u8>()
            .wrapping_add(self.tensor.byte_offset as usize)
            .cast()
    }

    /// The metadata as a [`TensorInfo`](super::TensorInfo) (for re-exporting or copying the
    /// same memory): shape and strides are copied, strides stay `None` when the producer sent
    /// NULL.
    pub fn tensor_info(&self) -> super::TensorInfo {
        let t = self.tensor;
        super::TensorInfo {
            data: t.data,
            device: t.device,
            dtype: t.dtype,
            shape: self.shape().to_vec(),
            strides: self.raw_strides().map(<[i64]>::to_vec),
            byte_offset: t.byte_offset,
        }
    }

    /// The underlying `DLTensor`.
    pub fn raw(&self) -> &'a DLTensor {
        self.tensor
    }

    /// Checks that elements of `T` may be read here: `T`'s dtype, on host-accessible memory.
    pub(crate) fn check_element<T: Element>(&self) -> Result<(), Error> {
        if self.dtype() != T::DTYPE {
            return Err(Error::DtypeMismatch {
                expected: T::DTYPE,
                found: self.dtype(),
            });
        }
        if !self.device().device_type.is_host_accessible() {
            return Err(Error::NotHostAccessible(self.device()));
        }
        Ok(())
    }

    /// The first element of a non-empty tensor as a `*mut T`: non-NULL and aligned for `T`.
    pub(crate) fn first_element<T: Element>(&self) -> Result<*mut T, Error> {
        let ptr = self.data_ptr().cast::<T>();
        if ptr.is_null() {
            return Err(Error::NullData);
        }
        if !ptr.is_aligned() {
            return Err(Error::Misaligned {
                align: core::mem::align_of::<T>(),
                address: ptr as usize,
            });
        }
        Ok(ptr)
    }

    /// Checks that a slice of `T` over this tensor is sound, returning its first element.
    fn slice_ptr<T: Element>(&self) -> Result<(*mut T, usize), Error> {
        self.check_element::<T>()?;
        if !self.is_contiguous() {
            return Err(Error::NotContiguous);
        }
        let len = self.numel();
        if len == 0 {
            return Ok((NonNull::<T>::dangling().as_ptr(), 0));
        }
        let ptr = self.first_element::<T>()?;
        // SAFETY: host-accessible, non-NULL, aligned, contiguous memory of `len` elements of
        // T's dtype (validated at construction not to overflow), alive until the deleter runs.
        let bytes = unsafe {
            core::slice::from_raw_parts(ptr.cast::<u8>(), len * core::mem::size_of::<T>())
        };
        if !T::is_valid_bytes(bytes) {
            return Err(Error::InvalidBool);
        }
        Ok((ptr, len))
    }

    /// The elements as a slice, when the tensor is host-accessible, C-contiguous, of `T`'s
    /// dtype, aligned for `T` and (for `bool`) holds only 0 and 1.
    ///
    /// The producer may still write to the memory while the slice is held (as any shared
    /// array may be written by its other owners); do not hold it across code that lets the
    /// producer's side run.
    pub fn as_slice<T: Element>(&self) -> Result<&'a [T], Error> {
        let (ptr, len) = self.slice_ptr::<T>()?;
        // SAFETY: checked by `slice_ptr`; the lifetime is that of the owning tensor's borrow.
        Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
    }
}

impl fmt::Debug for TensorView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("shape", &self.shape())
            .field("strides", &self.raw_strides())
            .field("dtype", &self.dtype())
            .field("device", &self.device())
            .field("byte_offset", &self.byte_offset())
            .field("flags", &self.flags())
            .finish()
    }
}

/// The read-only accessors of every owner of a tensor (the safe layer's owned types and the
/// pyo3 glue's `PyTensor`), delegating to its `view()`.
macro_rules! view_accessors {
    () => {
        /// Number of dimensions.
        pub fn ndim(&self) -> usize {
            self.view().ndim()
        }
        /// Extent of each dimension.
        pub fn shape(&self) -> &[i64] {
            self.view().shape()
        }
        /// Strides in elements (synthesised when the producer sent NULL).
        pub fn strides(&self) -> ::alloc::borrow::Cow<'_, [i64]> {
            self.view().strides()
        }
        /// Offset in bytes from the data pointer to the first element.
        pub fn byte_offset(&self) -> u64 {
            self.view().byte_offset()
        }
        /// Element type.
        pub fn dtype(&self) -> $crate::ffi::DLDataType {
            self.view().dtype()
        }
        /// Where the memory lives.
        pub fn device(&self) -> $crate::ffi::DLDevice {
            self.view().device()
        }
        /// Number of elements.
        pub fn numel(&self) -> usize {
            self.view().numel()
        }
        /// Bytes the elements occupy when packed densely.
        pub fn nbytes(&self) -> usize {
            self.view().nbytes()
        }
        /// Whether the layout is compact row-major.
        pub fn is_contiguous(&self) -> bool {
            self.view().is_contiguous()
        }
        /// Whether the producer forbids writes.
        pub fn is_read_only(&self) -> bool {
            self.view().is_read_only()
        }
        /// The address of the first element.
        pub fn data_ptr(&self) -> *mut ::core::ffi::c_void {
            self.view().data_ptr()
        }
        /// The elements as a slice (see [`TensorView::as_slice`]($crate::safe::TensorView::as_slice)).
        pub fn as_slice<T: $crate::safe::Element>(&self) -> Result<&[T], $crate::safe::Error> {
            self.view().as_slice()
        }
    };
}
#[cfg(feature = "pyo3")]
pub(crate) use view_accessors;

macro_rules! delegate_view {
    () => {
        view_accessors!();

        /// The elements as a mutable slice: as [`TensorView::as_slice`], and not read-only.
        pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T], Error> {
            let view = self.view();
            if view.is_read_only() {
                return Err(Error::ReadOnly);
            }
            let (ptr, len) = view.slice_ptr::<T>()?;
            // SAFETY: checked by `slice_ptr`; the producer allows writes (no READ_ONLY flag), and
            // `&mut self` makes this the only view handed out through this owner.
            Ok(unsafe { core::slice::from_raw_parts_mut(ptr, len) })
        }
    };
}

/// An owned legacy [`DLManagedTensor`]: its `Drop` calls the producer's deleter exactly once.
///
/// `Send` and `Sync`: DLPack lets a consumer call the deleter from any thread (consumers such
/// as PyTorch free tensors from worker threads, so producers must allow it), and shared access
/// only reads metadata that the producer keeps constant until the deleter runs.
pub struct ManagedTensor {
    ptr: NonNull<DLManagedTensor>,
}

// SAFETY: see the type's documentation: the deleter may run on any thread per the protocol.
unsafe impl Send for ManagedTensor {}
// SAFETY: `&ManagedTensor` only reads immutable metadata; data writes need `&mut`.
unsafe impl Sync for ManagedTensor {}

impl ManagedTensor {
    /// Takes ownership of a producer's managed tensor and validates it. On a validation error
    /// the deleter has already been called (ownership had passed).
    ///
    /// # Safety
    ///
    /// `ptr` must be NULL or point at a `DLManagedTensor` that the caller owns (nobody else will
    /// call its deleter), whose `shape` and `strides` point at `ndim` values when non-NULL, and
    /// which stays valid until its deleter is called.
    pub unsafe fn from_raw(ptr: *mut DLManagedTensor) -> Result<Self, Error> {
        let ptr = NonNull::new(ptr).ok_or(Error::NullPointer)?;
        // SAFETY: the caller hands over a valid, owned tensor; from here on `owned` calls the
        // deleter exactly once, on success or on error.
        let owned = unsafe { Self::from_raw_unchecked(ptr) };
        // SAFETY: the caller guarantees shape and strides point at ndim values.
        unsafe { validate(&owned.ptr.as_ref().dl_tensor) }?;
        Ok(owned)
    }

    /// # Safety
    /// As [`ManagedTensor::from_raw`], and the tensor is known to be valid.
    pub(crate) unsafe fn from_raw_unchecked(ptr: NonNull<DLManagedTensor>) -> Self {
        ManagedTensor { ptr }
    }

    /// Gives up ownership without calling the deleter: whoever receives the pointer must.
    pub fn into_raw(self) -> *mut DLManagedTensor {
        let ptr = self.ptr.as_ptr();
        core::mem::forget(self);
        ptr
    }

    /// The managed struct, still owned by `self`.
    pub fn as_raw(&self) -> *mut DLManagedTensor {
        self.ptr.as_ptr()
    }

    /// A validated view of the metadata and data.
    pub fn view(&self) -> TensorView<'_> {
        // SAFETY: `ptr` is valid until `self` calls the deleter in Drop.
        let tensor = unsafe { &self.ptr.as_ref().dl_tensor };
        TensorView { tensor, flags: 0 }
    }

    delegate_view!();
}

impl Drop for ManagedTensor {
    fn drop(&mut self) {
        // SAFETY: we own the tensor; reading `deleter` is valid until it runs, and it runs once.
        unsafe {
            if let Some(deleter) = self.ptr.as_ref().deleter {
                deleter(self.ptr.as_ptr());
            }
        }
    }
}

impl fmt::Debug for ManagedTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.view().fmt(f)
    }
}

/// An owned [`DLManagedTensorVersioned`]: its `Drop` calls the producer's deleter exactly
/// once. `Send` and `Sync` for the reasons given on [`ManagedTensor`].
pub struct ManagedTensorVersioned {
    ptr: NonNull<DLManagedTensorVersioned>,
}

// SAFETY: see `ManagedTensor`: the deleter may run on any thread per the protocol.
unsafe impl Send for ManagedTensorVersioned {}
// SAFETY: `&ManagedTensorVersioned` only reads immutable metadata; data writes need `&mut`.
unsafe impl Sync for ManagedTensorVersioned {}

impl ManagedTensorVersioned {
    /// Takes ownership of a producer's versioned managed tensor. The major version is checked
    /// before anything else is read: on a mismatch only the deleter is called. Then flags
    /// (bits undefined by the producer's version, when that is 1.3 or older, are an error) and
    /// the tensor are validated. On any error the deleter has already been called.
    ///
    /// # Safety
    ///
    /// `ptr` must be NULL or point at a `DLManagedTensorVersioned` that the caller owns, valid
    /// until its deleter is called; for major version 1 its `shape` and `strides` must point at
    /// `ndim` values when non-NULL.
    pub unsafe fn from_raw(ptr: *mut DLManagedTensorVersioned) -> Result<Self, Error> {
        let ptr = NonNull::new(ptr).ok_or(Error::NullPointer)?;
        // SAFETY: the caller hands over a valid, owned tensor; `owned` calls the deleter once.
        let owned = unsafe { Self::from_raw_unchecked(ptr) };
        // SAFETY: the version and flags fields are valid in every major version's layout
        // prefix; the tensor is only read after the major version matched.
        unsafe {
            let m = owned.ptr.as_ref();
            if m.version.major != DLPACK_MAJOR_VERSION {
                return Err(Error::UnsupportedVersion(m.version));
            }
            let unknown = m.flags & !DLPACK_FLAG_BITMASK_ALL_KNOWN;
            if unknown != 0 && m.version.minor <= DLPACK_MINOR_VERSION {
                return Err(Error::UnknownFlags {
                    version: m.version,
                    bits: unknown,
                });
            }
            validate(&m.dl_tensor)?;
        }
        Ok(owned)
    }

    /// # Safety
    /// As [`ManagedTensorVersioned::from_raw`], and the tensor is known to be valid.
    pub(crate) unsafe fn from_raw_unchecked(ptr: NonNull<DLManagedTensorVersioned>) -> Self {
        ManagedTensorVersioned { ptr }
    }

    /// Gives up ownership without calling the deleter: whoever receives the pointer must.
    pub fn into_raw(self) -> *mut DLManagedTensorVersioned {
        let ptr = self.ptr.as_ptr();
        core::mem::forget(self);
        ptr
    }

    /// The managed struct, still owned by `self`.
    pub fn as_raw(&self) -> *mut DLManagedTensorVersioned {
        self.ptr.as_ptr()
    }

    /// The producer's DLPack version.
    pub fn version(&self) -> DLPackVersion {
        // SAFETY: valid until Drop.
        unsafe { self.ptr.as_ref().version }
    }

    /// The `DLPACK_FLAG_BITMASK_*` flags.
    pub fn flags(&self) -> u64 {
        // SAFETY: valid until Drop.
        unsafe { self.ptr.as_ref().flags }
    }

    /// Whether the producer copied the data for this export.
    pub fn is_copied(&self) -> bool {
        self.view().is_copied()
    }

    /// A validated view of the metadata and data.
    pub fn view(&self) -> TensorView<'_> {
        // SAFETY: `ptr` is valid until `self` calls the deleter in Drop.
        let m = unsafe { self.ptr.as_ref() };
        TensorView {
            tensor: &m.dl_tensor,
            flags: m.flags,
        }
    }

    delegate_view!();
}

impl Drop for ManagedTensorVersioned {
    fn drop(&mut self) {
        // SAFETY: we own the tensor; reading `deleter` is valid until it runs, and it runs once.
        unsafe {
            if let Some(deleter) = self.ptr.as_ref().deleter {
                deleter(self.ptr.as_ptr());
            }
        }
    }
}

impl fmt::Debug for ManagedTensorVersioned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.view().fmt(f)
    }
}
