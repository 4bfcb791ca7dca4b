//! `dlpack_rs.Tensor` ([`DLPackTensor`]) and its C exchange table.

use core::ffi::{c_int, c_void};

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;

use crate::ffi::{DLManagedTensorVersioned, DLPackExchangeAPI, DLTensor};
use crate::pyo3_glue::export::class_export::{class_capsule, export_dlpack_device};
use crate::pyo3_glue::export::dlpack_method::CapsuleObject;
use crate::pyo3_glue::export::exchange_export::{
    class_exchange_api_capsule, guarded, instance, table, StaticApi,
};
use crate::pyo3_glue::export::protocol::DLPackArgs;
use crate::pyo3_glue::runtime::errors::{dtype_name, tuple_of};
use crate::safe::{
    self, AnyManaged, Buffer, Export, ManagedTensor, ManagedTensorVersioned, StreamOrder,
    TensorInfo,
};
use crate::IntoDLPack;
use std::sync::Arc;

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
    /// Takes ownership of a versioned managed tensor.
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
}

impl From<ManagedTensor> for DLPackTensor {
    fn from(tensor: ManagedTensor) -> Self {
        Self::from_any(tensor.into_any())
    }
}

impl DLPackTensor {
    /// Wraps any owner (an import handed on keeps its read-only flag and shutdown guard).
    pub(in crate::pyo3_glue) fn from_any(inner: crate::safe::AnyManaged) -> Self {
        DLPackTensor { inner, order: None }
    }
}

// SAFETY: the owned tensor's memory (validated), in place until the `DLPackTensor` (every
// export's keepalive) drops it. A read-only owner exports read-only; a writable owner's elements
// are reached from Rust only through registered views, a `bool` view checking every byte.
unsafe impl IntoDLPack for DLPackTensor {
    fn tensor_info(&self) -> TensorInfo {
        self.inner.tensor_info()
    }

    fn is_read_only(&self) -> bool {
        // The producer's decision, bool included: every Rust view of it checks its bytes.
        self.inner.is_read_only()
    }

    fn rust_access_registered(&self) -> bool {
        // Rust reads the elements only through `tensor()`'s registered views.
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
        dtype_name(self.inner.dtype())
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
            dtype_name(v.dtype()),
            device,
            d.device_id,
            tuple_of(&v.strides()),
            read_only
        )
    }
}

// The class's own exchange table (user classes' tables: `exchange_export.rs`).

/// `managed_tensor_to_py_object_no_sync`: wraps the tensor in a new `dlpack_rs.Tensor`.
pub(crate) unsafe extern "C" fn to_py_object(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    // SAFETY: dlpack.h calls this with the GIL held.
    unsafe {
        guarded(|py| {
            // SAFETY: the caller hands over a valid managed tensor (or NULL); `owned` calls
            // the deleter exactly once, on every path.
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
            // A bare DLTensor cannot say "read-only".
            if tensor.is_read_only() {
                return Err(PyBufferError::new_err(
                    "a read-only tensor cannot be lent as a bare DLTensor",
                ));
            }
            // Device data is ordered before the default stream the table reports.
            let device = tensor.device();
            if let Some(order) = obj.get().order.as_ref() {
                if let Some(stream) =
                    crate::pyo3_glue::export::protocol::ordered_stream(device, None)
                {
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

/// `dlpack_rs.Tensor`'s table.
pub(crate) static TENSOR_API: StaticApi = StaticApi(table::<DLPackTensor>(
    Some(to_py_object),
    Some(dltensor_view),
));
