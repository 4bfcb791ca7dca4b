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

/// What the last [`ProbeBuffer`] drop saw: 0 none yet, 1 the GIL held once pyo3 let it attach,
/// 2 not held (pyo3 counted the thread attached while foreign code had released the GIL).
static BUFFER_SEEN: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// A user `Buffer` whose `Drop` asks pyo3 to attach (as a `Py` field's drop would): what
/// SAFETY.md ("When deleters run") still says is dropped attached for real, and what the new
/// `Buffer` contract line forbids (so this impl breaks that line on purpose).
struct ProbeBuffer {
    data: Vec<f32>,
}

impl Drop for ProbeBuffer {
    fn drop(&mut self) {
        Python::attach(|_py| {
            #[cfg(not(feature = "abi3"))]
            // SAFETY: reads whether this thread holds the GIL; callable attached or not.
            let seen = if unsafe { pyo3::ffi::PyGILState_Check() } == 1 {
                1
            } else {
                2
            };
            #[cfg(feature = "abi3")]
            let seen = 3;
            BUFFER_SEEN.store(seen, Ordering::SeqCst);
        });
    }
}

// SAFETY: the Vec's heap buffer holds `len` initialised f32s and stays in place when the value
// moves; `Vec::as_ptr` carries write permission; nothing writes through `&self`. It does NOT keep
// the new last line of the contract (its drop calls pyo3's `attach`): that is what it probes.
unsafe impl dlpack_rs::safe::Buffer for ProbeBuffer {
    type Elem = f32;
    const SHARED_PTR_WRITABLE: bool = true;
    fn data_ptr(&self) -> *mut f32 {
        self.data.as_ptr().cast_mut()
    }
    fn num_elements(&self) -> usize {
        self.data.len()
    }
}

/// An `Export` of a [`ProbeBuffer`] handed to torch through its exchange table: torch owns the
/// export's own managed tensor, so torch's tensor dealloc runs its deleter.
#[pyfunction]
fn probe_buffer_to_torch() -> PyResult<dlpack_rs::pyo3_glue::Returned<dlpack_rs::pyo3_glue::Torch>>
{
    let export = dlpack_rs::safe::Export::new(ProbeBuffer {
        data: vec![1.0, 2.0, 3.0],
    });
    Ok(dlpack_rs::pyo3_glue::Returned::new(export.versioned()?))
}

/// What the last [`ProbeBuffer`] drop saw (see [`BUFFER_SEEN`]).
#[pyfunction]
fn probe_buffer_seen() -> u8 {
    BUFFER_SEEN.load(Ordering::SeqCst)
}

/// A field whose `Drop` asks pyo3 to attach and writes to stderr whether the thread then holds
/// the GIL (the interpreter may be finalizing: nothing is kept, the line is the result).
struct FinalProbe;

impl Drop for FinalProbe {
    fn drop(&mut self) {
        Python::attach(|_py| {
            // SAFETY: reads whether this thread holds the GIL; callable attached or not.
            #[cfg(not(feature = "abi3"))]
            let held = if unsafe { pyo3::ffi::PyGILState_Check() } == 1 {
                "true"
            } else {
                "false"
            };
            // abi3 hides `PyGILState_Check`: the line only says that the drop ran.
            #[cfg(feature = "abi3")]
            let held = "unknown";
            let line = format!("final-probe dropped, gil held: {held}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        });
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
    m.add_function(wrap_pyfunction!(probe_buffer_to_torch, m)?)?;
    m.add_function(wrap_pyfunction!(probe_buffer_seen, m)?)?;
    Ok(())
}
