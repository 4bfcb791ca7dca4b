//! What the candle and burn test files share: the embedded interpreter and the Python calls.

use dlpack_rs::ffi::{DLDataType, DLDevice, DLDeviceType};
use dlpack_rs::pyo3_glue::DLPackTensor;
use dlpack_rs::safe::{ManagedTensorVersioned, TensorInfo};
use pyo3::prelude::*;

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Runs `f` attached to the embedded interpreter; an error fails the test.
pub fn with_py<R>(f: impl FnOnce(Python<'_>) -> Result<R>) -> R {
    Python::initialize();
    Python::attach(|py| f(py).unwrap())
}

/// `module.from_dlpack(t)` of a `dlpack_rs.Tensor` holding `t`.
pub fn hand<'py>(
    py: Python<'py>,
    module: &str,
    t: ManagedTensorVersioned,
) -> PyResult<Bound<'py, PyAny>> {
    let obj = Bound::new(py, DLPackTensor::new(t))?;
    py.import(module)?.getattr("from_dlpack")?.call1((obj,))
}

/// Evaluates `code` with `x` bound.
pub fn eval<'py>(
    py: Python<'py>,
    code: &std::ffi::CStr,
    x: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let locals = pyo3::types::PyDict::new(py);
    locals.set_item("x", x)?;
    py.eval(code, None, Some(&locals))
}

/// A managed tensor over `data` (kept alive by the export) on `device` with `dtype` and `shape`.
pub fn managed(
    data: Vec<u8>,
    device: DLDeviceType,
    dtype: DLDataType,
    shape: Vec<i64>,
) -> ManagedTensorVersioned {
    let info = TensorInfo::contiguous(
        data.as_ptr() as *mut _,
        DLDevice::new(device, 0),
        dtype,
        shape,
    );
    let raw = dlpack_rs::safe::try_pack_versioned(data, info, 0).unwrap();
    // SAFETY: just packed, owned by nobody else.
    unsafe { ManagedTensorVersioned::from_raw(raw) }.unwrap()
}
