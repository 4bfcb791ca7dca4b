//! rust-numpy and dlpack-rs in one extension (`tests/python/test_rust_numpy.py`): a numpy array
//! viewed mutably by one crate is never viewed by the other meanwhile, in either argument order.

use dlpack_rs::pyo3_glue::{CContig, Dims, PyTensor, TensorView, TensorViewMut, ANY};
use numpy::{PyReadonlyArray1, PyReadwriteArray1};
use pyo3::prelude::*;

/// rust-numpy's mutable view first, then ours: adds 1 through each.
#[pyfunction]
fn np_rw_then_tensor_mut(
    mut a: PyReadwriteArray1<f32>,
    mut b: TensorViewMut<'_, f32, Dims<1>, CContig>,
) -> PyResult<()> {
    a.as_slice_mut()?[0] += 1.0;
    b[0] += 1.0;
    Ok(())
}

/// Ours first, then rust-numpy's.
#[pyfunction]
fn tensor_mut_then_np_rw(
    mut b: TensorViewMut<'_, f32, Dims<1>, CContig>,
    mut a: PyReadwriteArray1<f32>,
) -> PyResult<()> {
    b[0] += 1.0;
    a.as_slice_mut()?[0] += 1.0;
    Ok(())
}

/// Two shared views, one of each crate: their sum of the first elements.
#[pyfunction]
fn np_ro_and_tensor_ref(
    a: PyReadonlyArray1<f32>,
    b: TensorView<'_, f32, Dims<1>, CContig>,
) -> PyResult<f32> {
    Ok(a.as_slice()?[0] + b[0])
}

/// rust-numpy's `PyReadwriteArray::resize` (which gives its borrow back and takes it again
/// around numpy's resize) of a new array of 64 elements no Python code references (numpy
/// refuses to resize one that is), then the new length.
#[pyfunction]
fn np_rw_resize(py: Python<'_>, n: usize) -> PyResult<usize> {
    use numpy::{PyArray1, PyArrayMethods};
    let a = PyArray1::<f32>::zeros(py, 64, false).readwrite();
    Ok(a.resize(n)?.as_array().len())
}

/// A shared view of rust-numpy, then an `as_mut_slice` of an untyped import.
#[pyfunction]
fn np_ro_then_as_mut_slice(a: PyReadonlyArray1<f32>, mut t: PyTensor) -> PyResult<f32> {
    let first = a.as_slice()?[0];
    let mut w = t.as_mut_slice::<f32>()?;
    w[0] += 1.0;
    Ok(first)
}

/// Our mutable view of `x` held while rust-numpy is asked for a shared view of `y`.
#[pyfunction]
fn tensor_mut_then_np_ro(
    mut b: TensorViewMut<'_, f32, Dims<1>, CContig>,
    a: PyReadonlyArray1<f32>,
) -> PyResult<f32> {
    b[0] += 1.0;
    Ok(a.as_slice()?[0])
}

/// A shared view of `x`'s import, then `cb()` (Python code, which may change `x`'s shape and
/// strides in place), then a shared view of `w`'s import; the first view dropped, whether
/// rust-numpy grants a mutable view of `z` while the second view still lives (`True`: when `z`
/// overlaps `w`, two crates alias its memory).
#[pyfunction]
fn release_after_change_then_np_rw(
    x: PyTensor,
    w: PyTensor,
    z: Bound<'_, PyAny>,
    cb: Bound<'_, PyAny>,
) -> PyResult<bool> {
    use numpy::{PyArray1, PyArrayMethods};
    let vx = x.as_slice::<f32>()?;
    cb.call0()?;
    let vw = w.as_slice::<f32>()?;
    drop(vx);
    let granted = z.cast::<PyArray1<f32>>()?.try_readwrite().is_ok();
    drop(vw);
    Ok(granted)
}

/// rust-numpy's mutable view first, then a mutable `as_mut_slice` of an untyped import (any
/// number of dimensions, 0 included).
#[pyfunction]
fn np_rw_then_as_mut_slice(mut a: PyReadwriteArray1<f32>, mut t: PyTensor) -> PyResult<()> {
    a.as_slice_mut()?[0] += 1.0;
    let mut w = t.as_mut_slice::<f32>()?;
    w[0] += 1.0;
    Ok(())
}

/// A shared view of `t` taken and dropped on a scoped thread, which this thread joins with the
/// GIL released (SAFETY.md's rule: the view attaches to take rust-numpy's borrow, so a joiner
/// holding the GIL would wait for good): the first element.
#[pyfunction]
fn view_on_joined_thread(py: Python<'_>, t: PyTensor) -> PyResult<f32> {
    let first = py.detach(|| {
        std::thread::scope(|s| {
            s.spawn(|| t.as_slice::<f32>().map(|v| v[0]))
                .join()
                .expect("no panic")
        })
    })?;
    Ok(first)
}

/// As [`release_after_change_then_np_rw`], with typed arguments (numpy arrays are viewed through
/// their own struct, not imported): a shared typed argument of `x`, then `cb()`, then one of
/// `w`; the first dropped, whether rust-numpy grants a mutable view of `z` while the second lives.
#[pyfunction]
fn typed_release_after_change_then_np_rw(
    x: &Bound<'_, PyAny>,
    w: &Bound<'_, PyAny>,
    z: &Bound<'_, PyAny>,
    cb: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    use numpy::{PyArray1, PyArrayMethods};
    let vx: TensorView<'_, f32> = x.extract()?;
    cb.call0()?;
    let vw: TensorView<'_, f32> = w.extract()?;
    drop(vx);
    let granted = z.cast::<PyArray1<f32>>()?.try_readwrite().is_ok();
    drop(vw);
    Ok(granted)
}

/// Adds these functions to the module.
/// A shared typed argument, then a rust-numpy writable borrow of (maybe) the same memory: how
/// much the typed argument's first element changed under it (0 when refused first).
#[pyfunction]
fn tensor_ref_then_np_rw(
    b: TensorView<'_, f32, Dims<1>, CContig>,
    mut a: PyReadwriteArray1<f32>,
) -> PyResult<f32> {
    let before = b[0];
    a.as_slice_mut()?[0] += 100.0;
    Ok(b[0] - before)
}

/// An import through `__dlpack__` (never the exchange table) written through `as_mut_slice`,
/// then a rust-numpy writable borrow.
#[pyfunction]
fn dunder_mut_then_np_rw(obj: &Bound<'_, PyAny>, mut a: PyReadwriteArray1<f32>) -> PyResult<()> {
    let mut t = dlpack_rs::pyo3_glue::ImportOptions::new()
        .exchange_api(false)
        .import(obj)?;
    let mut view = t.as_mut_slice::<f32>()?;
    view[0] += 1.0;
    a.as_slice_mut()?[0] += 1.0;
    Ok(())
}

/// rust-numpy's writable view of an array of any rank, then our exclusive typed argument.
#[pyfunction]
fn np_rw_dyn_then_tensor_mut(
    mut a: numpy::PyReadwriteArrayDyn<'_, f32>,
    mut b: TensorViewMut<'_, f32, Dims<ANY>, CContig>,
) -> PyResult<()> {
    a.as_array_mut().iter_mut().for_each(|v| *v += 1.0);
    b.iter_mut().for_each(|v| *v += 1.0);
    Ok(())
}

/// Our exclusive typed argument, then rust-numpy's shared view of an array of any rank.
#[pyfunction]
fn tensor_mut_then_np_ro_dyn(
    mut b: TensorViewMut<'_, f32, Dims<ANY>, CContig>,
    a: numpy::PyReadonlyArrayDyn<'_, f32>,
) -> PyResult<f32> {
    b.iter_mut().for_each(|v| *v += 1.0);
    Ok(a.as_array().iter().sum())
}

/// Our shared typed argument, then rust-numpy's writable view of an array of any rank.
#[pyfunction]
fn tensor_ref_then_np_rw_dyn(
    b: TensorView<'_, f32, Dims<ANY>, CContig>,
    mut a: numpy::PyReadwriteArrayDyn<'_, f32>,
) -> PyResult<f32> {
    a.as_array_mut().iter_mut().for_each(|v| *v += 1.0);
    Ok(b.iter().sum())
}

/// rust-numpy's mutable int32 view, then our mutable uint8 view: writes 0 through the first,
/// then 0xff through the second, and returns the first's element 0 (0 unless they alias).
#[pyfunction]
fn np_rw_i32_then_tvm_u8(
    mut a: PyReadwriteArray1<i32>,
    mut b: TensorViewMut<'_, u8, Dims<1>>,
) -> PyResult<i32> {
    a.as_array_mut()[0] = 0;
    b.view_mut()[0] = 0xff;
    Ok(a.as_array()[0])
}

/// Ours first, then rust-numpy's (as [`np_rw_i32_then_tvm_u8`]).
#[pyfunction]
fn tvm_u8_then_np_rw_i32(
    mut b: TensorViewMut<'_, u8, Dims<1>>,
    mut a: PyReadwriteArray1<i32>,
) -> PyResult<i32> {
    a.as_array_mut()[0] = 0;
    b.view_mut()[0] = 0xff;
    Ok(a.as_array()[0])
}

/// Two rust-numpy mutable views (int32 and uint8), as [`np_rw_i32_then_tvm_u8`].
#[pyfunction]
fn np_rw_i32_then_np_rw_u8(
    mut a: PyReadwriteArray1<i32>,
    mut b: PyReadwriteArray1<u8>,
) -> PyResult<i32> {
    a.as_array_mut()[0] = 0;
    b.as_array_mut()[0] = 0xff;
    Ok(a.as_array()[0])
}

/// rust-numpy's mutable view of an object array, then its shared view of another (or the
/// same) one: the length of the second.
#[pyfunction]
fn np_rw_object_then_np_ro_object(
    _a: numpy::PyReadwriteArrayDyn<'_, Py<PyAny>>,
    b: numpy::PyReadonlyArrayDyn<'_, Py<PyAny>>,
) -> usize {
    numpy::PyUntypedArrayMethods::len(&*b)
}

/// rust-numpy's mutable views of a datetime64[s] array and of a uint8 one (whose bytes may lie
/// inside the first's elements): 0.
#[pyfunction]
fn np_rw_seconds_then_np_rw_u8(
    _a: PyReadwriteArray1<numpy::datetime::Datetime<numpy::datetime::units::Seconds>>,
    _b: PyReadwriteArray1<u8>,
) -> usize {
    0
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(np_rw_seconds_then_np_rw_u8, m)?)?;
    m.add_function(wrap_pyfunction!(np_rw_object_then_np_ro_object, m)?)?;
    m.add_function(wrap_pyfunction!(np_rw_i32_then_tvm_u8, m)?)?;
    m.add_function(wrap_pyfunction!(tvm_u8_then_np_rw_i32, m)?)?;
    m.add_function(wrap_pyfunction!(np_rw_i32_then_np_rw_u8, m)?)?;
    m.add_function(wrap_pyfunction!(np_rw_dyn_then_tensor_mut, m)?)?;
    m.add_function(wrap_pyfunction!(tensor_mut_then_np_ro_dyn, m)?)?;
    m.add_function(wrap_pyfunction!(tensor_ref_then_np_rw_dyn, m)?)?;
    m.add_function(wrap_pyfunction!(dunder_mut_then_np_rw, m)?)?;
    m.add_function(wrap_pyfunction!(tensor_ref_then_np_rw, m)?)?;
    m.add_function(wrap_pyfunction!(np_rw_then_tensor_mut, m)?)?;
    m.add_function(wrap_pyfunction!(tensor_mut_then_np_rw, m)?)?;
    m.add_function(wrap_pyfunction!(np_ro_and_tensor_ref, m)?)?;
    m.add_function(wrap_pyfunction!(np_ro_then_as_mut_slice, m)?)?;
    m.add_function(wrap_pyfunction!(tensor_mut_then_np_ro, m)?)?;
    m.add_function(wrap_pyfunction!(release_after_change_then_np_rw, m)?)?;
    m.add_function(wrap_pyfunction!(typed_release_after_change_then_np_rw, m)?)?;
    m.add_function(wrap_pyfunction!(np_rw_then_as_mut_slice, m)?)?;
    m.add_function(wrap_pyfunction!(view_on_joined_thread, m)?)?;
    m.add_function(wrap_pyfunction!(np_rw_resize, m)?)?;
    Ok(())
}
