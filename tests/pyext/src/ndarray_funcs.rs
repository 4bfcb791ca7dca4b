//! The optional integrations in the interop suite (dlpack-rs features `ndarray`, `half`,
//! `num-complex`): imported tensors as ndarray views (read and written in place, any strides),
//! `Array`/`ArcArray` exported without a copy, typed `f16`/`bf16`/`Complex32`/`Complex64`
//! views and exports, and derived classes over those element types and over an `Array` field.

use crate::dtype_name;
use crate::Imported;
use dlpack_rs::pyo3_glue::{DLPackTensor, PyTensor};
use dlpack_rs::safe::{Element, Export};
use dlpack_rs::IntoDLPack;
use half::{bf16, f16};
use ndarray::{s, ArcArray, Array, Array1, Array2, Array3, ShapeBuilder};
use num_complex::{Complex32, Complex64};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// What an ndarray view of `obj` sees: (shape, strides in elements, values in logical
/// order as floats). Reads float32, float64 and int32.
#[pyfunction]
fn nd_view(obj: Imported) -> PyResult<(Vec<usize>, Vec<isize>, Vec<f64>)> {
    fn seen<T: Element + Into<f64>>(t: &PyTensor) -> PyResult<(Vec<usize>, Vec<isize>, Vec<f64>)> {
        let a = t.as_array::<T>()?;
        Ok((
            a.shape().to_vec(),
            a.strides().to_vec(),
            a.iter().map(|&x| x.into()).collect(),
        ))
    }
    match dtype_name(obj.dtype()).as_str() {
        "float32" => seen::<f32>(&obj),
        "float64" => seen::<f64>(&obj),
        "int32" => seen::<i32>(&obj),
        other => Err(PyValueError::new_err(format!(
            "nd_view: unsupported dtype {other}"
        ))),
    }
}

/// Multiplies every element of `obj` by `factor` in place, through `as_array_mut` (float32
/// and float64; any layout without overlapping elements).
#[pyfunction]
fn nd_scale(mut obj: Imported, factor: f64) -> PyResult<()> {
    match dtype_name(obj.dtype()).as_str() {
        "float32" => obj
            .as_array_mut::<f32>()?
            .mapv_inplace(|x| x * factor as f32),
        "float64" => obj.as_array_mut::<f64>()?.mapv_inplace(|x| x * factor),
        other => {
            return Err(PyValueError::new_err(format!(
                "nd_scale: unsupported dtype {other}"
            )))
        }
    }
    Ok(())
}

/// A round trip: views `obj` (float64, any layout) with ndarray, computes `2 * x + 1` into a
/// new `Array`, and exports that array without a copy.
#[pyfunction]
fn nd_affine(obj: Imported) -> PyResult<DLPackTensor> {
    let out = obj.as_array::<f64>()?.mapv(|x| 2.0 * x + 1.0);
    Ok(DLPackTensor::new(out.into_managed_tensor_versioned()?))
}

/// An `Array` or `ArcArray` of float64 `0, 1, 2, ...` exported as is, in one of these layouts:
/// `c` (2x3x4 row-major), `f` (3x4 column-major), `neg` (arange(12) as 3x4, then
/// `[::-1, ::-2]`), `transposed` (4x3 view of a 3x4 array), `shared` (an `ArcArray` with
/// another owner: read-only), `unique` (an `ArcArray` with no other owner: writable).
/// Returns the tensor and the address of the array's first element.
#[pyfunction]
fn nd_export(layout: &str) -> PyResult<(DLPackTensor, usize)> {
    fn iota(n: usize) -> Vec<f64> {
        (0..n).map(|i| i as f64).collect()
    }
    fn out<A: IntoDLPack + Send + 'static>(
        a: A,
        first: *const f64,
    ) -> PyResult<(DLPackTensor, usize)> {
        Ok((
            DLPackTensor::new(a.into_managed_tensor_versioned()?),
            first as usize,
        ))
    }
    let shaped = |r, c| Array2::from_shape_vec((r, c), iota(r * c)).expect("shape fits");
    match layout {
        "c" => {
            let a = Array3::from_shape_vec((2, 3, 4), iota(24)).expect("shape fits");
            let p = a.as_ptr();
            out(a, p)
        }
        "f" => {
            let a = Array2::from_shape_vec((3, 4).f(), iota(12)).expect("shape fits");
            let p = a.as_ptr();
            out(a, p)
        }
        "neg" => {
            let a = shaped(3, 4).slice_move(s![..;-1, ..;-2]);
            let p = a.as_ptr();
            out(a, p)
        }
        "transposed" => {
            let a = shaped(3, 4).reversed_axes();
            let p = a.as_ptr();
            out(a, p)
        }
        "shared" => {
            let a: ArcArray<f64, _> = shaped(2, 3).into_shared();
            let p = a.as_ptr();
            // A second owner that outlives the export: the data must not be written.
            std::mem::forget(a.clone());
            out(a, p)
        }
        "unique" => {
            let a: ArcArray<f64, _> = shaped(2, 3).into_shared();
            let p = a.as_ptr();
            out(a, p)
        }
        other => Err(PyValueError::new_err(format!(
            "nd_export: unknown layout {other}"
        ))),
    }
}

/// Sample values: element `i` of a float type is `i * 0.25 - 1.5`; of a complex type
/// `i + (2i - 1)j`.
fn sample<T>(n: usize, f: impl Fn(f64) -> T) -> Vec<T> {
    (0..n).map(|i| f(i as f64)).collect()
}

/// A 1-D tensor of `n` typed `f16` / `bf16` / `Complex32` / `Complex64` values (named by
/// the numpy/torch dtype), exported from a `Vec` through `safe::Export` (no dtype given: it
/// comes from the element type).
#[pyfunction]
fn hc_make(dtype: &str, n: usize) -> PyResult<DLPackTensor> {
    let t = match dtype {
        "float16" => Export::new(sample(n, |x| f16::from_f64(x * 0.25 - 1.5))).versioned(),
        "bfloat16" => Export::new(sample(n, |x| bf16::from_f64(x * 0.25 - 1.5))).versioned(),
        "complex64" => Export::new(sample(n, |x| {
            Complex32::new(x as f32, (2.0 * x - 1.0) as f32)
        }))
        .versioned(),
        "complex128" => Export::new(sample(n, |x| Complex64::new(x, 2.0 * x - 1.0))).versioned(),
        other => {
            return Err(PyValueError::new_err(format!(
                "hc_make: unsupported dtype {other}"
            )))
        }
    };
    Ok(DLPackTensor::new(t?))
}

/// Doubles every element of a contiguous `f16`/`bf16`/`complex64`/`complex128` tensor in
/// place through a typed `as_mut_slice`; returns the dtype name it used.
#[pyfunction]
fn hc_double(mut obj: Imported) -> PyResult<String> {
    let name = dtype_name(obj.dtype());
    match name.as_str() {
        "float16" => obj
            .as_mut_slice::<f16>()?
            .iter_mut()
            .for_each(|x| *x = *x + *x),
        "bfloat16" => obj
            .as_mut_slice::<bf16>()?
            .iter_mut()
            .for_each(|x| *x = *x + *x),
        "complex64" => obj
            .as_mut_slice::<Complex32>()?
            .iter_mut()
            .for_each(|x| *x = *x + *x),
        "complex128" => obj
            .as_mut_slice::<Complex64>()?
            .iter_mut()
            .for_each(|x| *x = *x + *x),
        other => {
            return Err(PyValueError::new_err(format!(
                "hc_double: unsupported dtype {other}"
            )))
        }
    }
    Ok(name)
}

/// The values of a `f16`/`bf16`/`complex64`/`complex128` tensor of any layout, read through a
/// typed ndarray view, as (real, imaginary) pairs in logical order.
#[pyfunction]
fn hc_values(obj: Imported) -> PyResult<Vec<(f64, f64)>> {
    let name = dtype_name(obj.dtype());
    Ok(match name.as_str() {
        "float16" => obj
            .as_array::<f16>()?
            .iter()
            .map(|x| (x.to_f64(), 0.0))
            .collect(),
        "bfloat16" => obj
            .as_array::<bf16>()?
            .iter()
            .map(|x| (x.to_f64(), 0.0))
            .collect(),
        "complex64" => obj
            .as_array::<Complex32>()?
            .iter()
            .map(|x| (x.re as f64, x.im as f64))
            .collect(),
        "complex128" => obj
            .as_array::<Complex64>()?
            .iter()
            .map(|x| (x.re, x.im))
            .collect(),
        other => {
            return Err(PyValueError::new_err(format!(
                "hc_values: unsupported dtype {other}"
            )))
        }
    })
}

/// A round trip through typed memory: copies a contiguous `bf16` tensor into a `Vec<bf16>`
/// and exports that with the same shape.
#[pyfunction]
fn hc_bf16_copy(obj: Imported) -> PyResult<DLPackTensor> {
    let data = obj.as_slice::<bf16>()?.to_vec();
    Ok(DLPackTensor::new(
        Export::new(data).shape(obj.shape()).versioned()?,
    ))
}

/// A derived class over `Complex64` samples, shape `rows x cols`.
#[pyclass(frozen)]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct ComplexSignal {
    #[dlpack(data)]
    data: Vec<Complex64>,
    #[dlpack(shape)]
    shape: [usize; 2],
}

/// A derived class over `bf16` samples (`i * 0.25 - 1.5`), one dimension.
#[pyclass(frozen)]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct Bf16Vector {
    #[dlpack(data)]
    data: Vec<bf16>,
}

/// A derived class over a `Complex32` tensor.
#[pyclass(frozen)]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct Complex32Vector(#[dlpack(data)] Vec<Complex32>);

/// A derived class whose data field is an ndarray `Array1<f32>` (a buffer: 1-D over its span).
#[pyclass(frozen)]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct NdVector {
    #[dlpack(data)]
    data: Array1<f32>,
}

/// A derived value of one of the classes above: `complex128` (2x3), `bfloat16` (`n`),
/// `complex64` (`n`), `ndarray` (`n` float32 values `0, 1, ...` reversed: exported 1-D over
/// the array's memory, i.e. in memory order).
#[pyfunction]
fn hc_derived(py: Python<'_>, kind: &str, n: usize) -> PyResult<Py<PyAny>> {
    Ok(match kind {
        "complex128" => Py::new(
            py,
            ComplexSignal {
                data: sample(6, |x| Complex64::new(x, 2.0 * x - 1.0)),
                shape: [2, 3],
            },
        )?
        .into_any(),
        "bfloat16" => Py::new(
            py,
            Bf16Vector {
                data: sample(n, |x| bf16::from_f64(x * 0.25 - 1.5)),
            },
        )?
        .into_any(),
        "complex64" => Py::new(
            py,
            Complex32Vector(sample(n, |x| {
                Complex32::new(x as f32, (2.0 * x - 1.0) as f32)
            })),
        )?
        .into_any(),
        "ndarray" => {
            let data = Array::from_iter((0..n).map(|i| i as f32)).slice_move(s![..;-1]);
            Py::new(py, NdVector { data })?.into_any()
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "hc_derived: unknown kind {other}"
            )))
        }
    })
}

/// Adds this file's functions and classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(nd_view, m)?)?;
    m.add_function(wrap_pyfunction!(nd_scale, m)?)?;
    m.add_function(wrap_pyfunction!(nd_affine, m)?)?;
    m.add_function(wrap_pyfunction!(nd_export, m)?)?;
    m.add_function(wrap_pyfunction!(hc_make, m)?)?;
    m.add_function(wrap_pyfunction!(hc_double, m)?)?;
    m.add_function(wrap_pyfunction!(hc_values, m)?)?;
    m.add_function(wrap_pyfunction!(hc_bf16_copy, m)?)?;
    m.add_function(wrap_pyfunction!(hc_derived, m)?)?;
    m.add_class::<ComplexSignal>()?;
    m.add_class::<Bf16Vector>()?;
    m.add_class::<Complex32Vector>()?;
    m.add_class::<NdVector>()?;
    Ok(())
}
