//! When a deleter may touch Python: the attached-thread probe, the interpreter-shutdown flag,
//! and [`PyKeepalive`], the Python object an export holds from a deleter that may run on any
//! thread.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCFunction;

/// Set by an `atexit` hook once the interpreter starts shutting down; from then on owners
/// dropped on a thread that is not attached leak instead of attaching.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// 0: hook not installed; 1: being installed by some thread; 2: installed (or given up).
static HOOK_STATE: AtomicU8 = AtomicU8::new(0);

/// Registers the `atexit` hook that sets the shutdown flag, once per process copy of this
/// crate. No lock is held while Python code runs (a `Once` would deadlock if `atexit` itself
/// re-entered us, or if another thread waited on it while holding the GIL): the thread that
/// wins the flag installs the hook; the others go on and install nothing.
pub(crate) fn install_shutdown_hook(py: Python<'_>) {
    if HOOK_STATE.load(Ordering::Acquire) != 0 {
        return;
    }
    if HOOK_STATE
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    let hook = PyCFunction::new_closure(py, None, None, |_args, _kwargs| {
        SHUTTING_DOWN.store(true, Ordering::SeqCst);
    });
    let registered = hook.and_then(|hook| {
        py.import("atexit")?
            .call_method1("register", (hook,))
            .map(drop)
    });
    if registered.is_err() {
        // Without the hook we cannot tell shutdown apart: be conservative.
        SHUTTING_DOWN.store(true, Ordering::SeqCst);
    }
    HOOK_STATE.store(2, Ordering::Release);
}

/// Whether this thread is attached to the interpreter (has a current thread state: holds the
/// GIL on GIL builds). `PyGILState_Check` cannot answer this: CPython returns 1 on every thread
/// once a sub-interpreter has been created. The stable ABI (feature `abi3`) offers no unchecked
/// thread-state read: there the answer is always "no", which only makes callers take their
/// conservative path.
pub(crate) fn this_thread_is_attached() -> bool {
    #[cfg(not(feature = "abi3"))]
    {
        // SAFETY: both are callable at any time from any thread: `Py_IsInitialized` reads a
        // flag, `PyThreadState_GetUnchecked` this thread's current thread state (NULL when not
        // attached) without any check that could abort.
        unsafe {
            ffi::Py_IsInitialized() != 0 && !ffi::compat::PyThreadState_GetUnchecked().is_null()
        }
    }
    #[cfg(feature = "abi3")]
    {
        false
    }
}

/// Whether the interpreter is shutting down (our `atexit` hook ran) and this thread is not
/// attached: from then on nothing may try to attach, so owners leak instead (a
/// [`Managed::leak_on_drop_if`](crate::safe::Managed::leak_on_drop_if) predicate).
pub(crate) fn exiting_unattached() -> bool {
    SHUTTING_DOWN.load(Ordering::SeqCst) && !this_thread_is_attached()
}

/// A Python object held as the keepalive of an exported tensor.
///
/// DLPack deleters run on any thread, with or without the GIL, even during interpreter
/// shutdown. Dropping a `PyKeepalive` is sound in all three cases:
/// - on a thread that is attached, the reference is released at once;
/// - on a thread that is not, the thread attaches to release it ([`Python::try_attach`]);
/// - when the interpreter is shutting down or not attachable, the reference is leaked
///   (never touching Python), which is what a process about to exit can afford.
pub struct PyKeepalive {
    obj: Option<Py<PyAny>>,
    /// The interpreter the object belongs to (its ID: unlike its address, never reused).
    interp: i64,
}

/// The ID of the interpreter this (attached) thread runs.
fn current_interpreter() -> i64 {
    // SAFETY: called on an attached thread (a `Python` token exists, or the probe said so).
    unsafe { ffi::PyInterpreterState_GetID(ffi::PyInterpreterState_Get()) }
}

impl PyKeepalive {
    /// Holds `obj` until this value is dropped.
    pub fn new(py: Python<'_>, obj: Py<PyAny>) -> Self {
        install_shutdown_hook(py);
        PyKeepalive {
            obj: Some(obj),
            interp: current_interpreter(),
        }
    }

    /// The object held.
    pub fn object(&self) -> Option<&Py<PyAny>> {
        self.obj.as_ref()
    }
}

impl Drop for PyKeepalive {
    fn drop(&mut self) {
        let Some(obj) = self.obj.take() else { return };
        // Under `abi3` the probe is always false and the `try_attach` path below is taken,
        // which is re-entrant on an attached thread; the one difference: an attached thread
        // during shutdown leaks the reference.
        if this_thread_is_attached() {
            if current_interpreter() != self.interp {
                // Attached to another (sub-)interpreter: releasing the object needs its own
                // interpreter's lock, which this thread cannot take from here. Leak it.
                std::mem::forget(obj);
                return;
            }
            // SAFETY: this thread is attached (it has a current thread state) to the object's
            // interpreter, so the reference can be released directly (even during
            // finalization, as CPython itself does).
            unsafe { ffi::Py_DecRef(obj.into_ptr()) };
            return;
        }
        if SHUTTING_DOWN.load(Ordering::SeqCst) {
            std::mem::forget(obj);
            return;
        }
        let mut slot = Some(obj);
        let interp = self.interp;
        // try_attach refuses (returns None, not running the closure) when the interpreter is
        // not initialized or (3.13+) finalizing. It attaches to the main interpreter (or the
        // one this thread already runs): an object of another interpreter is leaked there.
        Python::try_attach(|_py| {
            if current_interpreter() == interp {
                drop(slot.take());
            }
        });
        if let Some(obj) = slot {
            std::mem::forget(obj);
        }
    }
}

impl core::fmt::Debug for PyKeepalive {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("PyKeepalive").field(&self.obj).finish()
    }
}
