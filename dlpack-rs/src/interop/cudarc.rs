//! CUDA memory through [`cudarc`] (feature `cudarc`): export a [`CudaSlice`] zero-copy, import
//! a CUDA tensor as a [`CudaView`] / [`CudaViewMut`], with stream ordering by events.
//!
//! The driver loads on first use (CPU paths need no CUDA). The bindings' CUDA version is the
//! application's cudarc `cuda-*` feature, else `nvcc --version`; `CUDARC_CUDA_VERSION=12080` at
//! build time overrides both. Needs Rust 1.88.
//!
//! # Export
//!
//! A `CudaSlice<T>` is a [`Buffer`] on `kDLCUDA`, freed by the deleter; the consumer's stream
//! waits for an event on the slice's stream (order other streams' work before that one first).
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
//! # Import
//!
//! A [`CudaTensor`], checked as host views are (`T:` [`AnyBitPattern`]):
//!
//! ```no_run
//! # #[cfg(feature = "pyo3")] {
//! use cudarc::driver::CudaContext;
//! use pyo3::prelude::*;
//!
//! #[pyfunction]
//! fn total(tensor: &Bound<'_, PyAny>) -> PyResult<f32> {
//!     let stream = CudaContext::new(0).map_err(dlpack_rs::safe::Error::from)?.default_stream();
//!     let imported = dlpack_rs::cuda::CudaTensor::<f32>::import(tensor, &stream)?;
//!     let host = stream.clone_dtoh(&imported.as_view()).map_err(dlpack_rs::safe::Error::from)?;
//!     Ok(host.iter().sum())
//! }
//! # }
//! ```

use std::mem::ManuallyDrop;
use std::sync::Arc;

use cudarc::driver::{sys, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DriverError};

use crate::ffi::{DLDevice, DLDeviceType};
use crate::safe::borrow::BorrowToken;
use crate::safe::{AnyBitPattern, AnyManaged, Buffer, Element, Error, StreamOrder};

/// `kDLCUDA` device `ordinal` (cudarc's ordinals are `usize`).
fn device_of(ordinal: usize) -> DLDevice {
    crate::safe::cuda_device(i32::try_from(ordinal).unwrap_or(i32::MAX))
}

/// A cudarc driver error as [`Error::Device`] (`code` is the `CUresult`).
pub(crate) fn device_error(call: &'static str, err: DriverError) -> Error {
    Error::Device {
        call,
        code: err.0 as i64,
    }
}

/// A cudarc driver error as [`Error::Device`] (`BufferError` in Python).
impl From<DriverError> for Error {
    fn from(err: DriverError) -> Self {
        device_error("CUDA driver", err)
    }
}

/// The `CUstream` a DLPack stream value names on CUDA: a positive value is the handle (1 and 2
/// are the handles `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`); `None` for -1 and invalid ones.
fn cu_stream_of(stream: i64) -> Option<sys::CUstream> {
    match stream {
        i64::MIN..=0 => None,
        s => Some(s as usize as sys::CUstream),
    }
}

/// The DLPack stream value naming `stream`: 1 for NULL and `CU_STREAM_LEGACY` (both the legacy
/// default stream), 2 for `CU_STREAM_PER_THREAD`, any other stream its handle.
#[cfg_attr(not(feature = "pyo3"), allow(dead_code))] // the import's (pyo3) and the tests'
fn dlpack_stream_of(stream: sys::CUstream) -> i64 {
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
        // The slice's own stream is in order already; not so the per-thread stream (2).
        if own != 2 && (handle as usize == own || (own == 0 && handle as usize == 1)) {
            return Ok(());
        }
        // SAFETY: DLPack's contract: the consumer passes a live stream on the tensor's device (in
        // the primary context, shared with the frameworks); the wrapper destroys nothing.
        let consumer = unsafe { self.stream.context().wrap_borrowed_stream(handle) };
        consumer
            .join(&self.stream)
            .map_err(|e| device_error("cuStreamWaitEvent", e))
    }
}

// SAFETY: the slice's own allocation of `len` elements, in place until its drop frees it, on
// CUDA (no host views); the address carries the driver's permissions (`SHARED_PTR_WRITABLE`); no
// `&self` method writes the memory; pointer, length and device never change.
unsafe impl<T: Element> Buffer for CudaSlice<T> {
    type Elem = T;
    const SHARED_PTR_WRITABLE: bool = true;

    fn data_ptr(&self) -> *mut T {
        // On its own stream: with event tracking, it waits for recorded writes.
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
/// It holds a registry borrow of the memory (exclusive for [`CudaTensor::new_mut`]). Dropping it
/// waits for device work on the memory, then releases the tensor (leaked if the wait fails).
pub struct CudaTensor<T> {
    /// The memory, bound to the consumer's stream; leaked in `drop`, as it owns nothing.
    slice: ManuallyDrop<CudaSlice<T>>,
    writable: bool,
    /// The registered borrow, released before the owner.
    borrow: ManuallyDrop<BorrowToken>,
    /// The producer's tensor; released last.
    owner: ManuallyDrop<AnyManaged>,
}

impl<T: AnyBitPattern> CudaTensor<T> {
    /// Views `tensor` on `stream` for reading, the producer's work ordered before `stream`
    /// ([`CudaTensor::order_after`]). Needs `kDLCUDA` (or `kDLCUDAManaged`) on `stream`'s device,
    /// `T`'s dtype, compact row-major layout, alignment, and no mutable view of the memory.
    pub fn new(tensor: impl Into<AnyManaged>, stream: &Arc<CudaStream>) -> Result<Self, Error> {
        Self::build(tensor.into(), stream, false)
    }

    /// As [`CudaTensor::new`], with a mutable view: refused for a read-only tensor, and while
    /// any other view of its memory exists.
    pub fn new_mut(tensor: impl Into<AnyManaged>, stream: &Arc<CudaStream>) -> Result<Self, Error> {
        Self::build(tensor.into(), stream, true)
    }

    fn build(tensor: AnyManaged, stream: &Arc<CudaStream>, exclusive: bool) -> Result<Self, Error> {
        let ctx = stream.context();
        let ordinal = ctx.ordinal();
        let (ptr, len) = check_cuda::<T>(&tensor, ordinal, exclusive)?;
        let bytes = len * core::mem::size_of::<T>();
        let borrow = BorrowToken::acquire(ptr, ptr.wrapping_add(bytes), exclusive)?;
        // A stored cudarc error would make `upgrade_device_ptr` panic: report it instead.
        ctx.check_err()
            .map_err(|e| device_error("an earlier CUDA call (stored by cudarc)", e))?;
        ctx.bind_to_thread()
            .map_err(|e| device_error("cuCtxSetCurrent", e))?;
        let upgrade = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: `check_cuda`: `len` aligned `T`s on this device, kept valid by the owner
            // until dropped; the slice never frees them (`ManuallyDrop`, leaked in `drop`).
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

    /// Orders the consumer's stream after the work queued on `producer_stream`, by an event.
    ///
    /// # Safety
    /// `producer_stream` is a valid CUDA stream (NULL and the special handles included) of the
    /// tensor's device, alive for the call.
    pub unsafe fn order_after(&self, producer_stream: sys::CUstream) -> Result<(), Error> {
        let stream = self.slice.stream();
        if producer_stream == stream.cu_stream() {
            return Ok(());
        }
        // SAFETY: a live stream of this device (this function's contract); the wrapper frees none.
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

    /// The memory as a mutable cudarc view; [`Error::ReadOnly`] unless made by a `*_mut` method.
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

    /// Extent of each dimension, as the producer gave it.
    pub fn shape(&self) -> &[i64] {
        self.owner.shape()
    }

    /// The imported tensor (for metadata: it has no host views).
    pub fn tensor(&self) -> &AnyManaged {
        &self.owner
    }
}

impl<T> Drop for CudaTensor<T> {
    fn drop(&mut self) {
        let stream = self.slice.stream().clone();
        let ctx = stream.context().clone();
        // A stored error would make the calls below return without waiting: put it back last.
        let stored = ctx.check_err();
        // SAFETY: each field is taken once, here, and not used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        // Not ours to free (with event tracking, the stream waits for the views' recorded uses).
        let _ = slice.leak();
        let leak_error = ctx.check_err();
        // Queued work must finish before the memory goes back (the whole device's, untracked).
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
            // SAFETY: as above; the borrow ends before the tensor goes back.
            unsafe {
                ManuallyDrop::drop(&mut self.borrow);
                ManuallyDrop::drop(&mut self.owner);
            }
        }
        // Else queued work may still use the memory: leak the tensor and the borrow.
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

/// Checks `tensor` as a cudarc slice of `T` on device `ordinal`: its first address and length.
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
    crate::safe::dtype_is::<T>(tensor.dtype())?;
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
    // Non-NULL and aligned for `T`, as for host views (never dereferenced here).
    Ok((tensor.first_element::<T>()? as usize, len))
}

#[cfg(feature = "pyo3")]
#[cfg_attr(docsrs, doc(cfg(feature = "pyo3")))]
impl<T: AnyBitPattern> CudaTensor<T> {
    /// Imports `obj` (any object with `__dlpack__`) for reading on `stream`, after its work.
    pub fn import(
        obj: &pyo3::Bound<'_, pyo3::PyAny>,
        stream: &Arc<CudaStream>,
    ) -> pyo3::PyResult<Self> {
        Self::import_with(obj, stream, false)
    }

    /// As [`CudaTensor::import`], with a mutable view (refused for read-only tensors).
    pub fn import_mut(
        obj: &pyo3::Bound<'_, pyo3::PyAny>,
        stream: &Arc<CudaStream>,
    ) -> pyo3::PyResult<Self> {
        Self::import_with(obj, stream, true)
    }

    fn import_with(
        obj: &pyo3::Bound<'_, pyo3::PyAny>,
        stream: &Arc<CudaStream>,
        exclusive: bool,
    ) -> pyo3::PyResult<Self> {
        // No `dl_device`: managed memory is welcome too; `check_cuda` refuses other devices.
        let tensor = crate::pyo3_glue::ImportOptions::new()
            .unsynchronized(true)
            .stream(dlpack_stream_of(stream.cu_stream()))
            .import(obj)?;
        let producer_stream = tensor.producer_stream();
        let imported = Self::build(tensor.into_inner(), stream, exclusive)?;
        if let Some(producer_stream) = producer_stream {
            // SAFETY: the producer's current work stream, named by its trusted exchange table.
            unsafe { imported.order_after(producer_stream.cast()) }?;
        }
        Ok(imported)
    }
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
        assert_eq!(cu_stream_of(1), Some(1 as sys::CUstream));
        assert_eq!(cu_stream_of(0), None);
        assert_eq!(cu_stream_of(-1), None);
        assert_eq!(dlpack_stream_of(core::ptr::null_mut()), 1);
        assert_eq!(dlpack_stream_of(0x7f00_1234 as sys::CUstream), 0x7f00_1234);
        assert_eq!(cu_stream_of(2), Some(2 as sys::CUstream));
        assert_eq!(cu_stream_of(-2), None);
        assert_eq!(dlpack_stream_of(1 as sys::CUstream), 1);
        assert_eq!(dlpack_stream_of(2 as sys::CUstream), 2);
        let handle = 0x5555_0000usize as sys::CUstream;
        assert_eq!(cu_stream_of(dlpack_stream_of(handle)), Some(handle));
    }
}
