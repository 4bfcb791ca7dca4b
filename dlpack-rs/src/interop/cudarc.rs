//! CUDA device memory through [`cudarc`] (feature `cudarc`): export a [`CudaSlice`] zero-copy,
//! import a CUDA tensor as a [`CudaView`] / [`CudaViewMut`], with stream ordering by events.
//!
//! The feature loads the CUDA driver when it is first called (cudarc's dynamic loading), so a
//! program built with it runs, and its CPU paths work, on a machine without CUDA. The CUDA
//! version of cudarc's bindings: an application's own `cuda-*` feature of cudarc wins (cudarc
//! allows one); otherwise the `nvcc --version` of the build machine, or the newest cudarc
//! knows where there is no `nvcc`; `CUDARC_CUDA_VERSION=12080` (say) at build time overrides
//! both, for an `nvcc` newer than cudarc knows. Needs Rust 1.88.
//!
//! # Export
//!
//! A `CudaSlice<T>` is a [`Buffer`] on `kDLCUDA` (its context's ordinal): [`Export`](crate::safe::Export) moves it
//! into the managed tensor, whose deleter drops it (cudarc frees it on the slice's stream).
//! Its [`StreamOrder`] records an event on the slice's stream and makes the consumer's stream
//! wait for it, which is what `__dlpack__(stream=...)` asks of a producer (`None`: the legacy
//! default stream; -1: nothing) and what this crate's C exchange table does before handing a
//! tensor over (its `current_work_stream` is the default stream).
//!
//! ```no_run
//! # #[cfg(feature = "pyo3")] {
//! use cudarc::driver::CudaContext;
//! use dlpack_rs::pyo3_glue::DLPackTensor;
//! use dlpack_rs::safe::Export;
//!
//! let stream = CudaContext::new(0)?.default_stream();
//! let slice = stream.clone_htod(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! // `torch.from_dlpack(tensor)` shares the memory: no copy.
//! let tensor = DLPackTensor::from_export(Export::new(slice).shape(&[2, 3]))?;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Work on the slice from streams other than its own must be ordered before the slice's
//! stream (cudarc's event tracking does so for its own operations) before the export. The
//! slice is freed on its own stream when the consumer calls the deleter: a consumer that
//! does so while its kernels that use the memory are still queued on another stream races the
//! free (the DLPack contract: the deleter call says the consumer is done).
//!
//! # Import
//!
//! [`CudaTensor`] owns an imported tensor on a CUDA device and hands out cudarc views of it
//! bound to the consumer's stream. With the Python glue, [`import`] / [`import_mut`] take the
//! tensor from any producer: through its C exchange table when it has one (torch), ordering the
//! consumer's stream after the producer's current work stream by an event, or through
//! `__dlpack__(stream=...)` with the consumer's stream, which the producer orders itself.
//!
//! ```no_run
//! # #[cfg(feature = "pyo3")] {
//! use cudarc::driver::CudaContext;
//! use pyo3::prelude::*;
//!
//! #[pyfunction]
//! fn total(tensor: &Bound<'_, PyAny>) -> PyResult<f32> {
//!     let stream = CudaContext::new(0).map_err(dlpack_rs::cuda::driver_error)?.default_stream();
//!     let imported = dlpack_rs::cuda::import::<f32>(tensor, &stream)?;
//!     // Ordered after the producer's work; the copy runs on `stream`.
//!     let host = stream.clone_dtoh(&imported.as_view()).map_err(dlpack_rs::cuda::driver_error)?;
//!     Ok(host.iter().sum())
//! }
//! # }
//! ```
//!
//! Views of imports are checked as host views are: the element type must match the dtype and
//! allow every bit pattern ([`AnyBitPattern`]: a copy to the host could otherwise produce an
//! invalid value), the layout must be compact row-major, and the device that of the stream's
//! context. Read-only tensors get no mutable view, and the crate's borrow registry keeps a
//! mutable view from coexisting with any other view of the same memory, across owners.

use std::mem::ManuallyDrop;
use std::sync::Arc;

pub use cudarc;
use cudarc::driver::{sys, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DriverError};

use crate::ffi::{DLDevice, DLDeviceType};
use crate::safe::borrow::BorrowToken;
use crate::safe::{AnyBitPattern, AnyManaged, Buffer, Element, Error, StreamOrder};

/// `kDLCUDA` device `ordinal` (cudarc's ordinals are `usize`).
fn device_of(ordinal: usize) -> DLDevice {
    crate::safe::cuda_device(i32::try_from(ordinal).unwrap_or(i32::MAX))
}

/// A cudarc driver error as this crate's [`Error::Device`] (`code` is the `CUresult`).
pub fn device_error(call: &'static str, err: DriverError) -> Error {
    Error::Device {
        call,
        code: err.0 as i64,
    }
}

/// A cudarc driver error as a Python `BufferError`, for `map_err` in `#[pyfunction]`s.
#[cfg(feature = "pyo3")]
#[cfg_attr(docsrs, doc(cfg(feature = "pyo3")))]
pub fn driver_error(err: DriverError) -> pyo3::PyErr {
    device_error("CUDA driver", err).into()
}

/// The `CUstream` a DLPack stream value names on CUDA: 1 is the legacy default stream
/// (`CU_STREAM_LEGACY`), 2 the per-thread default stream (`CU_STREAM_PER_THREAD`), any other
/// value a `cudaStream_t`. `None` for values DLPack does not allow on CUDA (0, below -1) and
/// for -1 ("no synchronisation").
///
/// ```
/// use dlpack_rs::cuda::{cu_stream_of, dlpack_stream_of};
///
/// assert_eq!(cu_stream_of(1), Some(1 as _));
/// assert_eq!(cu_stream_of(0), None);
/// assert_eq!(cu_stream_of(-1), None);
/// assert_eq!(dlpack_stream_of(std::ptr::null_mut()), 1);
/// assert_eq!(dlpack_stream_of(0x7f00_1234 as _), 0x7f00_1234);
/// ```
pub fn cu_stream_of(stream: i64) -> Option<sys::CUstream> {
    match stream {
        i64::MIN..=0 => None,
        // CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are these very handle values.
        s => Some(s as usize as sys::CUstream),
    }
}

/// The DLPack stream value that names `stream` for `__dlpack__(stream=...)`: the NULL stream
/// (the legacy default stream in the driver API) and `CU_STREAM_LEGACY` are 1,
/// `CU_STREAM_PER_THREAD` is 2, any other stream its handle.
pub fn dlpack_stream_of(stream: sys::CUstream) -> i64 {
    match stream as usize {
        0 | 1 => 1,
        s => s as i64,
    }
}

/// What orders a consumer's stream after the work queued on a slice's stream.
struct SliceOrder {
    stream: Arc<CudaStream>,
}

impl StreamOrder for SliceOrder {
    fn order_before(&self, device: DLDevice, consumer_stream: i64) -> Result<(), Error> {
        let Some(handle) = cu_stream_of(consumer_stream) else {
            return Err(Error::Device {
                call: "stream ordering (not a CUDA stream value)",
                code: consumer_stream,
            });
        };
        if device.device_type != DLDeviceType::CUDA {
            return Err(Error::Device {
                call: "stream ordering (not a CUDA tensor)",
                code: i64::from(device.device_type.0),
            });
        }
        let own = self.stream.cu_stream() as usize;
        // The consumer's stream is the slice's own: in order already. (Not for the per-thread
        // default stream, 2, which is another stream on every thread.)
        if own != 2 && (handle as usize == own || (own == 0 && handle as usize == 1)) {
            return Ok(());
        }
        // The protocol's contract, which every DLPack producer trusts: the consumer passes a
        // stream of its own, on the tensor's device (in the primary context, which cudarc and the
        // frameworks share), alive for the call.
        // SAFETY: that stream, per the contract above; the wrapper does not outlive this call and
        // destroys nothing when dropped.
        let consumer = unsafe { self.stream.context().wrap_borrowed_stream(handle) };
        consumer
            .join(&self.stream)
            .map_err(|e| device_error("cuStreamWaitEvent", e))
    }
}

// SAFETY: the device pointer is the slice's own allocation of `len` elements, which stays valid
// and in place for as long as the slice lives (moving a `CudaSlice` does not move its memory)
// and is freed only by its drop; it is an address on the slice's CUDA device, said so by
// `device`, so the crate never makes host views of it. The address is read from the slice's
// field (no reference to the elements is involved) and carries the permission the driver
// gives, so `SHARED_PTR_WRITABLE` holds; no `&self` method of `CudaSlice` writes the memory;
// pointer, length and device never change for a slice.
unsafe impl<T: Element> Buffer for CudaSlice<T> {
    type Elem = T;
    const SHARED_PTR_WRITABLE: bool = true;

    fn data_ptr(&self) -> *mut T {
        // Reading the address through its own stream: with cudarc's event tracking the stream
        // waits for recorded writes (as it already does for its own work).
        let (ptr, _record) = self.device_ptr(self.stream());
        ptr as usize as *mut T
    }

    fn num_elements(&self) -> usize {
        self.len()
    }

    fn device(&self) -> DLDevice {
        device_of(self.ordinal())
    }

    fn stream_order(&self) -> Option<Arc<dyn StreamOrder>> {
        Some(Arc::new(SliceOrder {
            stream: self.stream().clone(),
        }))
    }
}

/// An imported tensor on a CUDA device, viewed through cudarc on the consumer's stream.
///
/// Made by [`CudaTensor::new`] / [`CudaTensor::new_mut`] from any owned managed tensor, or
/// with the Python glue by [`import`] / [`import_mut`]. It holds a borrow of the memory in the
/// crate's registry for as long as it lives: shared for [`CudaTensor::new`], exclusive for
/// [`CudaTensor::new_mut`] (a device export of a Rust owner holds a shared one, as host exports
/// do). Dropping it waits for the device work that may still use the memory (the consumer's
/// stream, and with cudarc's event tracking every stream that used the views; without event
/// tracking, the whole device) and then releases the tensor to its producer; if that wait fails
/// (a failed context), the producer's tensor is leaked rather than handed back in use.
pub struct CudaTensor<T> {
    /// The memory as a cudarc slice bound to the consumer's stream. Never dropped: it does not
    /// own the memory (leaked in `drop`).
    slice: ManuallyDrop<CudaSlice<T>>,
    writable: bool,
    /// The registered borrow, released before the owner.
    borrow: ManuallyDrop<BorrowToken>,
    /// The producer's tensor; released last.
    owner: ManuallyDrop<AnyManaged>,
}

impl<T: AnyBitPattern> CudaTensor<T> {
    /// Views `tensor` on `stream` for reading. The producer's work must already be ordered
    /// before `stream` (as after `__dlpack__(stream=...)` with that stream); see
    /// [`CudaTensor::order_after`] otherwise.
    ///
    /// Refused with an [`Error`] unless the tensor is on `kDLCUDA` (or `kDLCUDAManaged`) with
    /// the device of `stream`'s context, holds `T`'s dtype, is compact row-major and aligned
    /// for `T`, and no mutable view of its memory exists.
    pub fn new(tensor: impl Into<AnyManaged>, stream: &Arc<CudaStream>) -> Result<Self, Error> {
        Self::build(tensor.into(), stream, false)
    }

    /// As [`CudaTensor::new`], with a mutable view ([`CudaTensor::as_view_mut`]): refused for a
    /// read-only tensor, and while any other view of its memory exists.
    pub fn new_mut(tensor: impl Into<AnyManaged>, stream: &Arc<CudaStream>) -> Result<Self, Error> {
        Self::build(tensor.into(), stream, true)
    }

    fn build(tensor: AnyManaged, stream: &Arc<CudaStream>, exclusive: bool) -> Result<Self, Error> {
        let ctx = stream.context();
        let ordinal = ctx.ordinal();
        let (ptr, len) = check_cuda::<T>(&tensor, ordinal, exclusive)?;
        let bytes = len * core::mem::size_of::<T>();
        let borrow = BorrowToken::acquire(ptr, ptr.wrapping_add(bytes), exclusive)?;
        // An error cudarc stored earlier (from a drop) would make the calls below fail, and
        // `upgrade_device_ptr` panics when it cannot make its events: report it instead.
        ctx.check_err()
            .map_err(|e| device_error("an earlier CUDA call (stored by cudarc)", e))?;
        ctx.bind_to_thread()
            .map_err(|e| device_error("cuCtxSetCurrent", e))?;
        // `ptr` is the first of `len` elements of `T`'s dtype in compact layout on the stream's
        // device, aligned for `T`, in memory the producer keeps valid until `owner` is dropped
        // (the managed tensor's contract, trusted at import).
        let upgrade = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: a valid allocation of `len` `T`s (above), which the slice never frees: it is
            // held in `ManuallyDrop` and leaked in `drop`, before the owner is released.
            let slice = unsafe { stream.upgrade_device_ptr::<T>(ptr as sys::CUdeviceptr, len) };
            ManuallyDrop::new(slice)
        }));
        // A panic here came before the slice existed: nothing to leak or free.
        let slice = upgrade.map_err(|_| Error::Device {
            call: "cuEventCreate (cudarc's upgrade_device_ptr)",
            code: -1,
        })?;
        Ok(CudaTensor {
            slice,
            writable: exclusive,
            borrow: ManuallyDrop::new(borrow),
            owner: ManuallyDrop::new(tensor),
        })
    }

    /// Orders the consumer's stream after the work queued on `producer_stream` (an event
    /// recorded there, waited for on the consumer's stream): what a tensor taken without
    /// synchronisation needs (from a C exchange table's `_no_sync` functions, whose
    /// `current_work_stream` names the producer's stream) before its views are used.
    ///
    /// # Safety
    ///
    /// `producer_stream` is a valid CUDA stream (NULL and the special handles included) of the
    /// tensor's device, alive for the call.
    pub unsafe fn order_after(&self, producer_stream: sys::CUstream) -> Result<(), Error> {
        let stream = self.slice.stream();
        if producer_stream == stream.cu_stream() {
            return Ok(());
        }
        // SAFETY: a valid stream of this device, alive for the call (this function's contract);
        // the wrapper does not outlive the call and destroys nothing.
        let producer = unsafe { stream.context().wrap_borrowed_stream(producer_stream) };
        stream
            .join(&producer)
            .map_err(|e| device_error("cuStreamWaitEvent", e))
    }
}

impl<T> CudaTensor<T> {
    /// The memory as a cudarc view, for reading on [`CudaTensor::stream`].
    pub fn as_view(&self) -> CudaView<'_, T> {
        self.slice.as_view()
    }

    /// The memory as a mutable cudarc view; [`Error::ReadOnly`] unless made by
    /// [`CudaTensor::new_mut`] (or [`import_mut`]).
    pub fn as_view_mut(&mut self) -> Result<CudaViewMut<'_, T>, Error> {
        if !self.writable {
            return Err(Error::ReadOnly);
        }
        Ok(self.slice.as_view_mut())
    }

    /// The consumer's stream the views are bound to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.slice.stream()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.slice.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.slice.is_empty()
    }

    /// The shape.
    pub fn shape(&self) -> &[i64] {
        self.owner.shape()
    }

    /// The imported tensor (metadata; it has no host views, being on a device).
    pub fn tensor(&self) -> &AnyManaged {
        &self.owner
    }
}

impl<T> Drop for CudaTensor<T> {
    fn drop(&mut self) {
        let stream = self.slice.stream().clone();
        let ctx = stream.context().clone();
        // An error cudarc stored earlier makes every call below return early without waiting:
        // take it out for now, and put it back at the end.
        let stored = ctx.check_err();
        // SAFETY: each field is taken once, here, and not used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        // Not ours to free: give the address back without freeing it. With cudarc's event
        // tracking (several streams) this makes the consumer's stream wait for every recorded
        // use of the views, on whatever stream it was queued.
        let _ = slice.leak();
        let leak_error = ctx.check_err();
        // Work that uses the memory may still be queued: it must finish before the producer
        // may free or reuse it. With event tracking it is all ordered before the consumer's
        // stream now; without it, uses on other streams are not known: wait for the device.
        let waited = if ctx.is_managing_stream_synchronization() {
            stream.synchronize()
        } else {
            ctx.synchronize()
        };
        let done = leak_error.is_ok() && waited.is_ok();
        ctx.record_err(stored);
        ctx.record_err(leak_error);
        ctx.record_err(waited);
        if done {
            // SAFETY: as above. The borrow ends first, then the producer's tensor goes back.
            unsafe {
                ManuallyDrop::drop(&mut self.borrow);
                ManuallyDrop::drop(&mut self.owner);
            }
        }
        // Otherwise the device work could not be waited for (a failed context): the producer's
        // tensor is leaked rather than handed back while queued work may still use it, and so is
        // the borrow (both `ManuallyDrop`, left undropped): that work may still write the memory
        // (a mutable view) or read it, so no other view of it may be granted ever after.
    }
}

impl<T> core::fmt::Debug for CudaTensor<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CudaTensor")
            .field("shape", &self.shape())
            .field("device", &self.owner.device())
            .field("writable", &self.writable)
            .finish()
    }
}

/// Checks that `tensor` can be viewed as a cudarc slice of `T` on device `ordinal` (mutably
/// when `exclusive`), returning the address of its first element and its length.
pub(crate) fn check_cuda<T: Element>(
    tensor: &AnyManaged,
    ordinal: usize,
    exclusive: bool,
) -> Result<(usize, usize), Error> {
    let device = tensor.device();
    let t = device.device_type;
    if (t != DLDeviceType::CUDA && t != DLDeviceType::CUDA_MANAGED)
        || usize::try_from(device.device_id) != Ok(ordinal)
    {
        return Err(Error::DeviceMismatch {
            expected: device_of(ordinal),
            found: device,
        });
    }
    if tensor.dtype() != T::DTYPE {
        return Err(Error::DtypeMismatch {
            expected: T::DTYPE,
            found: tensor.dtype(),
        });
    }
    if exclusive && tensor.is_read_only() {
        return Err(Error::ReadOnly);
    }
    if !tensor.is_contiguous() {
        return Err(Error::NotContiguous);
    }
    let len = tensor.numel();
    if len == 0 {
        return Ok((0, 0));
    }
    // Non-NULL and aligned for `T`, as for host views (the address is never dereferenced here).
    Ok((tensor.first_element::<T>()? as usize, len))
}

/// Imports `obj` (any object with `__dlpack__`) for reading on `stream`.
///
/// A producer with a C exchange table (torch) hands the tensor over without synchronisation and
/// names its current work stream, after which `stream` is ordered by an event
/// ([`CudaTensor::order_after`]); any other producer is called as
/// `obj.__dlpack__(stream=...)` with `stream`'s DLPack value and orders its work itself.
/// Errors are `BufferError` (`TypeError` for a dtype mismatch), as for host imports.
#[cfg(feature = "pyo3")]
#[cfg_attr(docsrs, doc(cfg(feature = "pyo3")))]
pub fn import<T: AnyBitPattern>(
    obj: &pyo3::Bound<'_, pyo3::PyAny>,
    stream: &Arc<CudaStream>,
) -> pyo3::PyResult<CudaTensor<T>> {
    import_impl(obj, stream, false)
}

/// As [`import`], with a mutable view: refused for read-only tensors (and, from a producer that
/// only speaks legacy DLPack, which cannot say whether writes are allowed).
#[cfg(feature = "pyo3")]
#[cfg_attr(docsrs, doc(cfg(feature = "pyo3")))]
pub fn import_mut<T: AnyBitPattern>(
    obj: &pyo3::Bound<'_, pyo3::PyAny>,
    stream: &Arc<CudaStream>,
) -> pyo3::PyResult<CudaTensor<T>> {
    import_impl(obj, stream, true)
}

#[cfg(feature = "pyo3")]
fn import_impl<T: AnyBitPattern>(
    obj: &pyo3::Bound<'_, pyo3::PyAny>,
    stream: &Arc<CudaStream>,
    exclusive: bool,
) -> pyo3::PyResult<CudaTensor<T>> {
    // No `dl_device`: managed memory (kDLCUDAManaged) is welcome too, and a tensor elsewhere
    // is refused by `check_cuda` with the device it is on.
    let tensor = crate::pyo3_glue::ImportOptions::new()
        .unsynchronized(true)
        .stream(dlpack_stream_of(stream.cu_stream()))
        .import(obj)?;
    let producer_stream = tensor.producer_stream();
    let imported = CudaTensor::<T>::build(tensor.into_inner(), stream, exclusive)?;
    if let Some(producer_stream) = producer_stream {
        // SAFETY: the stream the producer's exchange table named as its current work stream on
        // the tensor's device: the table is trusted as the import trusted it.
        unsafe { imported.order_after(producer_stream.cast()) }?;
    }
    Ok(imported)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::safe::Export;

    /// Host bytes that claim to be on CUDA device 0 (never read: only `check_cuda` sees them).
    struct Claimed(Vec<u8>);

    // SAFETY: the Vec's heap buffer holds `len` bytes and stays in place when the value moves;
    // `Vec::as_ptr` carries write permission; nothing writes through `&self`. The device is a
    // claim for tests of the checks, which never read the memory.
    unsafe impl Buffer for Claimed {
        type Elem = u8;
        const SHARED_PTR_WRITABLE: bool = true;
        fn data_ptr(&self) -> *mut u8 {
            self.0.as_ptr().cast_mut()
        }
        fn num_elements(&self) -> usize {
            self.0.len()
        }
        fn device(&self) -> DLDevice {
            device_of(0)
        }
    }

    fn claimed(export: impl FnOnce(Export<Claimed>) -> Export<Claimed>) -> AnyManaged {
        export(Export::new(Claimed(vec![0; 16])))
            .versioned()
            .unwrap()
            .into()
    }

    /// The checks that need no driver: another device, another dtype, a strided tensor, a
    /// mutable view of a read-only one are refused before anything touches CUDA.
    #[test]
    fn views_of_the_wrong_tensor_are_refused_before_cuda() {
        let cpu: AnyManaged = Export::new(vec![1.0f32; 4]).versioned().unwrap().into();
        assert_eq!(
            check_cuda::<f32>(&cpu, 0, false),
            Err(Error::DeviceMismatch {
                expected: device_of(0),
                found: crate::safe::cpu_device(),
            })
        );
        let plain = claimed(|e| e);
        let (ptr, len) = check_cuda::<u8>(&plain, 0, true).unwrap();
        assert_eq!((ptr, len), (plain.data_ptr() as usize, 16));
        // Device 1 was asked for.
        assert!(matches!(
            check_cuda::<u8>(&plain, 1, false),
            Err(Error::DeviceMismatch { .. })
        ));
        assert!(matches!(
            check_cuda::<i8>(&plain, 0, false),
            Err(Error::DtypeMismatch { .. })
        ));
        let strided = claimed(|e| e.shape(&[4, 2]).strides(&[1, 4]));
        assert_eq!(
            check_cuda::<u8>(&strided, 0, false),
            Err(Error::NotContiguous)
        );
        let read_only = claimed(|e| e.read_only());
        assert!(check_cuda::<u8>(&read_only, 0, false).is_ok());
        assert_eq!(check_cuda::<u8>(&read_only, 0, true), Err(Error::ReadOnly));
        let empty = claimed(|e| e.shape(&[0]));
        assert_eq!(check_cuda::<u8>(&empty, 0, true), Ok((0, 0)));
    }

    #[test]
    fn stream_values_map_both_ways() {
        assert_eq!(cu_stream_of(2), Some(2 as sys::CUstream));
        assert_eq!(cu_stream_of(-2), None);
        assert_eq!(dlpack_stream_of(1 as sys::CUstream), 1);
        assert_eq!(dlpack_stream_of(2 as sys::CUstream), 2);
        let handle = 0x5555_0000usize as sys::CUstream;
        assert_eq!(cu_stream_of(dlpack_stream_of(handle)), Some(handle));
    }
}
