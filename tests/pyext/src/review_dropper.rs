//! Reproducers from the review of the export deleters' keepalive dropper (an export's keepalive
//! that is not a `PyKeepalive` is dropped attached for real on a Python thread whose GIL is
//! released). See `tests/python/test_review_dropper.py`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use dlpack_rs::safe::ManagedTensorVersioned;
use dlpack_rs::IntoDLPack;
use pyo3::prelude::*;

/// A derived export of plain Rust data: nothing in its `Drop` touches Python.
#[derive(dlpack_rs::IntoDLPack)]
struct PlainRust {
    #[dlpack(data)]
    data: Vec<f32>,
}

/// Exports cached by Rust behind a `Mutex` (a frozen class with interior locking, as pyo3
/// suggests for free-threaded builds).
#[pyclass(frozen)]
struct ExportCache {
    exports: Mutex<Vec<ManagedTensorVersioned>>,
    locked: AtomicBool,
}

#[pymethods]
impl ExportCache {
    #[new]
    fn new() -> Self {
        ExportCache {
            exports: Mutex::new(Vec::new()),
            locked: AtomicBool::new(false),
        }
    }

    /// Adds `n` exports of [`PlainRust`] values (each export's keepalive is the value itself).
    fn fill(&self, n: usize) -> PyResult<()> {
        let mut exports = self.exports.lock().unwrap();
        for i in 0..n {
            let value = PlainRust {
                data: vec![i as f32; 4],
            };
            exports.push(value.into_managed_tensor_versioned()?);
        }
        Ok(())
    }

    /// Clears the cache with the GIL released (pyo3's `detach`): takes the lock, says so, holds
    /// it for `hold_s` seconds, then drops the exports (their deleters run on this thread).
    fn clear_detached(&self, py: Python<'_>, hold_s: f64) {
        py.detach(|| {
            let mut exports = self.exports.lock().unwrap();
            self.locked.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_secs_f64(hold_s));
            exports.clear();
        })
    }

    /// Whether `clear_detached` holds the lock now.
    fn is_locked(&self) -> bool {
        self.locked.load(Ordering::SeqCst)
    }

    /// The number of cached exports, read under the lock while attached (as `Held` does).
    fn __len__(&self) -> usize {
        self.exports.lock().unwrap().len()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ExportCache>()?;
    Ok(())
}
