//! DLPack capsules: wrapping an owned managed tensor, and taking ownership of a producer's.

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

/// A capsule's name, and the name a consumer gives it once it owns the tensor.
#[inline(always)]
fn names(versioned: bool) -> (&'static CStr, &'static CStr) {
    if versioned {
        (
            DLPACK_VERSIONED_CAPSULE_NAME,
            DLPACK_USED_VERSIONED_CAPSULE_NAME,
        )
    } else {
        (DLPACK_CAPSULE_NAME, DLPACK_USED_CAPSULE_NAME)
    }
}

/// Our capsules' destructor: calls the deleter unless a consumer renamed (took) the capsule.
unsafe extern "C" fn capsule_destructor<const VERSIONED: bool>(capsule: *mut ffi::PyObject) {
    let (name, _) = names(VERSIONED);
    // SAFETY: CPython calls destructors attached, on a live capsule. Under its unused name the
    // capsule (from `into_capsule`) owns a struct of the kind `VERSIONED` says: dropped once here,
    // with the error indicator aside for the deleter (it may run Python; the name test sets none).
    unsafe {
        if let Some(ptr) = cpython::pointer_if_named(capsule, name) {
            cpython::preserving_error_indicator(|| AnyManaged::drop_raw_parts(ptr, VERSIONED))
        }
    }
}

/// Wraps a managed tensor in a DLPack capsule (`BufferError` for a read-only legacy owner).
pub fn into_capsule<K: Kind>(py: Python<'_>, tensor: Managed<K>) -> PyResult<Bound<'_, PyCapsule>> {
    crate::pyo3_glue::runtime::shared_registry::join(py)?;
    let versioned = tensor.is_versioned();
    let (name, _) = names(versioned);
    if !versioned && tensor.is_read_only() {
        return Err(legacy_read_only_error());
    }
    let (raw, _) = tensor.into_raw_parts();
    let destructor = if versioned {
        capsule_destructor::<true> as unsafe extern "C" fn(*mut ffi::PyObject)
    } else {
        capsule_destructor::<false>
    };
    // SAFETY: `raw` is a valid, owned, non-NULL struct of the kind `name` says; the destructor
    // frees it unless a consumer renamed the capsule.
    let capsule =
        unsafe { PyCapsule::new_with_pointer_and_destructor(py, raw, name, Some(destructor)) };
    if capsule.is_err() {
        // SAFETY: no capsule was made, so `raw` is still ours alone, from `into_raw_parts`.
        unsafe { Managed::<K>::drop_raw_parts(raw, versioned) };
    }
    capsule
}

/// The `BufferError` for read-only data asked for as a legacy capsule (which cannot say so).
pub(crate) fn legacy_read_only_error() -> PyErr {
    pyo3::exceptions::PyBufferError::new_err(
        "cannot export read-only data as a legacy DLPack capsule (it cannot signal read-only); \
         ask for max_version=(1, x)",
    )
}

/// Takes the managed tensor out of a DLPack capsule, renamed `used_...` before anything can fail
/// (consumed: `ValueError`; another name: `TypeError`; unreadable: `BufferError`).
/// # Safety
/// The caller vouches that a `"dltensor"` / `"dltensor_versioned"` capsule holds a
/// `DLManagedTensor` / `DLManagedTensorVersioned` that keeps the DLPack contract.
pub(crate) unsafe fn consume_capsule(capsule: &Bound<'_, PyCapsule>) -> PyResult<AnyManaged> {
    // One critical section, so that two free-threaded consumers cannot both take the capsule.
    let (versioned, raw) =
        pyo3::sync::critical_section::with_critical_section(capsule.as_any(), || {
            take_ownership(capsule)
        })?;
    let result = if versioned {
        // SAFETY: the caller vouches for a DLManagedTensorVersioned, which the rename made ours
        // alone; from_raw checks the major version first and calls the deleter on any error.
        unsafe { ManagedTensorVersioned::from_raw(raw.as_ptr().cast()) }.map(AnyManaged::from)
    } else {
        // SAFETY: as above, for a "dltensor" capsule and a DLManagedTensor.
        unsafe { ManagedTensor::from_raw(raw.as_ptr().cast()) }.map(AnyManaged::from)
    };
    result.map_err(PyErr::from)
}

/// Renames the capsule to its `used_` name: whether it is versioned, and its pointer.
fn take_ownership(capsule: &Bound<'_, PyCapsule>) -> PyResult<(bool, NonNull<c_void>)> {
    let name: Option<&CStr> = capsule.name().ok().flatten().map(|n| {
        // SAFETY: the name of a capsule we hold, alive while it is: compared, never kept.
        unsafe { n.as_cstr() }
    });
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
    let (name, used) = names(versioned);
    let raw = capsule.pointer_checked(Some(name))?;
    // After the rename the producer's capsule destructor leaves the tensor alone.
    // SAFETY: a live capsule, the GIL held, and a 'static name.
    if !unsafe { cpython::capsule_rename(capsule.as_ptr(), used) } {
        return Err(PyErr::fetch(capsule.py()));
    }
    Ok((versioned, raw))
}
