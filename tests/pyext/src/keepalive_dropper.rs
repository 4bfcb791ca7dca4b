//! What `tests/python/test_keepalive_dropper.py` needs: exports whose keepalives are dropped
//! inside `py.detach` under a lock, and during finalization.

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

/// A field whose `Drop` asks pyo3 to attach and writes to stderr whether the thread then holds
/// the GIL (the interpreter may be finalizing: nothing is kept, the line is the result).
struct FinalProbe;

impl Drop for FinalProbe {
    fn drop(&mut self) {
        // Under abi3 the line only says that the drop ran.
        let held = match crate::held::gil_held_once_attached() {
            Some(true) => "true",
            Some(false) => "false",
            None => "unknown",
        };
        let line = format!("final-probe dropped, gil held: {held}\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
}

/// A derived export (no `#[pyclass]`: the struct is the keepalive) with a [`FinalProbe`].
#[derive(dlpack_rs::IntoDLPack)]
struct FinalOnDrop {
    #[dlpack(data)]
    data: Vec<f32>,
    _probe: FinalProbe,
}

/// On a daemon thread: makes an export of a [`FinalOnDrop`] (an owner without the import's
/// shutdown leak guard), releases the GIL by a raw `PyEval_SaveThread` inside this pyo3 call (as
/// torch's tensor dealloc does), waits until the interpreter is finalizing
/// (`Py_IsInitialized()` is 0 once the atexit hooks ran), drops the export (its deleter runs
/// here), then parks for good: it never re-attaches a finalizing interpreter.
#[pyfunction]
fn drop_probe_during_finalization_raw() -> PyResult<()> {
    let export = FinalOnDrop {
        data: vec![1.0, 2.0],
        _probe: FinalProbe,
    }
    .into_managed_tensor_versioned()?;
    // SAFETY: this thread is attached (a pyo3 call); it detaches and never touches Python
    // itself again (the deleter chain must decide on its own), nor returns.
    unsafe {
        let _state = pyo3::ffi::PyEval_SaveThread();
        while pyo3::ffi::Py_IsInitialized() != 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(export);
        loop {
            std::thread::park();
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(drop_probe_during_finalization_raw, m)?)?;
    m.add_class::<ExportCache>()?;
    Ok(())
}
