//! `Held`: an imported tensor kept by Rust until the suite releases it, here or on another
//! thread, with or without the GIL (where and when the producer's deleter runs).

use std::sync::Mutex;

use dlpack_rs::pyo3_glue::PyTensor;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::consumer::{describe, gather, Imported};

/// An imported tensor held by Rust until `release()`.
#[pyclass(frozen)]
struct Held {
    tensor: Mutex<Option<PyTensor>>,
}

impl Held {
    fn with<R>(&self, f: impl FnOnce(&PyTensor) -> PyResult<R>) -> PyResult<R> {
        let guard = self.tensor.lock().unwrap();
        match guard.as_ref() {
            Some(t) => f(t),
            None => Err(PyRuntimeError::new_err("released")),
        }
    }
}

#[pymethods]
impl Held {
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.with(|t| Ok(PyBytes::new(py, &gather(t)?)))
    }

    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.with(|t| describe(py, t))
    }

    /// Drops the tensor here (the producer's deleter runs now, with the GIL).
    fn release(&self) {
        drop(self.tensor.lock().unwrap().take());
    }

    /// Drops the tensor on a new thread while this thread waits with the GIL released.
    fn release_on_thread(&self, py: Python<'_>) -> PyResult<()> {
        let t = self.tensor.lock().unwrap().take();
        py.detach(|| std::thread::spawn(move || drop(t)).join())
            .map_err(|_| PyRuntimeError::new_err("thread panicked"))
    }

    /// Drops the tensor on a new thread while this thread keeps holding the GIL for `seconds`
    /// (spinning in Rust, never releasing it). Returns `obj`'s reference count and the number of
    /// keepalives released after attaching, both read at the end of the spin, still holding the
    /// GIL: the dropping thread must have waited.
    fn release_on_thread_while_holding_gil(
        &self,
        obj: &Bound<'_, PyAny>,
        seconds: f64,
    ) -> (isize, usize) {
        let t = self.tensor.lock().unwrap().take();
        std::thread::spawn(move || drop(t));
        let end = std::time::Instant::now() + std::time::Duration::from_secs_f64(seconds);
        while std::time::Instant::now() < end {
            std::hint::spin_loop();
        }
        // SAFETY: `obj` is a live object and this thread is attached.
        let refs = unsafe { pyo3::ffi::Py_REFCNT(obj.as_ptr()) };
        (
            refs,
            dlpack_rs::pyo3_glue::keepalive_counts().after_attaching,
        )
    }

    /// Drops the tensor on a new thread without waiting: the deleter runs while this thread
    /// may still hold the GIL.
    fn release_on_detached_thread(&self) {
        let t = self.tensor.lock().unwrap().take();
        std::thread::spawn(move || drop(t));
    }

    /// Drops the tensor with the GIL released by a raw `PyEval_SaveThread` inside this pyo3
    /// call, as a foreign framework's deleter does (torch frees storage with the GIL released):
    /// pyo3's attach count says "attached", CPython's thread state says not.
    fn release_with_gil_released_raw(&self) {
        let t = self.tensor.lock().unwrap().take();
        // SAFETY: this thread is attached (a pyo3 call); it detaches, touches nothing of Python
        // itself while detached (the deleter chain must attach on its own), and re-attaches.
        unsafe {
            let state = pyo3::ffi::PyEval_SaveThread();
            drop(t);
            pyo3::ffi::PyEval_RestoreThread(state);
        }
    }
}

/// Imports `obj` and keeps it in a `Held`.
#[pyfunction]
fn hold(obj: Imported) -> Held {
    Held {
        tensor: Mutex::new(Some(obj.0)),
    }
}

/// What the last [`AttachProbe`] drop saw: 0 none yet, 1 the GIL held once pyo3 let it attach,
/// 2 not held (pyo3 counted the thread attached while foreign code had released the GIL), 3 the
/// drop ran where the GIL cannot be asked (abi3 hides `PyGILState_Check`).
static ATTACH_SEEN: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// A field whose `Drop` asks pyo3 to attach and records whether the thread then holds the GIL.
struct AttachProbe;

impl Drop for AttachProbe {
    fn drop(&mut self) {
        let seen = match gil_held_once_attached() {
            Some(true) => 1,
            Some(false) => 2,
            None => 3,
        };
        ATTACH_SEEN.store(seen, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Asks pyo3 to attach, then whether this thread holds the GIL (`None` under abi3, which hides
/// `PyGILState_Check`): the probes of a keepalive `Drop` run where foreign code released it.
pub(crate) fn gil_held_once_attached() -> Option<bool> {
    Python::attach(|_py| {
        #[cfg(not(feature = "abi3"))]
        {
            // SAFETY: reads whether this thread holds the GIL; callable attached or not.
            Some(unsafe { pyo3::ffi::PyGILState_Check() } == 1)
        }
        #[cfg(feature = "abi3")]
        {
            None
        }
    })
}

/// A derived export (no `#[pyclass]`: the struct itself is the keepalive) with an [`AttachProbe`].
#[derive(dlpack_rs::IntoDLPack)]
struct AttachOnDrop {
    #[dlpack(data)]
    data: Vec<f32>,
    _probe: AttachProbe,
}

/// A versioned capsule of an [`AttachOnDrop`].
#[pyfunction]
fn attach_on_drop(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyCapsule>> {
    use dlpack_rs::IntoDLPack;
    let value = AttachOnDrop {
        data: vec![1.0, 2.0, 3.0],
        _probe: AttachProbe,
    };
    value.into_capsule_versioned(py)
}

/// What the last [`AttachProbe`] drop saw (see [`ATTACH_SEEN`]).
#[pyfunction]
fn attach_seen() -> u8 {
    ATTACH_SEEN.load(std::sync::atomic::Ordering::SeqCst)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Held>()?;
    m.add_function(wrap_pyfunction!(hold, m)?)?;
    m.add_function(wrap_pyfunction!(attach_on_drop, m)?)?;
    m.add_function(wrap_pyfunction!(attach_seen, m)?)?;
    Ok(())
}
