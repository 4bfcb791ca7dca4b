//! How every extension module in the process shares one borrow registry: the first copy of
//! this crate to touch Python publishes its table in a capsule, later copies adopt it.
//!
//! The capsule is named `"dlpack_rs.borrow_registry"` and sits in the interpreter's own state
//! dictionary (`PyInterpreterState_GetDict`, out of reach of Python code) under the same key.
//! It points at the C table of
//! `safe::borrow` (`version: u64`, `state`, `acquire`, `release`; later versions only append),
//! so modules built against different releases of this crate see each other's borrows. A
//! table of a version this crate does not read is ignored (this copy keeps its own).
//!
//! Joining fails closed: if the table cannot be found or published, the import or export that
//! asked raises and this copy tries again next time (its borrows stay in its own table, which
//! moves them over when it joins). Trust: the capsule is believed to be what its name says (as
//! numpy's C API capsule is); native code that plants a forged one is outside the model. The
//! dictionary is per interpreter: copies of the crate share one table per interpreter.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::PySystemError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use crate::safe::borrow::{self, BorrowApi, BORROW_API_VERSION};

const KEY: &str = "dlpack_rs.borrow_registry";
const CAPSULE_NAME: &core::ffi::CStr = c"dlpack_rs.borrow_registry";

/// Set once this copy has joined the shared registry.
static JOINED: AtomicBool = AtomicBool::new(false);

/// Makes this copy's borrows go to the registry shared by every copy of this crate in the
/// interpreter, publishing this copy's own table when there is none yet. Cheap after the first
/// success (one atomic load); raises (and joins nothing) when the table cannot be had.
pub(crate) fn join(py: Python<'_>) -> PyResult<()> {
    if JOINED.load(Ordering::Acquire) {
        return Ok(());
    }
    let api = find_or_publish(py)?;
    // SAFETY: `api` is a table of a copy of this crate (the capsule's name says so, see the
    // module's trust note) of a version we read; it lives in an extension module, which CPython
    // never unloads, and no copy's table calls into another's but through `install`'s forwarding.
    unsafe { borrow::install(api) };
    JOINED.store(true, Ordering::Release);
    Ok(())
}

fn find_or_publish(py: Python<'_>) -> PyResult<&'static BorrowApi> {
    // SAFETY: attached (we hold `py`): the interpreter's state dictionary is a borrowed
    // reference that lives as long as the interpreter.
    let dict = unsafe {
        let raw = pyo3::ffi::PyInterpreterState_GetDict(pyo3::ffi::PyInterpreterState_Get());
        if raw.is_null() {
            return Err(PySystemError::new_err(
                "dlpack-rs: no interpreter state dictionary for the borrow registry",
            ));
        }
        Bound::from_borrowed_ptr(py, raw)
    };
    let dict = dict.cast::<PyDict>()?;
    let api = borrow::local_api();
    // SAFETY: the table is a `static` of this crate, immutable, and lives for the process; the
    // capsule owns nothing and has no destructor.
    let ours = unsafe {
        PyCapsule::new_with_pointer(py, core::ptr::NonNull::from(api).cast(), CAPSULE_NAME)
    }?;
    // `dict.setdefault` is atomic (also without the GIL): whichever copy got there first wins.
    let shared = dict.call_method1("setdefault", (KEY, ours))?;
    let capsule = shared.cast::<PyCapsule>()?;
    let ptr = capsule.pointer_checked(Some(CAPSULE_NAME))?;
    // SAFETY: a capsule of this name points at a live `BorrowApi` (see the module's trust
    // note); its version field is valid in every version of the table.
    let table = unsafe { ptr.cast::<BorrowApi>().as_ref() };
    if table.version < BORROW_API_VERSION {
        return Err(PySystemError::new_err(format!(
            "dlpack-rs: the shared borrow registry has version {}, this copy needs {}",
            table.version, BORROW_API_VERSION
        )));
    }
    Ok(table)
}
