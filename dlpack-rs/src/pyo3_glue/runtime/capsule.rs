//! Capsules: wrapping an owned managed tensor in a `"dltensor"` / `"dltensor_versioned"`
//! capsule whose destructor frees it unless a consumer took it, and taking ownership of a
//! producer's capsule (rename to `used_...` first).

use core::ffi::{c_void, CStr};
use core::ptr::NonNull;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::ffi::{
    DLPACK_CAPSULE_NAME, DLPACK_USED_CAPSULE_NAME, DLPACK_USED_VERSIONED_CAPSULE_NAME,
    DLPACK_VERSIONED_CAPSULE_NAME,
};
use crate::pyo3_glue::runtime::cpython;
use crate::safe::{AnyManaged, Kind, Managed, ManagedTensor, ManagedTensorVersioned};

/// The capsule name of an owner's kind while nobody consumed it.
fn unused_name<K: Kind>(t: &Managed<K>) -> &'static CStr {
    if t.is_versioned() {
        DLPACK_VERSIONED_CAPSULE_NAME
    } else {
        DLPACK_CAPSULE_NAME
    }
}

/// Destructor of our capsules: calls the deleter only if no consumer renamed the capsule
/// (took ownership). `VERSIONED` says which struct the capsule was made with.
unsafe extern "C" fn capsule_destructor<const VERSIONED: bool>(capsule: *mut ffi::PyObject) {
    let name = if VERSIONED {
        DLPACK_VERSIONED_CAPSULE_NAME
    } else {
        DLPACK_CAPSULE_NAME
    };
    // SAFETY: CPython calls capsule destructors with the GIL held, with a live capsule.
    // `PyCapsule_IsValid` never sets an exception: a consumed capsule (the usual case) costs one
    // name comparison, and only the deleter (which may run Python code) runs with the error
    // indicator put aside.
    unsafe {
        if cpython::capsule_is_named(capsule, name) {
            cpython::preserving_error_indicator(|| {
                let ptr = cpython::capsule_pointer(capsule, name);
                // The name is still the unused one: nobody took the tensor, so this capsule
                // (made by `into_capsule` from `into_raw_parts`, with this destructor) still owns
                // the struct of the kind `VERSIONED` says; a valid capsule has a non-NULL
                // pointer. Dropping the owner calls its deleter exactly once.
                AnyManaged::drop_raw_parts(NonNull::new_unchecked(ptr), VERSIONED);
            })
        }
    }
}

/// Wraps a managed tensor in a capsule of its kind's name (`"dltensor"` or
/// `"dltensor_versioned"`): what every export of this crate hands to `__dlpack__`'s caller.
///
/// If the consumer never renames the capsule, its destructor calls the deleter. On failure the tensor is freed. A read-only owner must be versioned (a legacy
/// capsule cannot say read-only): `BufferError` otherwise.
///
/// Joins the process-wide borrow registry first (raising if it cannot): the export's shared
/// borrow, registered when it was built, must be seen by every other extension module that may
/// import the memory from here on (after torch re-exported it writable, say).
pub fn into_capsule<K: Kind>(py: Python<'_>, tensor: Managed<K>) -> PyResult<Bound<'_, PyCapsule>> {
    crate::pyo3_glue::runtime::shared_registry::join(py)?;
    let name = unused_name(&tensor);
    let versioned = tensor.is_versioned();
    if !versioned && tensor.is_read_only() {
        return Err(pyo3::exceptions::PyBufferError::new_err(
            "cannot export read-only data as a legacy DLPack capsule (it cannot signal \
             read-only); ask for max_version=(1, x)",
        ));
    }
    let (raw, _) = tensor.into_raw_parts();
    let destructor = if versioned {
        capsule_destructor::<true> as unsafe extern "C" fn(*mut ffi::PyObject)
    } else {
        capsule_destructor::<false>
    };
    // SAFETY: `raw` is a valid, owned managed struct of the kind `name` says (non-NULL); the
    // destructor frees it unless a consumer took it by renaming the capsule, and CPython runs
    // it with the GIL held.
    let capsule =
        unsafe { PyCapsule::new_with_pointer_and_destructor(py, raw, name, Some(destructor)) };
    if capsule.is_err() {
        // SAFETY: no capsule was made, so `raw` is still ours alone, from `into_raw_parts`.
        unsafe { Managed::<K>::drop_raw_parts(raw, versioned) };
    }
    capsule
}

/// Takes ownership of the managed tensor in a DLPack capsule of either name.
///
/// The capsule is renamed to its `used_` name before anything that can fail, so that its
/// destructor never frees the tensor; from then on the returned owner calls the producer's
/// deleter exactly once (at once, on a validation error). A capsule that was already
/// consumed raises `ValueError`; any other capsule `TypeError`; a tensor of a DLPack major
/// version other than 1, or one that cannot be described, `BufferError`.
///
/// # Safety
///
/// A capsule's name is no proof of what it points to (safe pyo3 code can make a capsule of any
/// value under any name): the caller vouches that a capsule named `"dltensor"` /
/// `"dltensor_versioned"` holds a producer's `DLManagedTensor` / `DLManagedTensorVersioned`
/// that keeps the DLPack contract, as a capsule returned by a producer's `__dlpack__` does.
pub(crate) unsafe fn consume_capsule(capsule: &Bound<'_, PyCapsule>) -> PyResult<AnyManaged> {
    // Reading the name and renaming happen in one critical section on the capsule, so that on a
    // free-threaded interpreter two threads consuming one capsule cannot both take it.
    let (versioned, raw) =
        pyo3::sync::critical_section::with_critical_section(capsule.as_any(), || {
            take_ownership(capsule)
        })?;
    let result = if versioned {
        // SAFETY: the caller vouches that a "dltensor_versioned" capsule holds a
        // DLManagedTensorVersioned, which the rename made ours alone; from_raw checks the major
        // version before reading anything else and calls the deleter on any error.
        unsafe { ManagedTensorVersioned::from_raw(raw.as_ptr().cast()) }.map(AnyManaged::from)
    } else {
        // SAFETY: as above, for a "dltensor" capsule and a DLManagedTensor.
        unsafe { ManagedTensor::from_raw(raw.as_ptr().cast()) }.map(AnyManaged::from)
    };
    result.map_err(PyErr::from)
}

/// Reads the capsule's name and renames it to its `used_` name: from then on the tensor is the
/// caller's. Returns whether it is versioned, and its pointer.
fn take_ownership(capsule: &Bound<'_, PyCapsule>) -> PyResult<(bool, NonNull<c_void>)> {
    let ptr = capsule.as_ptr();
    // SAFETY: `ptr` is a live capsule and we hold the GIL. A name is compared, never kept.
    let name: Option<&CStr> = unsafe { cpython::capsule_name(ptr) };
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
    // SAFETY: a live capsule, the GIL held, and the name it was just found to have: the
    // pointer is its own (NULL only for a capsule of NULL, which CPython cannot make).
    let raw = unsafe { cpython::capsule_pointer(ptr, name) };
    let Some(raw) = NonNull::new(raw) else {
        return Err(PyErr::fetch(capsule.py()));
    };
    // Take ownership before anything else can fail: after the rename the producer's capsule
    // destructor leaves the tensor alone.
    // SAFETY: a live capsule, the GIL held, and a 'static name.
    if !unsafe { cpython::capsule_rename(ptr, used) } {
        return Err(PyErr::fetch(capsule.py()));
    }
    Ok((versioned, raw))
}
