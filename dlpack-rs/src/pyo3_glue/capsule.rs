//! Capsules: wrapping our managed tensors in `"dltensor"` / `"dltensor_versioned"` capsules,
//! taking ownership of a producer's capsule (rename to `used_...` first), and the keepalive
//! that holds a Python object from a deleter that may run on any thread.

use core::ffi::{c_void, CStr};
use core::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyCapsule, PyCapsuleMethods};

use crate::ffi::{
    DLManagedTensor, DLManagedTensorVersioned, DLPACK_CAPSULE_NAME, DLPACK_USED_CAPSULE_NAME,
    DLPACK_USED_VERSIONED_CAPSULE_NAME, DLPACK_VERSIONED_CAPSULE_NAME,
};
use crate::safe::{ManagedTensor, ManagedTensorVersioned};

/// Saves the error indicator, runs `f`, restores the indicator: a capsule destructor can run
/// while an exception is being raised, and must neither clear nor replace it.
///
/// # Safety
///
/// The calling thread must be attached to the interpreter (hold the GIL).
unsafe fn preserving_error_indicator(f: impl FnOnce()) {
    let mut ptype = core::ptr::null_mut();
    let mut pvalue = core::ptr::null_mut();
    let mut ptrace = core::ptr::null_mut();
    // SAFETY: the caller holds the GIL; Fetch moves the (possibly NULL) indicator into the
    // three owned references, which Restore below moves back.
    #[allow(deprecated)]
    unsafe {
        ffi::PyErr_Fetch(&mut ptype, &mut pvalue, &mut ptrace)
    };
    // A panic must not unwind out of the `extern "C"` destructor; ours cannot panic, but a
    // keepalive's Drop is user code (and is also caught inside the deleter).
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    // SAFETY: the GIL is still held; this restores exactly what Fetch took.
    #[allow(deprecated)]
    unsafe {
        ffi::PyErr_Restore(ptype, pvalue, ptrace)
    };
}

/// The two owned managed-tensor kinds a capsule of ours can carry.
trait CapsuleKind: Sized {
    /// The capsule's name while nobody consumed it.
    const NAME: &'static CStr;
    /// The managed struct.
    type Raw;
    fn into_raw(self) -> *mut Self::Raw;
    /// # Safety
    /// As `ManagedTensor[Versioned]::from_raw_unchecked`: a valid tensor of ours, owned here.
    unsafe fn from_raw_unchecked(ptr: NonNull<Self::Raw>) -> Self;
}

impl CapsuleKind for ManagedTensor {
    const NAME: &'static CStr = DLPACK_CAPSULE_NAME;
    type Raw = DLManagedTensor;
    fn into_raw(self) -> *mut DLManagedTensor {
        ManagedTensor::into_raw(self)
    }
    unsafe fn from_raw_unchecked(ptr: NonNull<DLManagedTensor>) -> Self {
        // SAFETY: forwarded from the caller.
        unsafe { ManagedTensor::from_raw_unchecked(ptr) }
    }
}

impl CapsuleKind for ManagedTensorVersioned {
    const NAME: &'static CStr = DLPACK_VERSIONED_CAPSULE_NAME;
    type Raw = DLManagedTensorVersioned;
    fn into_raw(self) -> *mut DLManagedTensorVersioned {
        ManagedTensorVersioned::into_raw(self)
    }
    unsafe fn from_raw_unchecked(ptr: NonNull<DLManagedTensorVersioned>) -> Self {
        // SAFETY: forwarded from the caller.
        unsafe { ManagedTensorVersioned::from_raw_unchecked(ptr) }
    }
}

/// Destructor of our capsules: calls the deleter only if no consumer renamed the capsule
/// (took ownership).
unsafe extern "C" fn capsule_destructor<T: CapsuleKind>(capsule: *mut ffi::PyObject) {
    // SAFETY: CPython calls capsule destructors with the GIL held, with a live capsule.
    unsafe {
        preserving_error_indicator(|| {
            if ffi::PyCapsule_IsValid(capsule, T::NAME.as_ptr()) == 1 {
                let ptr = ffi::PyCapsule_GetPointer(capsule, T::NAME.as_ptr()).cast::<T::Raw>();
                // The name is still the unused one: nobody took the tensor, so we still own it
                // (a valid capsule has a non-NULL pointer); dropping the owner calls its
                // deleter exactly once.
                drop(T::from_raw_unchecked(NonNull::new_unchecked(ptr)));
            }
        })
    }
}

/// Wraps an owned managed tensor in a capsule of its kind's name. If the consumer never
/// renames it, the capsule's destructor calls the deleter. On failure the tensor is freed.
fn capsule<T: CapsuleKind>(py: Python<'_>, tensor: T) -> PyResult<Bound<'_, PyCapsule>> {
    let raw = tensor.into_raw();
    // SAFETY: `raw` is a valid, owned managed tensor (non-NULL); the destructor frees it unless a
    // consumer took it by renaming the capsule, and CPython runs it with the GIL held.
    let capsule = unsafe {
        PyCapsule::new_with_pointer_and_destructor(
            py,
            NonNull::new_unchecked(raw.cast::<c_void>()),
            T::NAME,
            Some(capsule_destructor::<T>),
        )
    };
    if capsule.is_err() {
        // SAFETY: no capsule was made, so `raw` is still ours alone.
        drop(unsafe { T::from_raw_unchecked(NonNull::new_unchecked(raw)) });
    }
    capsule
}

/// Wraps an owned legacy managed tensor in a `"dltensor"` capsule. If the consumer never
/// renames it, the capsule's destructor calls the deleter. On failure the tensor is freed.
pub fn legacy_capsule<'py>(
    py: Python<'py>,
    tensor: ManagedTensor,
) -> PyResult<Bound<'py, PyCapsule>> {
    capsule(py, tensor)
}

/// Wraps an owned versioned managed tensor in a `"dltensor_versioned"` capsule, as
/// [`legacy_capsule`].
pub fn versioned_capsule<'py>(
    py: Python<'py>,
    tensor: ManagedTensorVersioned,
) -> PyResult<Bound<'py, PyCapsule>> {
    capsule(py, tensor)
}

/// A managed tensor taken out of a capsule: legacy or versioned.
#[derive(Debug)]
pub enum Consumed {
    /// From a `"dltensor"` capsule.
    Legacy(ManagedTensor),
    /// From a `"dltensor_versioned"` capsule.
    Versioned(ManagedTensorVersioned),
}

impl Consumed {
    /// A validated view of the tensor, whichever kind it is.
    pub fn view(&self) -> crate::safe::TensorView<'_> {
        match self {
            Consumed::Legacy(t) => t.view(),
            Consumed::Versioned(t) => t.view(),
        }
    }
}

/// Takes ownership of the managed tensor in a DLPack capsule of either name.
///
/// The capsule is renamed to its `used_` name before anything that can fail, so that its
/// destructor never frees the tensor; from then on the returned value calls the producer's
/// deleter exactly once (at once, on a validation error). A capsule that was already
/// consumed raises `ValueError`; any other capsule `TypeError`; a tensor of a DLPack major
/// version other than 1, or one that cannot be described, `BufferError`.
pub fn consume_capsule(capsule: &Bound<'_, PyCapsule>) -> PyResult<Consumed> {
    let ptr = capsule.as_ptr();
    // SAFETY: `ptr` is a live capsule and we hold the GIL. A name is compared, never kept.
    let name: Option<&CStr> = unsafe {
        let raw = ffi::PyCapsule_GetName(ptr);
        if raw.is_null() {
            ffi::PyErr_Clear();
            None
        } else {
            Some(CStr::from_ptr(raw))
        }
    };
    let versioned = match name {
        Some(n) if n == DLPACK_VERSIONED_CAPSULE_NAME => true,
        Some(n) if n == DLPACK_CAPSULE_NAME => false,
        Some(n) if n == DLPACK_USED_CAPSULE_NAME || n == DLPACK_USED_VERSIONED_CAPSULE_NAME => {
            return Err(PyValueError::new_err(
                "DLPack capsule was already consumed (its name starts with 'used_')",
            ))
        }
        other => {
            return Err(PyTypeError::new_err(format!(
                "expected a DLPack capsule named 'dltensor' or 'dltensor_versioned', got {:?}",
                other.map(CStr::to_string_lossy)
            )))
        }
    };
    let (name, used) = if versioned {
        (
            DLPACK_VERSIONED_CAPSULE_NAME,
            DLPACK_USED_VERSIONED_CAPSULE_NAME,
        )
    } else {
        (DLPACK_CAPSULE_NAME, DLPACK_USED_CAPSULE_NAME)
    };
    let raw = capsule.pointer_checked(Some(name))?;
    // Take ownership before anything else can fail: after the rename the producer's capsule
    // destructor leaves the tensor alone.
    // SAFETY: a live capsule, the GIL held, and a 'static name.
    if unsafe { ffi::PyCapsule_SetName(ptr, used.as_ptr()) } != 0 {
        return Err(PyErr::fetch(capsule.py()));
    }
    let result = if versioned {
        // SAFETY: a "dltensor_versioned" capsule holds a DLManagedTensorVersioned that is now
        // ours alone; from_raw checks the major version before reading anything else and calls
        // the deleter on any error.
        unsafe { ManagedTensorVersioned::from_raw(raw.as_ptr().cast()) }.map(Consumed::Versioned)
    } else {
        // SAFETY: a "dltensor" capsule holds a DLManagedTensor that is now ours alone; from_raw
        // calls the deleter on any error.
        unsafe { ManagedTensor::from_raw(raw.as_ptr().cast()) }.map(Consumed::Legacy)
    };
    result.map_err(PyErr::from)
}

/// Set by an `atexit` hook once the interpreter starts shutting down; from then on a
/// [`PyKeepalive`] dropped without the GIL leaks its object instead of attaching.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

pub(crate) fn install_shutdown_hook(py: Python<'_>) {
    HOOK.call_once(|| {
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
    });
}

/// Whether this thread holds the GIL. The stable ABI (feature `abi3`) has no
/// `PyGILState_Check`: there the answer is always "no", which only makes callers take their
/// conservative path.
fn this_thread_holds_gil() -> bool {
    // SAFETY: both are callable at any time from any thread; `PyGILState_Check` returns 1
    // only when this thread holds the GIL (it is only read when the interpreter is live).
    #[cfg(not(feature = "abi3"))]
    return unsafe { ffi::Py_IsInitialized() != 0 && ffi::PyGILState_Check() == 1 };
    #[cfg(feature = "abi3")]
    return false;
}

/// Whether the interpreter is shutting down (our `atexit` hook ran) and this thread does not
/// hold the GIL: from then on nothing may try to take the GIL, so owners leak instead.
pub(crate) fn exiting_without_gil() -> bool {
    SHUTTING_DOWN.load(Ordering::SeqCst) && !this_thread_holds_gil()
}

/// A Python object held as the keepalive of an exported tensor.
///
/// DLPack deleters run on any thread, with or without the GIL, even during interpreter
/// shutdown. Dropping a `PyKeepalive` is sound in all three cases:
/// - on a thread that holds the GIL, the reference is released at once;
/// - on a thread without it, the thread attaches to release it ([`Python::try_attach`]);
/// - when the interpreter is shutting down or not attachable, the reference is leaked
///   (never touching Python), which is what a process about to exit can afford.
pub struct PyKeepalive(Option<Py<PyAny>>);

impl PyKeepalive {
    /// Holds `obj` until this value is dropped.
    pub fn new(py: Python<'_>, obj: Py<PyAny>) -> Self {
        install_shutdown_hook(py);
        PyKeepalive(Some(obj))
    }

    /// The object held.
    pub fn object(&self) -> Option<&Py<PyAny>> {
        self.0.as_ref()
    }
}

impl Drop for PyKeepalive {
    fn drop(&mut self) {
        let Some(obj) = self.0.take() else { return };
        // Under `abi3` this is always false and the `try_attach` path below is taken, which is
        // re-entrant on a thread that already holds the GIL; the one difference: a thread
        // holding the GIL during shutdown leaks the reference.
        if this_thread_holds_gil() {
            // SAFETY: this thread holds the GIL, so the reference can be released directly
            // (even during finalization, as CPython itself does).
            unsafe { ffi::Py_DecRef(obj.into_ptr()) };
            return;
        }
        if SHUTTING_DOWN.load(Ordering::SeqCst) {
            std::mem::forget(obj);
            return;
        }
        let mut slot = Some(obj);
        // try_attach refuses (returns None, not running the closure) when the interpreter is
        // not initialized or (3.13+) finalizing.
        Python::try_attach(|_py| drop(slot.take()));
        if let Some(obj) = slot {
            std::mem::forget(obj);
        }
    }
}

impl core::fmt::Debug for PyKeepalive {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("PyKeepalive").field(&self.0).finish()
    }
}
