//! Low-precision element types in the interop suite (dlpack-rs features `float8`, `half`):
//! typed FP8 exports and views (`float8::F8E4M3`, `F8E5M2`), packed exports and views of the
//! FP8 codes without a Rust type and of FP4 in both forms (jax's 4 bits x 1 lane, torch's
//! `float4_e2m1fn_x2`), and round trips of all of them through Rust memory.

use crate::dtype_name;
use crate::Imported;
use dlpack_rs::ffi::{DLDataType, DLDataTypeCode as C};
use dlpack_rs::pyo3_glue::{CContig, DLPackTensor, Dims, Framework, Returned, TensorView, ANY};
use dlpack_rs::safe::{AlignedBuffer, Export, Packing};
use float8::{F8E4M3, F8E5M2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyType};

/// The dtype of a low-precision name, as torch and jax spell it.
fn low_dtype(name: &str) -> PyResult<DLDataType> {
    Ok(match name {
        "float8_e3m4" => DLDataType::new(C::FLOAT8_E3M4, 8, 1),
        "float8_e4m3" => DLDataType::new(C::FLOAT8_E4M3, 8, 1),
        "float8_e4m3b11fnuz" => DLDataType::new(C::FLOAT8_E4M3B11FNUZ, 8, 1),
        "float8_e4m3fn" => DLDataType::new(C::FLOAT8_E4M3FN, 8, 1),
        "float8_e4m3fnuz" => DLDataType::new(C::FLOAT8_E4M3FNUZ, 8, 1),
        "float8_e5m2" => DLDataType::new(C::FLOAT8_E5M2, 8, 1),
        "float8_e5m2fnuz" => DLDataType::new(C::FLOAT8_E5M2FNUZ, 8, 1),
        "float8_e8m0fnu" => DLDataType::new(C::FLOAT8_E8M0FNU, 8, 1),
        "float4_e2m1fn" => DLDataType::FLOAT4_E2M1FN,
        "float4_e2m1fn_x2" => DLDataType::FLOAT4_E2M1FN_X2,
        "uint8" => dlpack_rs::safe::dtype_u8(),
        other => return Err(PyValueError::new_err(format!("unknown dtype {other}"))),
    })
}

/// A typed FP8 tensor of `values` (converted by the `float8` crate), exported from a
/// `Vec<F8E4M3>` / `Vec<F8E5M2>` through `safe::Export` (the dtype comes from the type).
#[pyfunction]
fn lp_make_f8(dtype: &str, values: Vec<f32>, shape: Option<Vec<i64>>) -> PyResult<DLPackTensor> {
    let shape = shape.unwrap_or_else(|| vec![values.len() as i64]);
    let t = match dtype {
        "float8_e4m3fn" => Export::new(
            values
                .iter()
                .map(|&x| F8E4M3::from_f32(x))
                .collect::<Vec<_>>(),
        )
        .shape(&shape)
        .versioned(),
        "float8_e5m2" => Export::new(
            values
                .iter()
                .map(|&x| F8E5M2::from_f32(x))
                .collect::<Vec<_>>(),
        )
        .shape(&shape)
        .versioned(),
        other => {
            return Err(PyValueError::new_err(format!(
                "lp_make_f8: no Rust type for {other}"
            )))
        }
    };
    Ok(DLPackTensor::new(t?))
}

/// Packed bytes exported as `dtype` (any FP8 or FP4 name) with `shape` (default: as many whole
/// elements as the bytes hold), through `Export::packed` over 64-byte aligned storage.
#[pyfunction]
fn lp_make_packed(dtype: &str, data: &[u8], shape: Option<Vec<i64>>) -> PyResult<DLPackTensor> {
    let buffer = AlignedBuffer::<u8>::from_slice(data)?;
    let export = Export::new(buffer).packed(low_dtype(dtype)?);
    let export = match shape {
        Some(shape) => export.shape(&shape),
        None => export,
    };
    Ok(DLPackTensor::new(export.versioned()?))
}

/// Packs FP4 / FP8 codes (one value per byte of `codes`, in its low bits) the way `dtype`
/// stores them.
#[pyfunction]
fn lp_pack<'py>(py: Python<'py>, dtype: &str, codes: Vec<u8>) -> PyResult<Bound<'py, PyBytes>> {
    let packing = Packing::of(low_dtype(dtype)?)?;
    Ok(PyBytes::new(py, &packing.pack(&codes)))
}

/// What `lp_read` reports: dtype name, shape, packed bytes, values in order.
type PackedSeen<'py> = (String, Vec<i64>, Bound<'py, PyBytes>, Vec<u8>);

/// What a packed view of `obj` sees: (dtype name, shape, packed bytes, values in order).
#[pyfunction]
fn lp_read<'py>(py: Python<'py>, obj: Imported) -> PyResult<PackedSeen<'py>> {
    let view = obj.as_packed()?;
    Ok((
        dtype_name(obj.dtype()),
        obj.shape().to_vec(),
        PyBytes::new(py, view.bytes()),
        view.values().collect(),
    ))
}

/// The values of a typed FP8 tensor (float8_e4m3fn or float8_e5m2), through a typed
/// `as_slice`, as floats.
#[pyfunction]
fn lp_values_f8(obj: Imported, dtype: &str) -> PyResult<Vec<f32>> {
    Ok(match dtype {
        "float8_e4m3fn" => obj
            .as_slice::<F8E4M3>()?
            .iter()
            .map(|x| x.to_f32())
            .collect(),
        "float8_e5m2" => obj
            .as_slice::<F8E5M2>()?
            .iter()
            .map(|x| x.to_f32())
            .collect(),
        other => {
            return Err(PyValueError::new_err(format!(
                "lp_values_f8: no Rust type for {other}"
            )))
        }
    })
}

/// The sum of a float8_e4m3fn tensor, taken as a typed argument (`TensorView<'_, F8E4M3, Dims<ANY>, CContig>`).
#[pyfunction]
fn lp_sum_e4m3fn(x: TensorView<'_, F8E4M3, Dims<ANY>, CContig>) -> f32 {
    x.iter().map(|v| v.to_f32()).sum()
}

/// A round trip through typed Rust memory: copies a contiguous FP8 tensor (float8_e4m3fn or
/// float8_e5m2) into a `Vec` of its Rust type and exports that with the same shape.
#[pyfunction]
fn lp_copy_f8(obj: Imported) -> PyResult<DLPackTensor> {
    let shape = obj.shape().to_vec();
    let t = match dtype_name(obj.dtype()).as_str() {
        "float8_e4m3fn" => Export::new(obj.as_slice::<F8E4M3>()?.to_vec())
            .shape(&shape)
            .versioned()?,
        "float8_e5m2" => Export::new(obj.as_slice::<F8E5M2>()?.to_vec())
            .shape(&shape)
            .versioned()?,
        other => {
            return Err(PyValueError::new_err(format!(
                "lp_copy_f8: no Rust type for {other}"
            )))
        }
    };
    Ok(DLPackTensor::new(t))
}

/// A round trip through Rust bytes: copies the packed bytes of any low-precision tensor and
/// exports them with the same dtype and shape.
#[pyfunction]
fn lp_copy_packed(obj: Imported) -> PyResult<DLPackTensor> {
    let bytes = obj.as_packed()?.bytes().to_vec();
    let t = Export::new(AlignedBuffer::<u8>::from_slice(&bytes)?)
        .packed(obj.dtype())
        .shape(obj.shape())
        .versioned()?;
    Ok(DLPackTensor::new(t))
}

/// The packed bytes of a low-precision tensor, copied (what a consumer that cannot import the
/// dtype itself gets as uint8: jax and float4).
#[pyfunction]
fn lp_copy_bytes<'py>(py: Python<'py>, obj: Imported) -> PyResult<Bound<'py, PyBytes>> {
    Ok(PyBytes::new(py, obj.as_packed()?.bytes()))
}

/// A float8_e4m3fn tensor of `values` returned as a tensor of the framework of type `ty`
/// (for the numpy hint).
#[pyfunction]
fn lp_hand_to(ty: &Bound<'_, PyType>, values: Vec<f32>) -> PyResult<Returned<Framework>> {
    let t = Export::new(
        values
            .iter()
            .map(|&x| F8E4M3::from_f32(x))
            .collect::<Vec<_>>(),
    )
    .versioned()?;
    Ok(Returned::like(ty.py(), &Framework::of_type(ty), t))
}

/// Adds this file's functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(lp_make_f8, m)?)?;
    m.add_function(wrap_pyfunction!(lp_make_packed, m)?)?;
    m.add_function(wrap_pyfunction!(lp_pack, m)?)?;
    m.add_function(wrap_pyfunction!(lp_read, m)?)?;
    m.add_function(wrap_pyfunction!(lp_values_f8, m)?)?;
    m.add_function(wrap_pyfunction!(lp_sum_e4m3fn, m)?)?;
    m.add_function(wrap_pyfunction!(lp_copy_f8, m)?)?;
    m.add_function(wrap_pyfunction!(lp_copy_packed, m)?)?;
    m.add_function(wrap_pyfunction!(lp_copy_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(lp_hand_to, m)?)?;
    Ok(())
}
