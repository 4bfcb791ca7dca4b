//! safetensors files both ways (feature `safetensors`): a file's tensors exported zero-copy
//! and read-only, and imported tensors serialized.

use std::collections::BTreeMap;

use dlpack_rs::pyo3_glue::{DLPackTensor, PyTensor};
use dlpack_rs::safe::SafeTensorsFile;
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;

/// Every tensor of the safetensors file at `path` as a `dlpack_rs.Tensor` over the file's bytes
/// (read into memory, or memory-mapped when `mapped`).
#[pyfunction]
#[pyo3(signature = (path, mapped=false))]
fn st_open(path: &str, mapped: bool) -> PyResult<BTreeMap<String, DLPackTensor>> {
    let file = if mapped {
        // SAFETY: the test suite's own files, not changed while mapped.
        unsafe { SafeTensorsFile::map(path) }
    } else {
        SafeTensorsFile::read(path)
    }
    .map_err(|e| PyValueError::new_err(e.to_string()))?;
    file.names()
        .map(|name| {
            let t = file
                .tensor(name)
                .ok_or_else(|| PyKeyError::new_err(name.to_string()))??;
            Ok((name.to_string(), DLPackTensor::new(t)))
        })
        .collect()
}

/// The safetensors bytes of `tensors` (any producer's, imported).
#[pyfunction]
fn st_serialize(tensors: BTreeMap<String, PyTensor>) -> PyResult<Vec<u8>> {
    // The crate's own error: `BufferError` for a borrow conflict or a layout, as everywhere.
    Ok(SafeTensorsFile::serialize(
        tensors.iter().map(|(n, t)| (n.as_str(), &**t)),
    )?)
}

/// Serializes `obj` (imported twice) while a mutable view of its first import is alive: the
/// borrow conflict, as Python sees it.
#[pyfunction]
fn st_serialize_while_writing(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let mut writer = PyTensor::from_pyany(py, obj)?;
    let _view = writer.as_mut_slice::<u8>()?;
    let reader = PyTensor::from_pyany(py, obj)?;
    Ok(SafeTensorsFile::serialize([("t", &*reader)])?)
}

/// Adds this file's functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(st_open, m)?)?;
    m.add_function(wrap_pyfunction!(st_serialize, m)?)?;
    m.add_function(wrap_pyfunction!(st_serialize_while_writing, m)?)?;
    Ok(())
}
