//! What `dlpack_rs.Tensor` is ([`DLPackTensor`]): the ready-made Python class owning a tensor,
//! which any DLPack consumer (`np.from_dlpack`, `torch.from_dlpack`, `jax.numpy.from_dlpack`)
//! accepts, with its own C exchange table (it lends a bare `DLTensor` too, and every class's
//! `managed_tensor_to_py_object_no_sync` makes one).

use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use core::ffi::{c_int, c_void};
use core::ptr::NonNull;

use pyo3::exceptions::{PyBufferError, PyValueError};

use crate::ffi::{
    DLManagedTensorVersioned, DLPackExchangeAPI, DLTensor, DLPACK_EXCHANGE_API_CAPSULE_NAME,
};
use crate::pyo3_glue::export::class_export::{export_dlpack_device, export_object_capsule};
use crate::pyo3_glue::export::exchange_export::{guarded, instance, table, StaticApi};
use crate::pyo3_glue::export::protocol::DLPackArgs;
use crate::pyo3_glue::import::PyTensor;
use crate::pyo3_glue::runtime::errors::{dtype_name, tuple_of};
use crate::safe::{
    self, AnyManaged, Buffer, Export, ManagedTensor, ManagedTensorVersioned, StreamOrder,
    TensorInfo,
};
use crate::IntoDLPack;
use std::sync::Arc;

/// An owned tensor exposed to Python as `dlpack_rs.Tensor`, with `__dlpack__`,
/// `__dlpack_device__`, the C exchange API (`__dlpack_c_exchange_api__`), and `shape`,
/// `strides`, `dtype`, `device` and `read_only` properties.
///
/// It can be made from a [`ManagedTensorVersioned`] or [`ManagedTensor`] (for example an
/// [`Export`] of a `Vec`), or from an imported [`PyTensor`] (to hand a foreign tensor on).
/// Every `__dlpack__` call exports a new managed tensor that keeps this object alive; the
/// owned tensor is released when the object and every export are gone.
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
    /// What orders a consumer's stream after pending device work (device exports only).
    order: Option<Arc<dyn StreamOrder>>,
}

impl DLPackTensor {
    /// Takes ownership of a versioned managed tensor.
    pub fn new(tensor: ManagedTensorVersioned) -> Self {
        DLPackTensor {
            inner: tensor.into_any(),
            order: None,
        }
    }

    /// Builds the tensor of a safe [`Export`] (versioned, so read-only buffers stay read-only),
    /// keeping the buffer's [`Buffer::stream_order`] for `__dlpack__(stream=...)`.
    pub fn from_export<B: Buffer + Send + 'static>(export: Export<B>) -> Result<Self, safe::Error> {
        let order = export.stream_order();
        let mut tensor = Self::new(export.versioned()?);
        tensor.order = order;
        Ok(tensor)
    }

    /// Sets what orders a consumer's stream after the device work pending on the tensor's
    /// memory (see [`StreamOrder`]): for a managed tensor of device memory made by other means
    /// than [`DLPackTensor::from_export`].
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
        DLPackTensor {
            inner: tensor.into_any(),
            order: None,
        }
    }
}

/// Hands an import on: the owner keeps its read-only decision (a legacy import stays
/// read-only) and its shutdown guard.
impl From<PyTensor> for DLPackTensor {
    fn from(tensor: PyTensor) -> Self {
        DLPackTensor {
            inner: tensor.into_inner(),
            order: None,
        }
    }
}

/// Exports the owned tensor's memory, kept alive by the `DLPackTensor`.
// SAFETY: the memory is the owned managed tensor's, which stays valid and in place until the
// `DLPackTensor` (the keepalive of every export of it) drops it; its metadata was validated
// when the owner was made. A read-only owner is exported read-only, and every read-only export
// holds a shared borrow of its bytes until its deleter runs; a writable owner's elements are
// reached from Rust only through registered views (see `__dlpack__`), and a `bool` view checks
// every byte when it is made, so a consumer's write of another byte before that is refused, not
// read (a write while a view lives is a foreign write, outside the model for every dtype).
unsafe impl IntoDLPack for DLPackTensor {
    fn tensor_info(&self) -> TensorInfo {
        self.inner.tensor_info()
    }

    fn is_read_only(&self) -> bool {
        // The owner's own decision, for bool as for any dtype: the producer that made the
        // managed tensor said whether it may be written (a Rust owner that reads its bool
        // memory unchecked exports it read-only, as the derive does), and every Rust view of
        // this tensor checks the bytes it is made over. A writable numpy or torch bool array
        // re-exported here stays writable (and zero-copy for a legacy request).
        self.inner.is_read_only()
    }

    fn stream_order(&self) -> Option<Arc<dyn StreamOrder>> {
        self.order.clone()
    }
}

#[pymethods]
impl DLPackTensor {
    /// Exports this tensor (the `__dlpack__` protocol; see [`export_dlpack_value`](crate::pyo3_glue::export_dlpack_value)).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<Bound<'py, PyAny>>,
    ) -> PyResult<crate::pyo3_glue::export::dlpack_method::CapsuleObject<'py>> {
        let args = DLPackArgs::parse(stream, max_version, dl_device, copy)?;
        // No `&self` method of this class reads the owned tensor's elements: Rust reaches them
        // only through `tensor()`'s views, which are registry borrows. So an export of a
        // writable owner needs no borrow of its own; the memory of a read-only owner (an `Arc`
        // or `&'static` export, a legacy import) is borrowed by every export of it, by the
        // one block builder (`safe::Readers`), and by the owner's own block when it is ours.
        export_object_capsule(slf, &args, false)
            .map(crate::pyo3_glue::export::dlpack_method::CapsuleObject)
    }

    /// `(device_type, device_id)` of the data.
    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        export_dlpack_device(self)
    }

    /// The DLPack 1.3 C exchange API table (see `dlpack_rs::pyo3_glue::exchange_api`).
    #[classattr]
    fn __dlpack_c_exchange_api__(
        py: Python<'_>,
    ) -> PyResult<crate::pyo3_glue::export::dlpack_method::CapsuleObject<'_>> {
        let api = NonNull::from(&TENSOR_API.0).cast::<c_void>();
        // SAFETY: the table is static and immutable; consumers only read it. No destructor: the
        // capsule owns nothing.
        unsafe { PyCapsule::new_with_pointer(py, api, DLPACK_EXCHANGE_API_CAPSULE_NAME) }
            .map(crate::pyo3_glue::export::dlpack_method::CapsuleObject)
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

// ---------------------------------------------------------------------------------------------
// The class's own exchange table (the tables of user classes are in `export/class_table.rs`)
// ---------------------------------------------------------------------------------------------

/// `managed_tensor_to_py_object_no_sync`: wraps the tensor in a new `dlpack_rs.Tensor`.
pub(crate) unsafe extern "C" fn to_py_object(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int {
    // SAFETY: dlpack.h calls this with the GIL held.
    unsafe {
        guarded(|py| {
            // SAFETY: the caller hands over ownership of a valid managed tensor (or NULL);
            // from here on `owned` calls the deleter exactly once, on every path.
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

/// `dltensor_from_py_object_no_sync` for `dlpack_rs.Tensor`: a borrowed view of the owned
/// tensor, valid while the object lives. Read-only tensors are refused (a bare `DLTensor`
/// cannot say "read-only").
unsafe extern "C" fn dltensor_view(py_object: *mut c_void, out: *mut DLTensor) -> c_int {
    // SAFETY: dlpack.h calls this with the GIL held.
    unsafe {
        guarded(|py| {
            // SAFETY: the caller passes a live Python object (or NULL), borrowed for the call.
            let obj =
                instance::<DLPackTensor>(py, py_object, out.is_null(), "dltensor_from_py_object")?;
            let tensor = &obj.get().inner;
            // Read-only tensors: a bare DLTensor cannot say so.
            if tensor.is_read_only() {
                return Err(PyBufferError::new_err(
                    "a read-only tensor cannot be lent as a bare DLTensor",
                ));
            }
            // Device data is ordered before the default stream the table reports, as for
            // `managed_tensor_from_py_object_no_sync`.
            let device = tensor.device();
            if let Some(order) = obj.get().order.as_ref() {
                if let Some(stream) =
                    crate::pyo3_glue::export::protocol::ordered_stream(device, None)
                {
                    order.order_before(device, stream)?;
                }
            }
            // SAFETY: `out` is valid (checked above). The copied struct points at shape and
            // strides owned by the object's managed tensor, alive as long as the object.
            *out = *tensor.raw_tensor();
            Ok(())
        })
    }
}

/// Whether `api` is `dlpack_rs.Tensor`'s own table (a cheaper test than a type check: the table
/// is found per type, and cached, anyway).
pub(crate) fn is_tensor_api(api: &DLPackExchangeAPI) -> bool {
    core::ptr::eq(api, &TENSOR_API.0)
}

/// `dlpack_rs.Tensor`'s table: its memory is read from Rust only through registered views, so
/// its exports hold no borrow of their own.
pub(crate) static TENSOR_API: StaticApi = StaticApi(table::<DLPackTensor, false>(
    Some(to_py_object),
    Some(dltensor_view),
));
