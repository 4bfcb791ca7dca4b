//! Typed arguments with every kind of constraint (issue 26): any-layout views (`TensorView`,
//! `TensorViewMut`), fixed shapes, C / F layouts, dtype sets (`AnyOf`, `AnyOfMut`) and results
//! handed back as the caller's framework (`Framework`).

use dlpack_rs::ndarray::{Array2, Axis};
use dlpack_rs::pyo3_glue::{
    AnyDevice, AnyOf, AnyOfMut, CContig, Dims, FContig, Framework, Jax, Numpy, Returned, Strided,
    TensorView, TensorViewMut, Torch, ANY,
};
use pyo3::prelude::*;

/// The values of a float64 tensor of any layout and shape in logical (row-major) order, with
/// the shape and strides (in elements) the view sees.
#[pyfunction]
fn tv_values(x: TensorView<'_, f64>) -> (Vec<usize>, Vec<isize>, Vec<f64>) {
    let v = x.view();
    (
        v.shape().to_vec(),
        v.strides().to_vec(),
        v.iter().copied().collect(),
    )
}

/// The sum of a 2-d float32 tensor of any layout (`Ix2`: any extents).
#[pyfunction]
fn tv_sum2(x: TensorView<'_, f32, Dims<2>>) -> f64 {
    x.view().iter().map(|&v| v as f64).sum()
}

/// The per-pixel mean of an RGB float32 image (`(*, *, 3)`, any layout), as a new array of
/// the caller's framework.
#[pyfunction]
fn tv_gray(
    py: Python<'_>,
    image: TensorView<'_, f32, Dims<3, ANY, ANY, 3>>,
) -> PyResult<Returned<Framework>> {
    let out: Array2<f32> = image
        .view()
        .map_axis(Axis(2), |px| px.iter().sum::<f32>() / 3.0);
    let tensor = dlpack_rs::IntoDLPack::into_managed_tensor_versioned(out)?;
    Ok(Returned::like(py, image.framework(), tensor))
}

/// The sum of a `(2, *)` int64 tensor.
#[pyfunction]
fn tv_pairs(x: TensorView<'_, i64, Dims<2, 2, ANY>>) -> i64 {
    x.view().iter().sum()
}

/// The sum of a C-contiguous float64 tensor (any shape).
#[pyfunction]
fn tv_c_sum(x: TensorView<'_, f64, Dims<ANY>, CContig>) -> f64 {
    x.view().iter().sum()
}

/// The values of an F-contiguous 2-d float64 tensor in memory order (column by column).
#[pyfunction]
fn tv_f_memory(x: TensorView<'_, f64, Dims<2>, FContig>) -> Vec<f64> {
    x.view().t().iter().copied().collect()
}

/// Writes `x[i, j] = 10 * i + j` into a 2-d float32 tensor of any layout, in place.
#[pyfunction]
fn tvm_fill(mut x: TensorViewMut<'_, f32, Dims<2>>) {
    x.view_mut()
        .indexed_iter_mut()
        .for_each(|((i, j), v)| *v = (10 * i + j) as f32);
}

/// `dst += src` for two 1-d float64 tensors of any layout (the borrow of `dst` is exclusive).
/// Two mutable views at once: writes 1 through `a` and 2 through `b`.
#[pyfunction]
fn tvm_pair(mut a: TensorViewMut<'_, f32>, mut b: TensorViewMut<'_, f32>) {
    a.view_mut().fill(1.0);
    b.view_mut().fill(2.0);
}

#[pyfunction]
fn tvm_add_into(
    mut dst: TensorViewMut<'_, f64, Dims<1>>,
    src: TensorView<'_, f64, Dims<1>>,
) -> PyResult<()> {
    if dst.shape() != src.shape() {
        return Err(pyo3::exceptions::PyValueError::new_err("shapes differ"));
    }
    let src = src.view();
    let mut d = dst.view_mut();
    d += &src;
    Ok(())
}

/// Which dtype came and the largest value, for an image of `uint8`, `uint16` or `float32`
/// with three channels.
#[pyfunction]
fn tv_peak(image: AnyOf<'_, (u8, u16, f32), Dims<3, ANY, ANY, 3>>) -> (&'static str, f64) {
    match image {
        AnyOf::A(v) => ("uint8", v.view().iter().copied().max().unwrap_or(0) as f64),
        AnyOf::B(v) => ("uint16", v.view().iter().copied().max().unwrap_or(0) as f64),
        AnyOf::C(v) => (
            "float32",
            v.view().iter().copied().fold(f32::MIN, f32::max) as f64,
        ),
    }
}

/// Which of `int32` / `float64` came.
#[pyfunction]
fn tv_which(x: AnyOf<'_, (i32, f64)>) -> &'static str {
    match x {
        AnyOf::A(_) => "int32",
        AnyOf::B(_) => "float64",
    }
}

/// `x * 2` as a new tensor of the caller's framework (contiguous float64 argument).
#[pyfunction]
fn tr_doubled(py: Python<'_>, x: TensorView<'_, f64>) -> PyResult<Returned<Framework>> {
    let out = x.view().mapv(|v| v * 2.0);
    let tensor = dlpack_rs::IntoDLPack::into_managed_tensor_versioned(out)?;
    Ok(Returned::like(py, x.framework(), tensor))
}

/// `x + 1` (float64, any layout) as the framework the signature names: `to` picks one of the
/// three fixed ones, or the caller's.
#[pyfunction]
fn ret_plus_one<'py>(
    py: Python<'py>,
    x: TensorView<'_, f64>,
    to: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let out = x.view().mapv(|v| v + 1.0);
    Ok(match to {
        "numpy" => Returned::<Numpy>::from_value(out)?.into_pyobject(py)?,
        "torch" => Returned::<Torch>::from_value(out)?.into_pyobject(py)?,
        "jax" => Returned::<Jax>::from_value(out)?.into_pyobject(py)?,
        _ => {
            let tensor = dlpack_rs::IntoDLPack::into_managed_tensor_versioned(out)?;
            Returned::like(py, x.framework(), tensor).into_pyobject(py)?
        }
    })
}

/// Inverts a uint8, uint16 or float32 (0..1) tensor of any layout in place; returns the dtype
/// name it dispatched on.
#[pyfunction]
fn tvm_invert_any(x: AnyOfMut<'_, (u8, u16, f32)>) -> &'static str {
    match x {
        AnyOfMut::A(mut v) => {
            v.view_mut().mapv_inplace(|e| u8::MAX - e);
            "uint8"
        }
        AnyOfMut::B(mut v) => {
            v.view_mut().mapv_inplace(|e| u16::MAX - e);
            "uint16"
        }
        AnyOfMut::C(mut v) => {
            v.view_mut().mapv_inplace(|e| 1.0 - e);
            "float32"
        }
    }
}

/// `x * 3` as a torch tensor, whatever the caller: the framework is the return type.
#[pyfunction]
fn ret_torch_tripled(x: TensorView<'_, f32>) -> PyResult<Returned<Torch>> {
    Ok(Returned::from_value(x.view().mapv(|v| v * 3.0))?)
}

/// `x * 3` in the caller's framework, stated as the return type.
#[pyfunction]
fn ret_same_tripled(py: Python<'_>, x: TensorView<'_, f32>) -> PyResult<Returned<Framework>> {
    let tensor = dlpack_rs::IntoDLPack::into_managed_tensor_versioned(x.view().mapv(|v| v * 3.0))?;
    Ok(Returned::like(py, x.framework(), tensor))
}

/// Writes 1.0 into the first element of a float32 `TensorMut` (the read-only messages).
#[pyfunction]
fn tm_touch(mut x: TensorViewMut<'_, f32, Dims<ANY>, CContig>) {
    if let Some(first) = x.first_mut() {
        *first = 1.0;
    }
}

/// The sum of a float32 `TensorRef` (the contiguous route's layout message).
#[pyfunction]
fn tr_sum(x: TensorView<'_, f32, Dims<ANY>, CContig>) -> f64 {
    x.iter().map(|&v| v as f64).sum()
}

/// The values of an F-contiguous 2-d float32 tensor in memory order (column by column).
#[pyfunction]
fn tv_f_memory32(x: TensorView<'_, f32, Dims<2>, FContig>) -> Vec<f32> {
    x.view().t().iter().copied().collect()
}

/// What a float32 tensor argument on any device says of itself: `(device, shape, strides,
/// dtype, data_ptr)`.
#[pyfunction]
fn dt_info(
    x: TensorView<'_, f32, Dims<ANY>, Strided, AnyDevice>,
) -> ((i32, i32), Vec<i64>, Vec<i64>, String, usize) {
    let device = x.device();
    (
        (device.device_type.0, device.device_id),
        x.shape().to_vec(),
        x.strides().to_vec(),
        crate::dtype_name(x.dtype()),
        x.data_ptr() as usize,
    )
}

/// The device and address of a writable C-contiguous 1-d float32 tensor on any device.
#[pyfunction]
fn dtm_target(mut x: TensorViewMut<'_, f32, Dims<1>, CContig, AnyDevice>) -> ((i32, i32), usize) {
    let device = x.device();
    (
        (device.device_type.0, device.device_id),
        x.data_ptr_mut() as usize,
    )
}

/// The shapes of two float32 tensors on any device, the second writable (`f(x, x)` refused).
#[pyfunction]
fn dt_pair(
    a: TensorView<'_, f32, Dims<ANY>, Strided, AnyDevice>,
    b: TensorViewMut<'_, f32, Dims<ANY>, Strided, AnyDevice>,
) -> (Vec<i64>, Vec<i64>) {
    (a.shape().to_vec(), b.shape().to_vec())
}

/// The references typed arguments hold of their object: `x`'s reference count with a shared
/// C-contiguous, a shared strided and a writable view of it alive, each minus its count with
/// none.
#[pyfunction]
fn tv_refs_held(x: &Bound<'_, PyAny>) -> PyResult<(isize, isize, isize)> {
    // SAFETY: `x` is a live object; reading its count needs nothing more.
    let refs = || unsafe { pyo3::ffi::Py_REFCNT(x.as_ptr()) } as isize;
    let before = refs();
    let c: TensorView<'_, f32, Dims<ANY>, CContig> = x.extract()?;
    let with_c = refs();
    drop(c);
    let s: TensorView<'_, f32, Dims<ANY>, Strided> = x.extract()?;
    let with_s = refs();
    drop(s);
    let m: TensorViewMut<'_, f32, Dims<ANY>, Strided> = x.extract()?;
    let with_m = refs();
    drop(m);
    Ok((with_c - before, with_s - before, with_m - before))
}

/// A writable float32 argument held while `cb()` runs (Python code that may try to resize the
/// array in place), then written: `x[0] = 7`; the address written.
#[pyfunction]
fn tvm_call_then_write(
    mut x: TensorViewMut<'_, f32, Dims<1>, CContig>,
    cb: Bound<'_, PyAny>,
) -> PyResult<usize> {
    cb.call0()?;
    x[0] = 7.0;
    Ok(x.data_ptr() as usize)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tv_values, m)?)?;
    m.add_function(wrap_pyfunction!(tv_sum2, m)?)?;
    m.add_function(wrap_pyfunction!(tv_gray, m)?)?;
    m.add_function(wrap_pyfunction!(tv_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(tv_c_sum, m)?)?;
    m.add_function(wrap_pyfunction!(tv_f_memory, m)?)?;
    m.add_function(wrap_pyfunction!(tvm_fill, m)?)?;
    m.add_function(wrap_pyfunction!(tvm_add_into, m)?)?;
    m.add_function(wrap_pyfunction!(tv_peak, m)?)?;
    m.add_function(wrap_pyfunction!(tv_which, m)?)?;
    m.add_function(wrap_pyfunction!(tr_doubled, m)?)?;
    m.add_function(wrap_pyfunction!(ret_plus_one, m)?)?;
    m.add_function(wrap_pyfunction!(tvm_invert_any, m)?)?;
    m.add_function(wrap_pyfunction!(tvm_pair, m)?)?;
    m.add_function(wrap_pyfunction!(ret_torch_tripled, m)?)?;
    m.add_function(wrap_pyfunction!(ret_same_tripled, m)?)?;
    m.add_function(wrap_pyfunction!(tm_touch, m)?)?;
    m.add_function(wrap_pyfunction!(tr_sum, m)?)?;
    m.add_function(wrap_pyfunction!(tv_f_memory32, m)?)?;
    m.add_function(wrap_pyfunction!(dt_info, m)?)?;
    m.add_function(wrap_pyfunction!(dtm_target, m)?)?;
    m.add_function(wrap_pyfunction!(dt_pair, m)?)?;
    m.add_function(wrap_pyfunction!(tv_refs_held, m)?)?;
    m.add_function(wrap_pyfunction!(tvm_call_then_write, m)?)?;
    Ok(())
}
