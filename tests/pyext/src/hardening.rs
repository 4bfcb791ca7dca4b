//! Hardening helpers for the suite's malformed-input, soak, thread and shutdown tests: a
//! keepalive whose `Drop` panics, imports whose work (and deleter) runs with the GIL released,
//! and tensors dropped concurrently on threads that never held the GIL.

use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_rs::pyo3_glue::{into_capsule, DLPackTensor, PyTensor};
use dlpack_rs::safe::{self, cpu_device, dtype_u8, ManagedTensor, ManagedTensorVersioned};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// Bombs dropped so far (each one panics in its `Drop`).
static BOMBS_DROPPED: AtomicUsize = AtomicUsize::new(0);

/// A keepalive owning 4 bytes whose `Drop` panics: the deleter must contain the panic.
struct Bomb(Box<[u8; 4]>);

impl Drop for Bomb {
    fn drop(&mut self) {
        BOMBS_DROPPED.fetch_add(1, Ordering::SeqCst);
        panic!("hardening: a keepalive Drop panics on purpose");
    }
}

fn bomb_info(bomb: &mut Bomb) -> safe::TensorInfo {
    safe::TensorInfo::contiguous(
        bomb.0.as_mut_ptr().cast(),
        cpu_device(),
        dtype_u8(),
        vec![4],
    )
}

fn bomb_versioned() -> PyResult<ManagedTensorVersioned> {
    let mut bomb = Bomb(Box::new([1, 2, 3, 4]));
    let info = bomb_info(&mut bomb);
    let raw = safe::try_pack_versioned(bomb, info, 0)?;
    // SAFETY: a fresh export of ours, owned here alone.
    Ok(unsafe { ManagedTensorVersioned::from_raw(raw) }?)
}

fn bomb_legacy() -> PyResult<ManagedTensor> {
    let mut bomb = Bomb(Box::new([1, 2, 3, 4]));
    let info = bomb_info(&mut bomb);
    let raw = safe::try_pack(bomb, info)?;
    // SAFETY: a fresh export of ours, owned here alone.
    Ok(unsafe { ManagedTensor::from_raw(raw) }?)
}

/// A `dlpack_rs.Tensor` (4 uint8) whose keepalive panics when the consumer's deleter drops it.
#[pyfunction]
fn panicking_tensor() -> PyResult<DLPackTensor> {
    Ok(DLPackTensor::new(bomb_versioned()?))
}

/// A raw capsule (4 uint8) whose keepalive panics when it is dropped: by a consumer's
/// deleter call, or by the capsule's destructor if nobody consumes it.
#[pyfunction]
fn panicking_capsule(py: Python<'_>, versioned: bool) -> PyResult<Bound<'_, PyCapsule>> {
    if versioned {
        into_capsule(py, bomb_versioned()?)
    } else {
        into_capsule(py, bomb_legacy()?)
    }
}

/// How many panicking keepalives were dropped.
#[pyfunction]
fn bombs_dropped() -> usize {
    BOMBS_DROPPED.load(Ordering::SeqCst)
}

/// Imports `obj` with the GIL, then releases the GIL to sum its bytes (read through the
/// validated shape and strides) and to drop it: the producer's deleter runs on this thread
/// without the GIL.
#[pyfunction]
fn checksum_detached(py: Python<'_>, obj: PyTensor) -> PyResult<u64> {
    py.detach(move || {
        let sum = crate::gather(&obj).map(|bytes| bytes.iter().map(|&b| b as u64).sum());
        drop(obj);
        sum
    })
}

/// Builds a `dlpack_rs.Tensor` of `n` f64 (0, 1, 2, ...), allocating and filling the buffer
/// with the GIL released.
#[pyfunction]
fn export_detached(py: Python<'_>, n: usize) -> PyResult<DLPackTensor> {
    let export = py.detach(move || {
        let v: Vec<f64> = (0..n).map(|i| i as f64).collect();
        safe::Export::new(v).versioned()
    })?;
    Ok(DLPackTensor::new(export))
}

/// Imports every object of `objs`, then drops them spread over `threads` new threads that
/// never held the GIL, all at once, while this thread waits with the GIL released.
#[pyfunction]
fn drop_on_threads(py: Python<'_>, objs: Vec<PyTensor>, threads: usize) -> PyResult<()> {
    let threads = threads.max(1);
    let mut buckets: Vec<Vec<PyTensor>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, t) in objs.into_iter().enumerate() {
        buckets[i % threads].push(t);
    }
    py.detach(move || {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(buckets.len()));
        let handles: Vec<_> = buckets
            .into_iter()
            .map(|bucket| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    drop(bucket);
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join())
            .map_err(|_| PyRuntimeError::new_err("a dropping thread panicked"))
    })
}

/// Imports `obj` and drops it on a new thread that is never joined (it may still be running,
/// waiting for the GIL, when the interpreter shuts down).
#[pyfunction]
fn drop_on_detached_thread(obj: PyTensor) {
    std::thread::spawn(move || drop(obj));
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(panicking_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(panicking_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(bombs_dropped, m)?)?;
    m.add_function(wrap_pyfunction!(checksum_detached, m)?)?;
    m.add_function(wrap_pyfunction!(export_detached, m)?)?;
    m.add_function(wrap_pyfunction!(drop_on_threads, m)?)?;
    m.add_function(wrap_pyfunction!(drop_on_detached_thread, m)?)?;
    Ok(())
}
