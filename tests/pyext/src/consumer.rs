//! The Rust side that imports: `Imported` (a `PyTensor` argument that also takes a bare
//! capsule), what an import describes, its elements read back in C order, and the functions
//! that import any DLPack object to report on it, write it in place or re-export it.

use crate::dtype_name;
use dlpack_rs::ffi::{DLDevice, DLDeviceType};
use dlpack_rs::pyo3_glue::{DLPackTensor, ImportOptions, PyTensor};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// A `PyTensor` argument that also takes a bare DLPack capsule: the suite hands over raw and
/// deliberately malformed capsules (ctypes mirrors of the DLPack structs, with hostile metadata
/// that the import must refuse) to check the consumer side directly.
pub(crate) struct Imported(pub(crate) PyTensor);

impl<'a, 'py> FromPyObject<'a, 'py> for Imported {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
        if let Ok(capsule) = obj.cast::<pyo3::types::PyCapsule>() {
            // SAFETY: the test suite vouches for its capsules: each one named "dltensor" /
            // "dltensor_versioned" holds the struct of that name (made by a real producer or
            // by `dlpack_ctypes`), whatever its metadata says.
            return unsafe { PyTensor::from_capsule(&capsule) }.map(Imported);
        }
        PyTensor::extract(obj).map(Imported)
    }
}

impl std::ops::Deref for Imported {
    type Target = PyTensor;
    fn deref(&self) -> &PyTensor {
        &self.0
    }
}

impl std::ops::DerefMut for Imported {
    fn deref_mut(&mut self) -> &mut PyTensor {
        &mut self.0
    }
}

pub(crate) fn describe<'py>(py: Python<'py>, t: &PyTensor) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let v = &**t;
    d.set_item("shape", v.shape().to_vec())?;
    d.set_item("strides", v.strides().into_owned())?;
    d.set_item("raw_strides", v.raw_strides().map(<[i64]>::to_vec))?;
    d.set_item("dtype", dtype_name(v.dtype()))?;
    d.set_item(
        "dtype_code",
        (v.dtype().code.0, v.dtype().bits, v.dtype().lanes),
    )?;
    d.set_item("device", (v.device().device_type.0, v.device().device_id))?;
    d.set_item("flags", v.flags())?;
    d.set_item("read_only", t.is_read_only())?;
    d.set_item("copied", t.is_copied())?;
    d.set_item("versioned", t.is_versioned())?;
    d.set_item(
        "version",
        t.as_versioned()
            .map(|m| (m.version().major, m.version().minor)),
    )?;
    d.set_item("data_ptr", v.data_ptr() as usize)?;
    d.set_item("byte_offset", v.byte_offset())?;
    d.set_item("nbytes", t.nbytes())?;
    d.set_item("numel", t.numel())?;
    d.set_item("ndim", t.ndim())?;
    d.set_item("contiguous", t.is_contiguous())?;
    Ok(d)
}

/// Imports `obj` (any DLPack producer or capsule) and reports what it describes.
#[pyfunction]
fn inspect<'py>(py: Python<'py>, obj: Imported) -> PyResult<Bound<'py, PyDict>> {
    describe(py, &obj)
}

/// As `inspect`, asking the producer for a device and/or a copy.
#[pyfunction]
#[pyo3(signature = (obj, *, dl_device=None, copy=None))]
fn inspect_with<'py>(
    obj: &Bound<'py, PyAny>,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyDict>> {
    let mut opts = ImportOptions::new();
    if let Some((t, id)) = dl_device {
        opts = opts.device(DLDevice {
            device_type: DLDeviceType(t),
            device_id: id,
        });
    }
    if let Some(c) = copy {
        opts = opts.copy(c);
    }
    let t = opts.import(obj)?;
    let d = describe(obj.py(), &t)?;
    d.set_item("bytes", gather(&t)?)?;
    Ok(d)
}

/// The elements in logical C order, as bytes, read through the shape and strides.
pub(crate) fn gather(t: &PyTensor) -> PyResult<Vec<u8>> {
    let v = &**t;
    if !v.device().device_type.is_host_accessible() {
        return Err(PyValueError::new_err("not host-accessible"));
    }
    let bits = usize::from(v.dtype().bits) * usize::from(v.dtype().lanes);
    if bits % 8 != 0 {
        return Err(PyValueError::new_err("sub-byte dtype"));
    }
    let esize = bits / 8;
    let numel = v.numel();
    let mut out = Vec::with_capacity(numel * esize);
    if numel == 0 {
        return Ok(out);
    }
    let shape = v.shape();
    let strides = v.strides();
    let base = v.data_ptr().cast::<u8>();
    let mut index = vec![0i64; shape.len()];
    for _ in 0..numel {
        let offset: i64 = index.iter().zip(strides.iter()).map(|(k, s)| k * s).sum();
        // SAFETY: the tensor was validated at import; `index` is inside `shape`, so this element
        // is one the producer described, host-accessible and alive while `t` is held.
        let elem = unsafe {
            std::slice::from_raw_parts(base.offset(offset as isize * esize as isize), esize)
        };
        out.extend_from_slice(elem);
        for axis in (0..shape.len()).rev() {
            index[axis] += 1;
            if index[axis] < shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
    Ok(out)
}

/// Imports `obj` and returns its elements in logical C order as bytes.
#[pyfunction]
fn to_bytes<'py>(py: Python<'py>, obj: Imported) -> PyResult<Bound<'py, PyBytes>> {
    Ok(PyBytes::new(py, &gather(&obj)?))
}

macro_rules! by_dtype {
    ($t:expr, $name:expr, |$ty:ident| $body:expr) => {
        match $name.as_str() {
            "int8" => {
                type $ty = i8;
                $body
            }
            "int16" => {
                type $ty = i16;
                $body
            }
            "int32" => {
                type $ty = i32;
                $body
            }
            "int64" => {
                type $ty = i64;
                $body
            }
            "uint8" => {
                type $ty = u8;
                $body
            }
            "uint16" => {
                type $ty = u16;
                $body
            }
            "uint32" => {
                type $ty = u32;
                $body
            }
            "uint64" => {
                type $ty = u64;
                $body
            }
            "float32" => {
                type $ty = f32;
                $body
            }
            "float64" => {
                type $ty = f64;
                $body
            }
            other => Err(PyValueError::new_err(format!("unsupported dtype {other}"))),
        }
    };
}

/// Imports `obj` and adds 1 to every element in place, through `as_mut_slice`.
#[pyfunction]
fn add_one(mut obj: Imported) -> PyResult<()> {
    let name = dtype_name(obj.dtype());
    by_dtype!(obj, name, |T| {
        for x in obj.as_mut_slice::<T>()?.iter_mut() {
            *x += 1 as T;
        }
        Ok(())
    })
}

/// As `add_one`, importing with `ImportOptions::writable_legacy(true)`: a legacy capsule's
/// memory is then writable.
#[pyfunction]
fn add_one_legacy_writable(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    // SAFETY: a test helper; the tests hand it legacy producers over writable numpy arrays,
    // and a jax array only over memory whose export holds a borrow, where the mutable view is
    // refused before anything is written.
    let options = unsafe { ImportOptions::new().writable_legacy(true) };
    let t = options.import(obj)?;
    add_one(Imported(t))
}

/// Imports `obj` through the safe route only (`PyTensor::from_pyany`), returning its shape.
#[pyfunction]
fn import_safely(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    Ok(PyTensor::from_pyany(py, obj)?.shape().to_vec())
}

#[allow(clippy::unnecessary_cast)]
/// Imports `obj` and returns its elements as floats through `as_slice::<T>()`, where `T` is
/// named by `as_dtype` (a mismatch raises TypeError).
#[pyfunction]
fn as_slice_values(obj: Imported, as_dtype: String) -> PyResult<Vec<f64>> {
    by_dtype!(obj, as_dtype, |T| Ok(obj
        .as_slice::<T>()?
        .iter()
        .map(|&x| x as f64)
        .collect()))
}

/// Imports `obj` and hands it on as a `dlpack_rs.Tensor` (a foreign tensor re-exported).
#[pyfunction]
fn reexport(obj: Imported) -> DLPackTensor {
    DLPackTensor::from(obj.0)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(inspect_with, m)?)?;
    m.add_function(wrap_pyfunction!(to_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(add_one, m)?)?;
    m.add_function(wrap_pyfunction!(add_one_legacy_writable, m)?)?;
    m.add_function(wrap_pyfunction!(import_safely, m)?)?;
    m.add_function(wrap_pyfunction!(as_slice_values, m)?)?;
    m.add_function(wrap_pyfunction!(reexport, m)?)?;
    Ok(())
}
