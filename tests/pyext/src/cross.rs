//! What two extension modules (two copies of dlpack-rs) do to each other's memory: this file is
//! compiled into the test extension and into `dlpack_twin` (tests/pytwin), so that each scenario
//! of `tests/python/test_two_modules.py` runs in both orders.

use dlpack_rs::pyo3_glue::{
    CContig, DLPackTensor, Dims, ImportOptions, TensorView, TensorViewMut, ANY,
};
use dlpack_rs::safe::{Export, SharedMut};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;

fn buffer_error(e: dlpack_rs::safe::Error) -> PyErr {
    PyBufferError::new_err(e.to_string())
}

/// A `dlpack_rs.Tensor` over four bytes of a `SharedMut`, made in Rust without touching the
/// registry first, and the `SharedMut` itself.
fn shared_tensor(py: Python<'_>) -> PyResult<(SharedMut<u8>, Bound<'_, DLPackTensor>)> {
    let shared = SharedMut::from_slice(&[1u8, 2, 3, 4]).map_err(buffer_error)?;
    let tensor = DLPackTensor::from_export(Export::new(shared.clone())).map_err(buffer_error)?;
    Ok((shared, Bound::new(py, tensor)?))
}

/// Hands `callback` a new `dlpack_rs.Tensor` over shared-mutable bytes while this module writes
/// them (a live `SharedMut::write` guard, taken before the tensor reached Python); writes
/// `0xff` to the first byte meanwhile. Returns the callback's answer.
#[pyfunction]
fn lend_while_writing(py: Python<'_>, callback: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let (shared, tensor) = shared_tensor(py)?;
    let mut guard = shared.write().map_err(buffer_error)?;
    let result = callback.call1((&tensor,))?.unbind();
    guard[0] = 0xff;
    Ok(result)
}

/// As [`lend_while_writing`], holding a read guard (so a mutable view elsewhere must be refused);
/// checks that the bytes did not change under it.
#[pyfunction]
fn lend_while_reading(py: Python<'_>, callback: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let (shared, tensor) = shared_tensor(py)?;
    let guard = shared.read().map_err(buffer_error)?;
    let result = callback.call1((&tensor,))?.unbind();
    if *guard != [1, 2, 3, 4] {
        return Err(PyBufferError::new_err("bytes changed under a read guard"));
    }
    Ok(result)
}

/// A shared typed argument (the lending route for a table that lends): the sum of its bytes.
#[pyfunction]
fn sum_view(t: TensorView<'_, u8>) -> u64 {
    t.view().iter().map(|&b| u64::from(b)).sum()
}

/// A mutable typed argument (the owned route through the producer's table): adds one to each
/// byte, returns how many.
#[pyfunction]
fn add_one_mut(mut t: TensorViewMut<'_, u8, Dims<ANY>, CContig>) -> usize {
    t.iter_mut().for_each(|b| *b = b.wrapping_add(1));
    t.len()
}

/// Holds a shared view of `t` (any producer's bytes) while `callback()` runs: its result.
#[pyfunction]
fn view_while(t: TensorView<'_, u8>, callback: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let first = t.view().first().copied();
    let result = callback.call0()?.unbind();
    if t.view().first().copied() != first {
        return Err(PyBufferError::new_err("bytes changed under a shared view"));
    }
    Ok(result)
}

/// An import through `__dlpack__` (no exchange table), holding a shared view: the sum.
#[pyfunction]
fn sum_via_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    let t = ImportOptions::new().exchange_api(false).import(obj)?;
    let view = t.as_slice::<u8>()?;
    Ok(view.iter().map(|&b| u64::from(b)).sum())
}

/// Adds this file's functions to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(lend_while_writing, m)?)?;
    m.add_function(wrap_pyfunction!(lend_while_reading, m)?)?;
    m.add_function(wrap_pyfunction!(sum_view, m)?)?;
    m.add_function(wrap_pyfunction!(add_one_mut, m)?)?;
    m.add_function(wrap_pyfunction!(sum_via_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(view_while, m)?)?;
    Ok(())
}
