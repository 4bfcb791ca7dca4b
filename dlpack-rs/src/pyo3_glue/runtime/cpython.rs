//! The glue's own CPython C API calls, each with its contract, and the `extern "C"` panic guard.

use core::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::ffi;
use pyo3::panic::PanicException;
use pyo3::prelude::*;

/// Runs `f`, catching a panic (`None`), its payload's drop included.
#[inline(always)]
pub(crate) fn no_unwind<R>(f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => Some(value),
        Err(payload) => {
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            None
        }
    }
}

/// Runs an `extern "C"` body: a `PyErr` or panic (`on_panic`) is set pending, returning `failed`.
/// # Safety
/// The calling thread is attached to the interpreter (holds the GIL on GIL builds).
#[inline(always)]
pub(crate) unsafe fn attached_entry<R>(
    failed: R,
    on_panic: &'static str,
    f: impl FnOnce(Python<'_>) -> PyResult<R>,
) -> R {
    // SAFETY: attached, by this function's contract.
    let py = unsafe { Python::assume_attached() };
    match no_unwind(|| f(py)) {
        Some(Ok(value)) => value,
        Some(Err(err)) => {
            err.restore(py);
            failed
        }
        None => {
            PanicException::new_err(on_panic).restore(py);
            failed
        }
    }
}

/// Whether the interpreter is initialized (callable at any time, from any thread).
#[inline]
pub(crate) fn is_initialized() -> bool {
    // SAFETY: `Py_IsInitialized` reads a flag; it may be called attached or not.
    unsafe { ffi::Py_IsInitialized() != 0 }
}

/// This thread's current thread state (NULL: none) and `PyGILState`'s for it. Not abi3.
#[cfg(not(feature = "abi3"))]
#[inline]
pub(crate) fn thread_states() -> (*mut ffi::PyThreadState, *mut ffi::PyThreadState) {
    // SAFETY: both read thread-local state (the current thread state, NULL when none; this
    // thread's `PyGILState` slot), from any thread, attached or not, once initialized (checked).
    unsafe {
        if ffi::Py_IsInitialized() == 0 {
            return (core::ptr::null_mut(), core::ptr::null_mut());
        }
        (
            ffi::compat::PyThreadState_GetUnchecked(),
            ffi::PyGILState_GetThisThreadState(),
        )
    }
}

/// Whether the interpreter is initialized and this thread has a `PyGILState` thread state (it
/// has been a Python thread). False for every thread while the interpreter finalizes.
pub(crate) fn has_thread_state() -> bool {
    // SAFETY: reads a flag, then (once initialized) this thread's `PyGILState` slot, from any
    // thread, attached or not.
    unsafe { ffi::Py_IsInitialized() != 0 && !ffi::PyGILState_GetThisThreadState().is_null() }
}

/// Schedules `f(NULL)` on the main thread, which runs it holding the GIL; false if CPython's
/// queue is full or the interpreter is not initialized. Callable from any thread.
#[cfg(not(feature = "abi3"))]
pub(crate) fn add_pending_call(
    f: extern "C" fn(*mut core::ffi::c_void) -> core::ffi::c_int,
) -> bool {
    // SAFETY: `Py_AddPendingCall` needs neither a thread state nor the GIL, in an initialized
    // interpreter (checked first; a finalization starting meanwhile is the race every
    // deleter-side call here shares, SAFETY.md); `f` ignores its NULL argument.
    unsafe {
        ffi::Py_IsInitialized() != 0 && ffi::Py_AddPendingCall(Some(f), core::ptr::null_mut()) == 0
    }
}

/// The ID (never reused) of the interpreter this thread runs.
/// # Safety
/// The thread is attached.
#[inline]
pub(crate) unsafe fn interpreter_id() -> i64 {
    // SAFETY: attached, by this function's contract: there is a current interpreter.
    unsafe { ffi::PyInterpreterState_GetID(ffi::PyInterpreterState_Get()) }
}

/// The current interpreter's state dictionary, borrowed (NULL, with no exception, if none).
/// # Safety
/// The thread is attached; the reference is borrowed from the interpreter, which keeps it.
#[inline]
pub(crate) unsafe fn interpreter_dict() -> *mut ffi::PyObject {
    // SAFETY: attached, by this function's contract.
    unsafe { ffi::PyInterpreterState_GetDict(ffi::PyInterpreterState_Get()) }
}

/// Runs `f` after truly attaching this thread (`PyGILState_Ensure`), released after, on panic too.
/// # Safety
/// The interpreter is initialized and not finalizing (attaching then could hang or end the
/// thread), and `f` keeps nothing of Python past its return.
pub(crate) unsafe fn with_attached<R>(f: impl FnOnce() -> R) -> R {
    struct Release(ffi::PyGILState_STATE);
    impl Drop for Release {
        fn drop(&mut self) {
            // SAFETY: pairs with the `PyGILState_Ensure` below, on the same thread.
            unsafe { ffi::PyGILState_Release(self.0) };
        }
    }
    // SAFETY: initialized and not finalizing, by this function's contract.
    let _release = Release(unsafe { ffi::PyGILState_Ensure() });
    f()
}

/// Releases a strong reference.
/// # Safety
/// Attached to the object's interpreter; the caller owns (and gives up) the reference.
#[inline]
pub(crate) unsafe fn decref(obj: *mut ffi::PyObject) {
    // SAFETY: by this function's contract.
    unsafe { ffi::Py_DecRef(obj) }
}

/// Takes a new strong reference to `obj`, which the caller then owns.
/// # Safety
/// The thread is attached and `obj` is a live object.
#[inline]
pub(crate) unsafe fn incref(obj: *mut ffi::PyObject) {
    // SAFETY: by this function's contract.
    unsafe { ffi::Py_IncRef(obj) }
}

/// Whether `obj` is an instance of `ty` or a subtype (`PyObject_TypeCheck`: no Python code runs).
/// # Safety
/// The thread is attached; `obj` and `ty` are live.
#[inline]
pub(crate) unsafe fn type_check(obj: *mut ffi::PyObject, ty: *mut ffi::PyTypeObject) -> bool {
    // SAFETY: by this function's contract.
    unsafe { ffi::PyObject_TypeCheck(obj, ty) != 0 }
}

/// Whether `obj` is a capsule (exactly `PyCapsule`).
/// # Safety
/// The thread is attached; `obj` is live.
#[inline]
pub(crate) unsafe fn is_capsule(obj: *mut ffi::PyObject) -> bool {
    // SAFETY: by this function's contract.
    unsafe { ffi::PyCapsule_CheckExact(obj) != 0 }
}

/// Whether `ty` is a static type (made by C code: Python code can only make heap types).
pub(crate) fn is_static_type(ty: &Bound<'_, pyo3::types::PyType>) -> bool {
    // SAFETY: attached, a live type (the `Bound` proves both).
    unsafe { ffi::PyType_GetFlags(ty.as_type_ptr()) & ffi::Py_TPFLAGS_HEAPTYPE == 0 }
}

/// The C getter and closure of `descr` when it is exactly a getset descriptor of a static type
/// that is `ty` or a base of it (valid for the process). Not abi3.
/// # Safety
/// The thread is attached; `descr` and `ty` are live.
#[cfg(not(feature = "abi3"))]
pub(crate) unsafe fn getset_getter(
    descr: *mut ffi::PyObject,
    ty: *mut ffi::PyTypeObject,
) -> Option<(ffi::getter, *mut core::ffi::c_void)> {
    // SAFETY: reading the type of a live object; the exact-type check makes the cast to
    // CPython's getset descriptor layout valid, whose `d_getset` points at the owning type's
    // getset table and `d_type` at that type, both alive as long as the descriptor.
    unsafe {
        if ffi::Py_TYPE(descr) != &raw mut ffi::PyGetSetDescr_Type {
            return None;
        }
        let descr = &*descr.cast::<ffi::PyGetSetDescrObject>();
        if ffi::PyType_GetFlags(descr.d_common.d_type) & ffi::Py_TPFLAGS_HEAPTYPE != 0 {
            return None;
        }
        let def = descr.d_getset.as_ref()?;
        // The getter takes only instances of the owning type (a class body may copy a descriptor).
        if ffi::PyType_IsSubtype(ty, descr.d_common.d_type) == 0 {
            return None;
        }
        Some((def.get?, def.closure))
    }
}

/// A type's version tag, read atomically (reset by CPython >= 3.11 on any change, never
/// reused), or 0 where it is not valid (always under abi3, which hides it).
/// # Safety
/// Attached; `ty` is a live type object.
#[inline]
pub(crate) unsafe fn type_version(ty: *mut ffi::PyTypeObject) -> u32 {
    /// `Py_TPFLAGS_VALID_VERSION_TAG`, kept up to date by CPython before 3.13.
    const VALID_VERSION_TAG: core::ffi::c_ulong = 1 << 19;
    #[cfg(feature = "abi3")]
    let tag = {
        let _ = ty;
        0
    };
    // SAFETY: a live type object's field, accessed only atomically here (CPython's writers use
    // atomic stores on free-threaded builds, and hold the GIL otherwise, as we do).
    #[cfg(not(feature = "abi3"))]
    let tag = unsafe {
        core::sync::atomic::AtomicU32::from_ptr(&raw mut (*ty).tp_version_tag)
            .load(core::sync::atomic::Ordering::Acquire)
    };
    // SAFETY: attached (this function's contract); a live type object's flags, read as
    // CPython's own API reads them (the flag is kept before 3.13 only).
    let stale = unsafe {
        tag != 0
            && minor_version(Python::assume_attached()) < 13
            && ffi::PyType_GetFlags(ty) & VALID_VERSION_TAG == 0
    };
    if stale {
        0
    } else {
        tag
    }
}

/// The running interpreter's minor version (3.x), read once.
pub(crate) fn minor_version(py: Python<'_>) -> u8 {
    use core::sync::atomic::{AtomicU8, Ordering};
    // 0: not read yet (no supported CPython has minor version 0).
    static MINOR: AtomicU8 = AtomicU8::new(0);
    match MINOR.load(Ordering::Relaxed) {
        0 => {
            let minor = py.version_info().minor;
            MINOR.store(minor, Ordering::Relaxed);
            minor
        }
        minor => minor,
    }
}

/// `ty`'s version tag, assigned by a look-up of `name` if it has none; 0 when it cannot (abi3).
/// # Safety
/// Attached; `ty` is a live type object, `name` a live string.
pub(crate) unsafe fn assign_type_version(
    ty: *mut ffi::PyTypeObject,
    name: *mut ffi::PyObject,
) -> u32 {
    #[cfg(not(feature = "abi3"))]
    unsafe extern "C" {
        // A borrowed reference or NULL, never an exception; it gives the type a version tag first.
        fn _PyType_Lookup(
            ty: *mut ffi::PyTypeObject,
            name: *mut ffi::PyObject,
        ) -> *mut ffi::PyObject;
    }
    // SAFETY: attached, with a live type and string (this function's contract).
    unsafe {
        #[cfg(not(feature = "abi3"))]
        _PyType_Lookup(ty, name);
        #[cfg(feature = "abi3")]
        let _ = name;
        type_version(ty)
    }
}

/// Runs `f` with the pending exception put aside and restored afterwards, catching a panic.
/// # Safety
/// The thread is attached.
pub(crate) unsafe fn preserving_error_indicator(f: impl FnOnce()) {
    let mut ptype = core::ptr::null_mut();
    let mut pvalue = core::ptr::null_mut();
    let mut ptrace = core::ptr::null_mut();
    // SAFETY: attached (this function's contract); Fetch moves the (possibly NULL) indicator
    // into the three owned references, which Restore below moves back.
    #[allow(deprecated)]
    unsafe {
        ffi::PyErr_Fetch(&mut ptype, &mut pvalue, &mut ptrace)
    };
    let _ = no_unwind(f);
    // SAFETY: still attached; this restores exactly what Fetch took.
    #[allow(deprecated)]
    unsafe {
        ffi::PyErr_Restore(ptype, pvalue, ptrace)
    };
}

/// The capsule's pointer if it is named `name`; never sets an exception (that could run Python).
/// # Safety
/// The thread is attached; `capsule` is a live capsule.
pub(crate) unsafe fn pointer_if_named(
    capsule: *mut ffi::PyObject,
    name: &CStr,
) -> Option<core::ptr::NonNull<core::ffi::c_void>> {
    // SAFETY: by this function's contract; a capsule valid under `name` answers its (non-NULL)
    // pointer without an exception.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, name.as_ptr()) != 1 {
            return None;
        }
        core::ptr::NonNull::new(ffi::PyCapsule_GetPointer(capsule, name.as_ptr()))
    }
}

/// Renames the capsule (`false`, with an exception set, on failure).
/// # Safety
/// The thread is attached; `capsule` is a live capsule.
#[inline]
pub(crate) unsafe fn capsule_rename(capsule: *mut ffi::PyObject, name: &'static CStr) -> bool {
    // SAFETY: by this function's contract; the name is static, as CPython keeps the pointer.
    unsafe { ffi::PyCapsule_SetName(capsule, name.as_ptr()) == 0 }
}

/// `obj.method(name=value)` as one vectorcall (`kwnames`: the one keyword's name).
#[cfg(not(feature = "abi3"))]
#[inline]
pub(crate) fn call_method_one_keyword<'py>(
    obj: &Bound<'py, PyAny>,
    method: &Bound<'py, pyo3::types::PyString>,
    kwnames: &Bound<'py, pyo3::types::PyTuple>,
    value: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    if kwnames.len() != 1 {
        // CPython reads one value per name: the array below holds exactly one.
        return Err(pyo3::exceptions::PySystemError::new_err(
            "call_method_one_keyword: kwnames must hold exactly one name",
        ));
    }
    let mut args = [core::ptr::null_mut(), obj.as_ptr(), value.as_ptr()];
    // SAFETY: attached (the `Bound`s prove it); `args[1..]` holds `self` and the value of the
    // one name in `kwnames`, all live for the call, and `args[0]` is ours to be overwritten (the
    // offset flag); the result is a new reference or NULL with an exception set.
    unsafe {
        let result = ffi::PyObject_VectorcallMethod(
            method.as_ptr(),
            args.as_mut_ptr().add(1).cast_const(),
            1 | ffi::PY_VECTORCALL_ARGUMENTS_OFFSET,
            kwnames.as_ptr(),
        );
        Bound::from_owned_ptr_or_err(obj.py(), result)
    }
}

/// `obj` read as an exact tuple of two exact ints that fit a C long; `None` for anything else.
#[cfg(not(feature = "abi3"))]
#[inline]
pub(crate) fn exact_int_pair(obj: &Bound<'_, PyAny>) -> Option<(i64, i64)> {
    let ptr = obj.as_ptr();
    // SAFETY: attached, and `ptr` is live (the `Bound` proves both). An exact tuple's items live
    // as long as the tuple, which `obj` holds; nothing here runs Python code or keeps a reference.
    unsafe {
        if ffi::PyTuple_CheckExact(ptr) == 0 || ffi::PyTuple_GET_SIZE(ptr) != 2 {
            return None;
        }
        let read = |item: *mut ffi::PyObject| -> Option<i64> {
            if ffi::PyLong_CheckExact(item) == 0 {
                return None;
            }
            let mut overflow = 0;
            let v = ffi::PyLong_AsLongAndOverflow(item, &mut overflow);
            // An exact int fails to convert only by overflow (`c_long` is 32 bits on Windows).
            #[allow(clippy::useless_conversion)]
            let v = i64::from(v);
            (overflow == 0).then_some(v)
        };
        Some((
            read(ffi::PyTuple_GET_ITEM(ptr, 0))?,
            read(ffi::PyTuple_GET_ITEM(ptr, 1))?,
        ))
    }
}

/// `callable(arg)`: one vectorcall, or `call1` under abi3 (no vectorcall before 3.12).
#[inline]
pub(crate) fn call_one<'py>(
    callable: &Bound<'py, PyAny>,
    arg: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    #[cfg(feature = "abi3")]
    return callable.call1((arg,));
    #[cfg(not(feature = "abi3"))]
    {
        let args = [arg.as_ptr()];
        // SAFETY: attached (the `Bound`s prove it); one live argument in a buffer that outlives
        // the call, no keywords; a new reference or NULL with an exception set comes back.
        unsafe {
            Bound::from_owned_ptr_or_err(
                callable.py(),
                ffi::PyObject_Vectorcall(
                    callable.as_ptr(),
                    args.as_ptr(),
                    1,
                    core::ptr::null_mut(),
                ),
            )
        }
    }
}

/// The module `name` if it is imported already (`sys.modules[name]`).
pub(crate) fn imported_module<'py>(
    py: Python<'py>,
    name: &Bound<'py, pyo3::types::PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    // SAFETY: attached (`py`); `name` is a live str. A new reference, or NULL: with an exception
    // set on an error, without one when the module is not imported.
    let module = unsafe { ffi::PyImport_GetModule(name.as_ptr()) };
    if module.is_null() {
        return match PyErr::take(py) {
            Some(err) => Err(err),
            None => Ok(None),
        };
    }
    // SAFETY: a new reference, non-NULL.
    Ok(Some(unsafe { Bound::from_owned_ptr(py, module) }))
}
