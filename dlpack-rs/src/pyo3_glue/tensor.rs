//! The ready-made Python class `dlpack_rs.Tensor` ([`DLPackTensor`]): an owned tensor that any
//! DLPack consumer (`np.from_dlpack`, `torch.from_dlpack`, `jax.numpy.from_dlpack`) accepts.

use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyModule};

use super::capsule::Consumed;
use super::export::{export_dlpack, export_dlpack_device};
use super::import::PyTensor;
use crate::ffi::DLDataType;
use crate::safe::{self, Buffer, Export, ManagedTensor, ManagedTensorVersioned, TensorInfo};
use crate::IntoDLPack;

/// An owned tensor exposed to Python as `dlpack_rs.Tensor`, with `__dlpack__`,
/// `__dlpack_device__`, the C exchange API (`__dlpack_c_exchange_api__`), and `shape`,
/// `strides`, `dtype`, `device` properties.
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
    inner: Consumed,
}

impl DLPackTensor {
    /// Takes ownership of a versioned managed tensor.
    pub fn new(tensor: ManagedTensorVersioned) -> Self {
        DLPackTensor {
            inner: Consumed::Versioned(tensor),
        }
    }

    /// Builds the tensor of a safe [`Export`] (versioned, so read-only buffers stay read-only).
    pub fn from_export<B: Buffer + Send + 'static>(export: Export<B>) -> Result<Self, safe::Error> {
        export.versioned().map(Self::new)
    }

    /// A validated view of the owned tensor.
    pub fn view(&self) -> safe::TensorView<'_> {
        self.inner.view()
    }
}

impl From<ManagedTensorVersioned> for DLPackTensor {
    fn from(tensor: ManagedTensorVersioned) -> Self {
        Self::new(tensor)
    }
}

impl From<ManagedTensor> for DLPackTensor {
    fn from(tensor: ManagedTensor) -> Self {
        DLPackTensor {
            inner: Consumed::Legacy(tensor),
        }
    }
}

impl From<PyTensor> for DLPackTensor {
    fn from(tensor: PyTensor) -> Self {
        DLPackTensor {
            inner: tensor.into_inner(),
        }
    }
}

impl IntoDLPack for DLPackTensor {
    fn tensor_info(&self) -> TensorInfo {
        self.view().tensor_info()
    }

    fn is_read_only(&self) -> bool {
        self.view().is_read_only()
    }
}

/// The numpy-style name of a dtype (`"float32"`, `"bool"`, `"bfloat16"`, ...), or a
/// description of the raw code, bits and lanes.
pub fn dtype_name(dtype: DLDataType) -> String {
    use crate::ffi::DLDataTypeCode as C;
    if dtype.lanes == 1 {
        let base = match dtype.code {
            C::INT => Some("int"),
            C::UINT => Some("uint"),
            C::FLOAT => Some("float"),
            C::COMPLEX => Some("complex"),
            _ => None,
        };
        if let Some(base) = base {
            return format!("{base}{}", dtype.bits);
        }
        if dtype.code == C::BOOL && dtype.bits == 8 {
            return "bool".into();
        }
        if dtype.code == C::BFLOAT && dtype.bits == 16 {
            return "bfloat16".into();
        }
    }
    format!(
        "dtype(code={:?}, bits={}, lanes={})",
        dtype.code, dtype.bits, dtype.lanes
    )
}

fn tuple_str(values: &[i64]) -> String {
    match values {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            values
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[pymethods]
impl DLPackTensor {
    /// Exports this tensor (see `dlpack_rs::pyo3_glue::export_dlpack`).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        export_dlpack(slf, stream, max_version, dl_device, copy)
    }

    /// `(device_type, device_id)` of the data.
    fn __dlpack_device__(&self) -> (i32, i32) {
        export_dlpack_device(self)
    }

    /// The DLPack 1.3 C exchange API table (see `dlpack_rs::pyo3_glue::exchange_api`).
    #[classattr]
    fn __dlpack_c_exchange_api__(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
        super::exchange::exchange_api_capsule::<Self>(py)
    }

    /// The extent of each dimension.
    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.view().shape().to_vec()
    }

    /// The strides, in elements.
    #[getter]
    fn strides(&self) -> Vec<i64> {
        self.view().strides().into_owned()
    }

    /// The element type, numpy-style (`"float32"`).
    #[getter]
    fn dtype(&self) -> String {
        dtype_name(self.view().dtype())
    }

    /// `(device_type, device_id)`.
    #[getter]
    fn device(&self) -> (i32, i32) {
        let d = self.view().device();
        (d.device_type.0, d.device_id)
    }

    /// Whether consumers must not write to the data.
    #[getter]
    fn read_only(&self) -> bool {
        self.view().is_read_only()
    }

    fn __repr__(&self) -> String {
        let v = self.view();
        let d = v.device();
        let device = match d.device_type.name() {
            Some(name) => name.trim_start_matches("kDL").to_lowercase(),
            None => format!("device{}", d.device_type.0),
        };
        let read_only = if v.is_read_only() { ", read_only" } else { "" };
        format!(
            "Tensor(shape={}, dtype={}, device={}:{}, strides={}{})",
            tuple_str(v.shape()),
            dtype_name(v.dtype()),
            device,
            d.device_id,
            tuple_str(&v.strides()),
            read_only
        )
    }
}

/// Adds the `Tensor` class to a user's `#[pymodule]`.
///
/// ```
/// use pyo3::prelude::*;
///
/// #[pymodule]
/// fn my_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
///     dlpack_rs::pyo3_glue::register(m)
/// }
/// ```
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DLPackTensor>()
}
