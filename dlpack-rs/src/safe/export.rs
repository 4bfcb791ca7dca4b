//! Export: a Rust value (the keepalive) plus its metadata become one managed tensor whose
//! deleter drops exactly that value.

use alloc::alloc::{alloc, dealloc, handle_alloc_error};
use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::alloc::Layout;
use core::ffi::c_void;
use core::ptr::NonNull;

use super::dtype::cpu_device;
use super::import::{ManagedTensor, ManagedTensorVersioned};
use super::layout::{check, Extent};
use super::{Element, Error};
use crate::ffi::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DLPACK_FLAG_BITMASK_READ_ONLY,
};

/// A tensor's metadata, for export: where its first element is, where it lives, its element
/// type, shape, strides (elements) and byte offset.
///
/// The data pointer is raw; the value that keeps it alive is given separately to [`pack`] or
/// [`pack_versioned`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Base pointer of the data; the first element is at `data + byte_offset`.
    pub data: *mut c_void,
    /// Where the memory lives.
    pub device: DLDevice,
    /// Element type.
    pub dtype: DLDataType,
    /// Extent of each dimension.
    pub shape: Vec<i64>,
    /// Step of each dimension in elements; `None` means compact row-major.
    pub strides: Option<Vec<i64>>,
    /// Offset in bytes from `data` to the first element.
    pub byte_offset: u64,
}

// SAFETY: `TensorInfo` is plain metadata; its pointer is never dereferenced by this crate on
// its own, only described to a consumer, so moving or sharing it across threads is harmless.
unsafe impl Send for TensorInfo {}
// SAFETY: as above; `&TensorInfo` gives no access to the pointee.
unsafe impl Sync for TensorInfo {}

impl TensorInfo {
    /// Metadata of a compact row-major tensor.
    ///
    /// ```
    /// use dlpack_rs::safe::{cpu_device, dtype_f32, TensorInfo};
    /// let mut data = vec![1.0f32, 2.0, 3.0, 4.0];
    /// let info = TensorInfo::contiguous(data.as_mut_ptr().cast(), cpu_device(), dtype_f32(), vec![2, 2]);
    /// assert_eq!(info.numel(), Ok(4));
    /// ```
    pub fn contiguous(
        data: *mut c_void,
        device: DLDevice,
        dtype: DLDataType,
        shape: Vec<i64>,
    ) -> Self {
        TensorInfo {
            data,
            device,
            dtype,
            shape,
            strides: None,
            byte_offset: 0,
        }
    }

    /// Metadata of a tensor with explicit strides, in elements.
    pub fn strided(
        data: *mut c_void,
        device: DLDevice,
        dtype: DLDataType,
        shape: Vec<i64>,
        strides: Vec<i64>,
    ) -> Self {
        TensorInfo {
            data,
            device,
            dtype,
            shape,
            strides: Some(strides),
            byte_offset: 0,
        }
    }

    /// The same metadata with the first element `byte_offset` bytes after `data`.
    pub fn with_byte_offset(mut self, byte_offset: u64) -> Self {
        self.byte_offset = byte_offset;
        self
    }

    /// Checks the metadata: strides as many as dimensions, no negative extent, a well-formed
    /// dtype, no overflow of the element count or of the addressed byte range, and a non-NULL
    /// data pointer unless the tensor is empty. Returns the element count.
    pub fn numel(&self) -> Result<usize, Error> {
        self.extent().map(|extent| extent.numel)
    }

    /// The validation of [`TensorInfo::numel`], returning the addressed element range too.
    pub(crate) fn extent(&self) -> Result<Extent, Error> {
        check(
            &self.shape,
            self.strides.as_deref(),
            self.dtype,
            self.byte_offset,
            self.data.is_null(),
        )
    }
}

/// The head of an export's one heap block: the managed struct first (so a pointer to it is a
/// pointer to the block), the number of dimensions (to rebuild the block's layout in the
/// deleter, independent of anything a consumer might touch), then the keepalive. `2 * ndim`
/// `i64`s follow it: the shape, then the strides, which the managed struct points into.
#[repr(C)]
struct Header<M, K> {
    managed: M,
    ndim: usize,
    keepalive: K,
}

/// Layout of an export block with `ndim` dimensions, and the offset of its shape array.
fn block_layout<M, K>(ndim: usize) -> (Layout, usize) {
    // `ndim <= MAX_NDIM` (validated before any block is made), so neither step can overflow;
    // the fallback keeps this free of panics for the deleter's sake all the same.
    Layout::array::<i64>(2 * ndim)
        .and_then(|dims| Layout::new::<Header<M, K>>().extend(dims))
        .unwrap_or((Layout::new::<Header<M, K>>(), 0))
}

/// Drops an export's keepalive. Under `std` a panic is caught and reported so that it never
/// unwinds into the C caller of the deleter; without `std` the `extern "C"` deleter aborts.
fn drop_contained<T>(value: T) {
    #[cfg(feature = "std")]
    {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(value)));
        if let Err(payload) = result {
            // Dropping the payload is user code too: contain it, and leak whatever it throws.
            let drop_payload = std::panic::AssertUnwindSafe(move || drop(payload));
            if let Err(again) = std::panic::catch_unwind(drop_payload) {
                core::mem::forget(again);
            }
            // `eprintln!` would panic if stderr cannot be written (a closed pipe): ignore that.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"dlpack-rs: a keepalive panicked while being dropped by a DLPack deleter\n",
            );
        }
    }
    #[cfg(not(feature = "std"))]
    drop(value);
}

/// The deleter of every export: frees the block, then drops the keepalive (so a keepalive that
/// panics, caught under `std`, leaks nothing else).
unsafe extern "C" fn delete_block<M, K>(ptr: *mut M) {
    if ptr.is_null() {
        return;
    }
    let header = ptr.cast::<Header<M, K>>();
    // SAFETY: `ptr` came from `build::<M, K>`, which allocated a block of `block_layout(ndim)`
    // starting with this header; the DLPack contract lets the consumer call the deleter only
    // once, so the keepalive is moved out and the block freed exactly once.
    let (layout, keepalive) = unsafe {
        let (layout, _) = block_layout::<M, K>((*header).ndim);
        (layout, core::ptr::read(&raw const (*header).keepalive))
    };
    // SAFETY: the block was allocated with exactly this layout; the managed struct and the
    // dims need no drop, and the keepalive was moved out above.
    unsafe { dealloc(header.cast(), layout) };
    drop_contained(keepalive);
}

/// The two managed-struct kinds an export can produce.
trait Managed: Sized {
    fn new(
        tensor: DLTensor,
        flags: u64,
        ctx: *mut c_void,
        deleter: unsafe extern "C" fn(*mut Self),
    ) -> Self;
}

impl Managed for DLManagedTensor {
    fn new(
        dl_tensor: DLTensor,
        _flags: u64,
        manager_ctx: *mut c_void,
        deleter: unsafe extern "C" fn(*mut Self),
    ) -> Self {
        DLManagedTensor {
            dl_tensor,
            manager_ctx,
            deleter: Some(deleter),
        }
    }
}

impl Managed for DLManagedTensorVersioned {
    fn new(
        dl_tensor: DLTensor,
        flags: u64,
        manager_ctx: *mut c_void,
        deleter: unsafe extern "C" fn(*mut Self),
    ) -> Self {
        DLManagedTensorVersioned {
            version: DLPackVersion::CURRENT,
            manager_ctx,
            deleter: Some(deleter),
            flags,
            dl_tensor,
        }
    }
}

/// Validates `info` and moves it with `keepalive` into one heap block (one allocation per
/// export). Strides are always written out (DLPack >= 1.2 asks producers for non-NULL
/// strides).
fn build<M: Managed, K: Send + 'static>(
    keepalive: K,
    info: TensorInfo,
    flags: u64,
) -> Result<NonNull<M>, Error> {
    info.numel()?;
    let ndim = info.shape.len(); // validated: at most MAX_NDIM
    let (layout, dims_offset) = block_layout::<M, K>(ndim);
    // SAFETY: the layout is not zero-sized (the header holds the managed struct).
    let block = unsafe { alloc(layout) };
    if block.is_null() {
        handle_alloc_error(layout);
    }
    let header = block.cast::<Header<M, K>>();
    // SAFETY: `block` is a fresh allocation of `layout`: the header at offset 0, then room for
    // `2 * ndim` i64s at `dims_offset` (aligned for i64 by `Layout::extend`). Every slot is
    // written before the pointer leaves this function.
    unsafe {
        let shape = block.add(dims_offset).cast::<i64>();
        let strides = shape.add(ndim);
        core::ptr::copy_nonoverlapping(info.shape.as_ptr(), shape, ndim);
        match &info.strides {
            Some(given) => core::ptr::copy_nonoverlapping(given.as_ptr(), strides, ndim),
            None => {
                let mut acc: i64 = 1;
                for axis in (0..ndim).rev() {
                    strides.add(axis).write(acc);
                    // Validated: the element count does not overflow.
                    acc = acc.wrapping_mul(info.shape[axis].max(1));
                }
            }
        }
        let tensor = DLTensor {
            data: info.data,
            device: info.device,
            ndim: ndim as i32,
            dtype: info.dtype,
            shape,
            strides,
            byte_offset: info.byte_offset,
        };
        header.write(Header {
            managed: M::new(tensor, flags, block.cast(), delete_block::<M, K>),
            ndim,
            keepalive,
        });
    }
    // SAFETY: `block` is non-NULL (checked above) and starts with the managed struct.
    Ok(unsafe { NonNull::new_unchecked(block.cast::<M>()) })
}

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
    build::<DLManagedTensor, K>(keepalive, info, 0).map(NonNull::as_ptr)
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
    build::<DLManagedTensorVersioned, K>(keepalive, info, flags).map(NonNull::as_ptr)
}

/// [`try_pack_versioned`], owned: for crate code that hands the export on without a second
/// validation pass.
pub(crate) fn pack_owned_versioned<K: Send + 'static>(
    keepalive: K,
    info: TensorInfo,
    flags: u64,
) -> Result<ManagedTensorVersioned, Error> {
    let ptr = build::<DLManagedTensorVersioned, K>(keepalive, info, flags)?;
    // SAFETY: a fresh export of ours, validated by `build`, owned by nobody else.
    Ok(unsafe { ManagedTensorVersioned::from_raw_unchecked(ptr) })
}

/// [`try_pack`], owned: as [`pack_owned_versioned`].
pub(crate) fn pack_owned<K: Send + 'static>(
    keepalive: K,
    info: TensorInfo,
) -> Result<ManagedTensor, Error> {
    let ptr = build::<DLManagedTensor, K>(keepalive, info, 0)?;
    // SAFETY: a fresh export of ours, validated by `build`, owned by nobody else.
    Ok(unsafe { ManagedTensor::from_raw_unchecked(ptr) })
}

/// Owned memory of [`Element`]s that can back an exported tensor: `Vec<T>`, `Box<[T]>`,
/// `Arc<[T]>` (exported read-only), `&'static [T]` (read-only), or a user container.
///
/// # Safety
///
/// `data_ptr` must point at `num_elements` initialised elements (it may dangle, but must not be
/// NULL, when there are none), and that memory must stay valid and in place for as long as the
/// value lives and is not accessed mutably, even when the value itself is moved. If
/// `is_writable` returns true, a consumer may write through the pointer while it holds the
/// export, so nothing else may hold a shared reference to those elements that it relies on.
pub unsafe trait Buffer {
    /// The element type; it decides the exported dtype.
    type Elem: Element;
    /// Pointer to the first element.
    fn data_ptr(&self) -> *mut Self::Elem;
    /// Number of elements.
    fn num_elements(&self) -> usize;
    /// Whether consumers may write to the elements (false exports with `READ_ONLY`).
    fn is_writable(&self) -> bool {
        true
    }
}

// SAFETY: a Vec's elements live in their own heap allocation, which moving the Vec does not
// move; `as_ptr` reads the Vec's raw pointer (it does not go through a reference to the
// elements), so writes through it by a consumer are writes to memory the Vec owns uniquely.
unsafe impl<T: Element> Buffer for Vec<T> {
    type Elem = T;
    fn data_ptr(&self) -> *mut T {
        self.as_ptr().cast_mut()
    }
    fn num_elements(&self) -> usize {
        self.len()
    }
}

// SAFETY: as for Vec: a boxed slice owns its heap allocation uniquely and never moves it.
unsafe impl<T: Element> Buffer for Box<[T]> {
    type Elem = T;
    fn data_ptr(&self) -> *mut T {
        self.as_ptr().cast_mut()
    }
    fn num_elements(&self) -> usize {
        self.len()
    }
}

// SAFETY: the slice lives in the Arc's heap block, which no clone moves; it is shared, so it is
// exported read-only.
unsafe impl<T: Element> Buffer for Arc<[T]> {
    type Elem = T;
    fn data_ptr(&self) -> *mut T {
        self.as_ptr().cast_mut()
    }
    fn num_elements(&self) -> usize {
        self.len()
    }
    fn is_writable(&self) -> bool {
        false
    }
}

// SAFETY: static memory never moves or dies; it is shared, so it is exported read-only.
unsafe impl<T: Element> Buffer for &'static [T] {
    type Elem = T;
    fn data_ptr(&self) -> *mut T {
        self.as_ptr().cast_mut()
    }
    fn num_elements(&self) -> usize {
        self.len()
    }
    fn is_writable(&self) -> bool {
        false
    }
}

/// An integer usable as a dimension extent or stride (`i64`, `i32`, `isize`, `usize`, `u32`,
/// `u64`); conversion is checked.
pub trait Dim: Copy {
    /// The value as `i64`, or `None` if it does not fit.
    fn to_i64(self) -> Option<i64>;
}

macro_rules! dims {
    ($($t:ty),*) => {$(
        impl Dim for $t {
            fn to_i64(self) -> Option<i64> {
                i64::try_from(self).ok()
            }
        }
    )*};
}
dims!(i64, i32, isize, usize, u32, u64);

fn to_i64s<D: Dim>(values: &[D]) -> Result<Vec<i64>, Error> {
    values
        .iter()
        .map(|v| v.to_i64().ok_or(Error::Overflow))
        .collect()
}

/// A fully safe export of an owned [`Buffer`]: no raw pointer, no `unsafe`. The element type
/// decides the dtype; shape and strides are checked against the buffer's length so that no
/// consumer can be told to read outside it.
///
/// ```
/// use dlpack_rs::safe::Export;
///
/// let t = Export::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).shape(&[2, 3]).versioned()?;
/// assert_eq!(t.shape(), &[2, 3]);
/// assert_eq!(t.as_slice::<f32>()?, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
///
/// // Transposed view of the same buffer.
/// let t = Export::new(vec![1u8, 2, 3, 4, 5, 6]).shape(&[3, 2]).strides(&[1, 3]).legacy()?;
/// assert!(!t.is_contiguous());
///
/// // Hand it to a consumer as a raw pointer; the consumer's call to the deleter frees it.
/// let raw = t.into_raw();
/// unsafe { ((*raw).deleter.unwrap())(raw) };
/// # Ok::<(), dlpack_rs::safe::Error>(())
/// ```
#[derive(Debug)]
pub struct Export<B> {
    buffer: B,
    shape: Result<Option<Vec<i64>>, Error>,
    strides: Result<Option<Vec<i64>>, Error>,
    read_only: bool,
}

impl<B: Buffer + Send + 'static> Export<B> {
    /// Starts an export of `buffer`, by default one-dimensional over all its elements.
    pub fn new(buffer: B) -> Self {
        Export {
            buffer,
            shape: Ok(None),
            strides: Ok(None),
            read_only: false,
        }
    }

    /// Sets the shape.
    pub fn shape<D: Dim>(mut self, shape: &[D]) -> Self {
        self.shape = to_i64s(shape).map(Some);
        self
    }

    /// Sets the strides, in elements (negative strides address elements before the first).
    pub fn strides<D: Dim>(mut self, strides: &[D]) -> Self {
        self.strides = to_i64s(strides).map(Some);
        self
    }

    /// Marks the export read-only even if the buffer is writable.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    fn into_parts(self) -> Result<(B, TensorInfo, u64), Error> {
        let len = self.buffer.num_elements();
        let shape = match self.shape? {
            Some(shape) => shape,
            None => alloc::vec![i64::try_from(len).map_err(|_| Error::Overflow)?],
        };
        let strides = self.strides?;
        let data = self.buffer.data_ptr().cast::<c_void>();
        let info = TensorInfo {
            data,
            device: cpu_device(),
            dtype: B::Elem::DTYPE,
            shape,
            strides,
            byte_offset: 0,
        };
        let extent = info.extent()?;
        // Every addressed element must be inside the buffer.
        if extent.numel != 0 && (extent.min < 0 || extent.max as u64 >= len as u64) {
            return Err(Error::OutOfBounds {
                len,
                min: extent.min,
                max: extent.max,
            });
        }
        let read_only = self.read_only || !self.buffer.is_writable();
        let flags = if read_only {
            DLPACK_FLAG_BITMASK_READ_ONLY
        } else {
            0
        };
        Ok((self.buffer, info, flags))
    }

    /// Builds a versioned managed tensor (DLPack 1.3, `READ_ONLY` set when the buffer or the
    /// builder says so).
    pub fn versioned(self) -> Result<ManagedTensorVersioned, Error> {
        let (buffer, info, flags) = self.into_parts()?;
        pack_owned_versioned(buffer, info, flags)
    }

    /// Builds a legacy managed tensor. A read-only export cannot be legacy (the legacy struct
    /// has no way to say so): [`Error::ReadOnly`].
    pub fn legacy(self) -> Result<ManagedTensor, Error> {
        let (buffer, info, flags) = self.into_parts()?;
        if flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0 {
            return Err(Error::ReadOnly);
        }
        pack_owned(buffer, info)
    }
}
