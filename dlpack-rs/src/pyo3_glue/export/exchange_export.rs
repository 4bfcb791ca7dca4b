//! `dlpack_rs.Tensor` ([`DLPackTensor`]) and the producer's C exchange tables, one per class.

use alloc::ffi::CString;
use alloc::vec::Vec;
use core::ffi::{c_char, c_int, c_void, CStr};
use core::ptr::NonNull;
use std::sync::Arc;

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use pyo3::{Borrowed, PyClass};

use crate::ffi::{
    DLDevice, DLDeviceType, DLManagedTensorVersioned, DLPackDLTensorFromPyObjectNoSync,
    DLPackExchangeAPI, DLPackExchangeAPIHeader, DLPackSetError, DLPackVersion, DLTensor,
    DLPACK_EXCHANGE_API_CAPSULE_NAME,
};
use crate::pyo3_glue::export::class_export::{
    class_capsule, export_dlpack_device, ClassRoute, RoutedClass,
};
use crate::pyo3_glue::export::dlpack_method::CapsuleObject;
use crate::pyo3_glue::export::protocol::{ordered_stream, DLPackArgs};
use crate::pyo3_glue::runtime::errors::tuple_of;
use crate::safe::{
    self, cpu_device, AlignedBytes, AnyManaged, Buffer, Export, ManagedTensor,
    ManagedTensorVersioned, StreamOrder, TensorInfo,
};
use crate::IntoDLPack;

/// An owned tensor exposed to Python as `dlpack_rs.Tensor`, which any DLPack consumer takes.
///
/// Made from a `ManagedTensorVersioned`, a `ManagedTensor`, an `Export`, or an imported
/// `PyTensor` (to hand it on). Each `__dlpack__` export keeps this object alive.
///
/// ```
/// use dlpack_rs::pyo3_glue::DLPackTensor;
/// use dlpack_rs::safe::Export;
/// use pyo3::prelude::*;
///
/// #[pyfunction]
/// fn make_image() -> PyResult<DLPackTensor> {
///     Ok(DLPackTensor::from_export(Export::new(vec![0u8; 12]).shape(&[2, 2, 3]))?)
/// }
///
/// Python::initialize();
/// Python::attach(|py| -> PyResult<()> {
///     let t = Bound::new(py, make_image()?)?;
///     assert_eq!(t.repr()?.to_string(), "Tensor(shape=(2, 2, 3), dtype=uint8, device=cpu:0, strides=(6, 3, 1))");
///     Ok(())
/// })
/// .unwrap();
/// ```
#[pyclass(frozen, name = "Tensor", module = "dlpack_rs")]
pub struct DLPackTensor {
    inner: AnyManaged,
    /// Orders a consumer's stream after pending device work.
    order: Option<Arc<dyn StreamOrder>>,
}

impl DLPackTensor {
    /// Wraps a versioned managed tensor, to hand it to Python.
    pub fn new(tensor: ManagedTensorVersioned) -> Self {
        Self::from_any(tensor.into_any())
    }

    /// Builds the versioned tensor of an [`Export`], keeping its [`Buffer::stream_order`].
    pub fn from_export<B: Buffer + Send + 'static>(export: Export<B>) -> Result<Self, safe::Error> {
        let order = export.stream_order();
        let mut tensor = Self::new(export.versioned()?);
        tensor.order = order;
        Ok(tensor)
    }

    /// Sets the [`StreamOrder`] of device memory not made by [`DLPackTensor::from_export`].
    pub fn with_stream_order(mut self, order: Arc<dyn StreamOrder>) -> Self {
        self.order = Some(order);
        self
    }

    /// The owned tensor: metadata and borrow-checked shared views (`as_slice`, `as_array`).
    pub fn tensor(&self) -> &AnyManaged {
        &self.inner
    }

    /// Wraps any owner (an import handed on keeps its read-only flag and shutdown guard).
    pub(in crate::pyo3_glue) fn from_any(inner: AnyManaged) -> Self {
        DLPackTensor { inner, order: None }
    }
}

impl From<ManagedTensor> for DLPackTensor {
    fn from(tensor: ManagedTensor) -> Self {
        Self::from_any(tensor.into_any())
    }
}

// SAFETY: the owned, validated memory stays in place until the `DLPackTensor` (every export's
// keepalive) drops it; a read-only owner exports read-only. Rust reads a writable owner's
// elements only through registered views (`tensor()`), a `bool` view checking every byte.
unsafe impl IntoDLPack for DLPackTensor {
    fn tensor_info(&self) -> TensorInfo {
        self.inner.tensor_info()
    }

    fn is_read_only(&self) -> bool {
        self.inner.is_read_only()
    }

    fn rust_access_registered(&self) -> bool {
        true
    }

    fn stream_order(&self) -> Option<Arc<dyn StreamOrder>> {
        self.order.clone()
    }
}

#[pymethods]
impl DLPackTensor {
    /// Exports this tensor: the whole `__dlpack__` protocol.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<Bound<'py, PyAny>>,
    ) -> PyResult<CapsuleObject<'py>> {
        let args = DLPackArgs::parse(stream, max_version, dl_device, copy)?;
        class_capsule(slf, &args).map(CapsuleObject)
    }

    /// `(device_type, device_id)` of the data.
    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        export_dlpack_device(self)
    }

    /// The DLPack 1.3 C exchange API table.
    #[classattr]
    fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<CapsuleObject<'_>> {
        class_exchange_api_capsule::<DLPackTensor>(py).map(CapsuleObject)
    }

    /// The extent of each dimension.
    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.inner.shape().to_vec()
    }

    /// The strides, in elements.
    #[getter]
    fn strides(&self) -> Vec<i64> {
        self.inner.strides().into_owned()
    }

    /// The element type, numpy-style (`"float32"`).
    #[getter]
    fn dtype(&self) -> String {
        self.inner.dtype().name().to_string()
    }

    /// `(device_type, device_id)`.
    #[getter]
    fn device(&self) -> (i32, i32) {
        let d = self.inner.device();
        (d.device_type.0, d.device_id)
    }

    /// Whether consumers must not write to the data.
    #[getter]
    fn read_only(&self) -> bool {
        self.inner.is_read_only()
    }

    fn __repr__(&self) -> String {
        let v = &self.inner;
        let d = v.device();
        let device = match d.device_type.name() {
            Some(name) => name.trim_start_matches("kDL").to_lowercase(),
            None => format!("device{}", d.device_type.0),
        };
        let read_only = if v.is_read_only() { ", read_only" } else { "" };
        format!(
            "Tensor(shape={}, dtype={}, device={}:{}, strides={}{})",
            tuple_of(v.shape()),
            v.dtype().name(),
            device,
            d.device_id,
            tuple_of(&v.strides()),
            read_only
        )
    }
}

/// `managed_tensor_to_py_object_no_sync`: wraps the tensor in a new `dlpack_rs.Tensor`.
pub(crate) unsafe extern "C" fn to_py_object(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    // SAFETY: dlpack.h calls this with the GIL held.
    unsafe {
        guarded(|py| {
            // SAFETY: a valid managed tensor (or NULL) from the caller; `owned` deletes it once.
            let owned = ManagedTensorVersioned::from_raw(tensor)?;
            if out_py_object.is_null() {
                return Err(PyValueError::new_err(
                    "managed_tensor_to_py_object_no_sync: NULL out pointer",
                ));
            }
            let obj = Bound::new(py, DLPackTensor::new(owned))?;
            // SAFETY: checked non-NULL above; the new reference goes to the caller.
            *out_py_object = obj.into_ptr().cast();
            Ok(())
        })
    }
}

/// `dltensor_from_py_object_no_sync`: a view of the owned tensor, valid while the object lives.
unsafe extern "C" fn dltensor_view(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    // SAFETY: dlpack.h calls this with the GIL held.
    unsafe {
        guarded(|py| {
            // SAFETY: the caller passes a live Python object (or NULL), borrowed for the call.
            let obj =
                instance::<DLPackTensor>(py, py_object, out.is_null(), "dltensor_from_py_object")?;
            let tensor = &obj.get().inner;
            if tensor.is_read_only() {
                return Err(PyBufferError::new_err(
                    "a read-only tensor cannot be lent as a bare DLTensor",
                ));
            }
            // Device data is ordered before the default stream the table reports.
            let device = tensor.device();
            if let Some(order) = obj.get().order.as_ref() {
                if let Some(stream) = ordered_stream(device, None) {
                    order.order_before(device, stream)?;
                }
            }
            // SAFETY: `out` is non-NULL (checked above); the copy points at shape and strides
            // the object's managed tensor owns, alive as long as the object.
            *out = *tensor.raw_tensor();
            Ok(())
        })
    }
}

/// Whether `api` is `dlpack_rs.Tensor`'s table (cheaper than a type check).
pub(crate) fn is_tensor_api(api: &DLPackExchangeAPI) -> bool {
    core::ptr::eq(api, &TENSOR_API.0)
}

pub(crate) static TENSOR_API: StaticApi = StaticApi(table::<DLPackTensor>(Some(dltensor_view)));

/// Runs an exchange function's body after joining the registry (an error or panic gives -1).
/// # Safety
/// The calling thread must be attached to the interpreter (hold the GIL).
#[inline(always)]
pub(crate) unsafe fn guarded(f: impl FnOnce(Python<'_>) -> PyResult<()>) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        crate::pyo3_glue::runtime::cpython::attached_entry(
            -1,
            "a Rust panic in a DLPack exchange API function",
            |py| {
                crate::pyo3_glue::runtime::shared_registry::join(py)?;
                f(py).map(|()| 0)
            },
        )
    }
}

/// The instance of `T` an exchange function was called with (`ValueError`, `TypeError`).
/// # Safety
/// `py_object` is NULL or a live Python object, borrowed for the call.
pub(crate) unsafe fn instance<'a, 'py, T: PyClass>(
    py: Python<'py>,
    py_object: *mut c_void,
    out_is_null: bool,
    function: &str,
) -> PyResult<Borrowed<'a, 'py, T>> {
    if py_object.is_null() || out_is_null {
        return Err(PyValueError::new_err(format!(
            "{function}_no_sync: NULL argument"
        )));
    }
    // SAFETY: non-NULL and live, by this function's contract.
    let obj = unsafe { Borrowed::from_ptr(py, py_object.cast::<ffi::PyObject>()) };
    Ok(obj.cast::<T>()?)
}

/// `managed_tensor_from_py_object_no_sync` for class `T`.
pub(crate) unsafe extern "C" fn from_py_object<T: RoutedClass>(
    py_object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int {
    // SAFETY: dlpack.h calls this with the GIL held.
    unsafe {
        guarded(|py| {
            // SAFETY: the caller passes a live Python object (or NULL), borrowed for the call.
            let obj = instance::<T>(
                py,
                py_object,
                out.is_null(),
                "managed_tensor_from_py_object",
            )?;
            // Exported as `__dlpack__(max_version=(1, 3))` exports it.
            let r = <T::Frozen as ClassRoute<T>>::export(&obj)?;
            r.order_before(None)?;
            let (flags, readers) = (r.flags(), r.readers());
            // SAFETY: the `ClassRoute` contract: the keepalive keeps the described memory valid
            // and in place (writable unless read-only); Rust reads outside it are in `readers`.
            let owned = safe::pack_validated::<DLManagedTensorVersioned, _>(
                r.owner,
                r.validated,
                flags,
                readers,
                None,
            )?;
            // SAFETY: `out` is a valid, non-NULL out pointer (checked above).
            *out = owned.into_raw();
            Ok(())
        })
    }
}

/// `current_work_stream`: the default stream our exports order device data before.
pub(crate) unsafe extern "C" fn current_work_stream(
    device_type: DLDeviceType,
    device_id: i32,
    out_current_stream: *mut *mut c_void,
) -> c_int {
    // A handle value, never dereferenced.
    let device = DLDevice {
        device_type,
        device_id,
    };
    let handle = ordered_stream(device, None).unwrap_or(0);
    let stream = core::ptr::without_provenance_mut(handle as usize);
    if !out_current_stream.is_null() {
        // SAFETY: a non-NULL out pointer from the caller.
        unsafe { *out_current_stream = stream };
    }
    0
}

/// Allocates a zeroed, compact CPU tensor shaped like `prototype`.
/// # Safety
/// `prototype` is NULL or points at a `DLTensor` whose shape holds `ndim` values.
unsafe fn allocate_like(
    prototype: *const DLTensor,
) -> Result<*mut DLManagedTensorVersioned, (&'static CStr, String)> {
    // SAFETY: NULL or valid, by this function's contract.
    let Some(p) = (unsafe { prototype.as_ref() }) else {
        return Err((c"ValueError", "prototype is NULL".into()));
    };
    if p.device != cpu_device() {
        return Err((
            c"BufferError",
            format!("this allocator only allocates CPU memory, not {}", p.device),
        ));
    }
    if p.ndim < 0 || p.ndim as usize > TensorInfo::MAX_NDIM || (p.ndim > 0 && p.shape.is_null()) {
        return Err((
            c"ValueError",
            "prototype has an invalid ndim or shape".into(),
        ));
    }
    let shape: Vec<i64> = if p.ndim == 0 {
        Vec::new()
    } else {
        // SAFETY: non-NULL and `ndim` long, by this function's contract.
        unsafe { core::slice::from_raw_parts(p.shape, p.ndim as usize) }.to_vec()
    };
    // Validate before sizing anything.
    let probe = TensorInfo::contiguous(
        NonNull::<u64>::dangling().as_ptr().cast(),
        cpu_device(),
        p.dtype,
        shape,
    );
    let numel = probe.numel().map_err(|e| (c"ValueError", e.to_string()))?;
    let bits = safe::element_bits(p.dtype) as u128;
    let nbytes = (numel as u128 * bits).div_ceil(8);
    let nbytes =
        usize::try_from(nbytes).map_err(|_| (c"MemoryError", "tensor too large".into()))?;
    let mut storage = AlignedBytes::zeroed(nbytes)
        .map_err(|_| (c"MemoryError", "out of memory allocating the tensor".into()))?;
    let info = TensorInfo {
        data: storage.as_mut_ptr(),
        ..probe
    };
    // SAFETY: `info` describes the new zeroed storage (validated above), which the keepalive
    // owns alone; the pointer is taken again from it in its final place.
    let owned = unsafe {
        safe::pack_owned::<DLManagedTensorVersioned, _>(
            storage,
            info,
            0,
            safe::Readers::ExportOnly,
            Some(AlignedBytes::as_mut_ptr),
        )
    }
    .map_err(|e| (c"ValueError", e.to_string()))?;
    Ok(owned.into_raw())
}

/// `managed_tensor_allocator`: a zeroed, 64-byte aligned CPU tensor (errors: `set_error`).
pub(crate) unsafe extern "C" fn allocator(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: DLPackSetError,
) -> c_int {
    let result = crate::pyo3_glue::runtime::cpython::no_unwind(|| {
        if out.is_null() {
            return Err((c"ValueError", "out is NULL".into()));
        }
        // SAFETY: the caller passes NULL or a valid prototype (the dlpack.h contract).
        unsafe { allocate_like(prototype) }
    });
    let (kind, message) = match result {
        Some(Ok(ptr)) => {
            // SAFETY: `out` is non-NULL (checked inside the closure).
            unsafe { *out = ptr };
            return 0;
        }
        Some(Err(e)) => e,
        None => (
            c"RuntimeError",
            "a Rust panic in the DLPack allocator".into(),
        ),
    };
    if let Some(set_error) = set_error {
        let message = CString::new(message).unwrap_or_default();
        let _ = crate::pyo3_glue::runtime::cpython::no_unwind(|| {
            // SAFETY: the consumer's callback, with its context and two C strings outliving it.
            unsafe { set_error(error_ctx, kind.as_ptr(), message.as_ptr().cast::<c_char>()) }
        });
    }
    -1
}

#[repr(transparent)]
pub(crate) struct StaticApi(pub(crate) DLPackExchangeAPI);

// SAFETY: never written after initialisation; `prev_api` is NULL, the other fields code addresses.
unsafe impl Sync for StaticApi {}

/// A table whose `managed_tensor_from_py_object_no_sync` exports instances of `T`.
pub(crate) const fn table<T: RoutedClass>(
    dltensor: DLPackDLTensorFromPyObjectNoSync,
) -> DLPackExchangeAPI {
    DLPackExchangeAPI {
        header: DLPackExchangeAPIHeader {
            version: DLPackVersion::CURRENT,
            prev_api: core::ptr::null_mut(),
        },
        managed_tensor_allocator: Some(allocator),
        managed_tensor_from_py_object_no_sync: Some(from_py_object::<T>),
        managed_tensor_to_py_object_no_sync: Some(to_py_object),
        dltensor_from_py_object_no_sync: dltensor,
        current_work_stream: Some(current_work_stream),
    }
}

/// One table per user class, a promoted constant (static storage).
struct Tables<T>(core::marker::PhantomData<T>);

impl<T: RoutedClass> Tables<T> {
    const API: StaticApi = StaticApi(table::<T>(None));
}

/// The static exchange table of class `T`; only [`DLPackTensor`]'s lends a bare `DLTensor`.
#[doc(hidden)]
pub fn exchange_api<T: RoutedClass + 'static>() -> &'static DLPackExchangeAPI {
    if core::any::TypeId::of::<T>() == core::any::TypeId::of::<DLPackTensor>() {
        return &TENSOR_API.0;
    }
    let api: &'static StaticApi = &Tables::<T>::API;
    &api.0
}

/// The `__dlpack_c_exchange_api__` class attribute of `T`: a capsule of its table.
#[doc(hidden)]
pub fn class_exchange_api_capsule<T: RoutedClass + 'static>(
    py: Python<'_>,
) -> PyResult<Bound<'_, PyCapsule>> {
    let api = NonNull::from(exchange_api::<T>()).cast::<c_void>();
    // SAFETY: a static, immutable table, which consumers only read; the capsule owns nothing.
    unsafe { PyCapsule::new_with_pointer(py, api, DLPACK_EXCHANGE_API_CAPSULE_NAME) }
}
