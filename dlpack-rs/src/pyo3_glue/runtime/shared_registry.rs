//! One borrow registry for every extension module: the first copy of this crate publishes its
//! table as the capsule `"dlpack_rs.borrow_registry"` in the interpreter's state dictionary.
//! Later copies adopt it (SAFETY.md). Trust: a forged capsule of that name is outside the model.

use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};

use pyo3::exceptions::{PyBufferError, PySystemError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use crate::pyo3_glue::runtime::cpython;
use crate::safe::borrow::{self, BorrowApi, BORROW_API_VERSION};

const KEY: &str = "dlpack_rs.borrow_registry";
const CAPSULE_NAME: &core::ffi::CStr = c"dlpack_rs.borrow_registry";

/// 0: not joined; 1: a thread is installing the table; 2: joined (in `JOINED_IN`).
static STATE: AtomicU8 = AtomicU8::new(0);
/// The interpreter (its ID) whose dictionary this copy joined through.
static JOINED_IN: AtomicI64 = AtomicI64::new(-1);

/// Joins (or publishes) the registry every copy shares in the interpreter.
pub(crate) fn join(py: Python<'_>) -> PyResult<()> {
    if STATE.load(Ordering::Acquire) != 2 {
        // Every export reaches Python after a join: its deleter's keepalive dropper is in place.
        // Installed alone, importing nothing (a first `import atexit` would run importlib's
        // bytecode, and with it a garbage collection, inside the caller's call).
        crate::pyo3_glue::runtime::keepalive::install_dropper();
        // The table first, outside the claim: finding it runs Python code, which may join again.
        // Idempotent: a re-entered or concurrent join finds the same table (`setdefault`).
        let api = find_or_publish(py, borrow::current_api())?;
        loop {
            match STATE.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    // SAFETY: a table of a copy of this crate (by the capsule's name; see the
                    // trust note), of a version we read, in a module CPython never unloads; a
                    // copy that published its own never installs another, so no cycle.
                    let joined = unsafe { borrow::install(api) }.map_err(|e| {
                        PyBufferError::new_err(format!(
                            "dlpack-rs: cannot join the shared borrow registry ({e:?}): a live \
                             view of this module conflicts with another module's"
                        ))
                    });
                    if joined.is_ok() {
                        // SAFETY: `py`: attached (as for `PyKeepalive::new`).
                        JOINED_IN.store(unsafe { cpython::interpreter_id() }, Ordering::Relaxed);
                    }
                    STATE.store(if joined.is_ok() { 2 } else { 0 }, Ordering::Release);
                    return joined;
                }
                Err(2) => break,
                // Another thread is installing (Rust only, no Python code): let it finish.
                Err(_) => py.detach(std::thread::yield_now),
            }
        }
    }
    // SAFETY: as above.
    if JOINED_IN.load(Ordering::Relaxed) == unsafe { cpython::interpreter_id() } {
        return Ok(());
    }
    // Another interpreter: the table published there must be the one this copy uses.
    let ours = borrow::current_api();
    if core::ptr::eq(find_or_publish(py, ours)?, ours) {
        Ok(())
    } else {
        Err(PyBufferError::new_err(
            "dlpack-rs: this interpreter's borrow registry is not the one this module uses \
             (it was imported first in another interpreter): views refused",
        ))
    }
}

fn find_or_publish(py: Python<'_>, api: &'static BorrowApi) -> PyResult<&'static BorrowApi> {
    // SAFETY: attached (`py`); the state dictionary is a borrowed reference the interpreter keeps.
    let dict = unsafe {
        let raw = crate::pyo3_glue::runtime::cpython::interpreter_dict();
        if raw.is_null() {
            return Err(PySystemError::new_err(
                "dlpack-rs: no interpreter state dictionary for the borrow registry",
            ));
        }
        Bound::from_borrowed_ptr(py, raw)
    };
    let dict = dict.cast::<PyDict>()?;
    // SAFETY: `api` is a static table (this copy's own, or the one it joined), immutable, that
    // lives for the process; the capsule owns nothing and has no destructor.
    let ours = unsafe {
        PyCapsule::new_with_pointer(py, core::ptr::NonNull::from(api).cast(), CAPSULE_NAME)
    }?;
    // `dict.setdefault` is atomic (also without the GIL): whichever copy got there first wins.
    let shared = dict.call_method1("setdefault", (KEY, ours))?;
    let capsule = shared.cast::<PyCapsule>()?;
    let ptr = capsule.pointer_checked(Some(CAPSULE_NAME))?;
    // SAFETY: a capsule of this name points at a live table of some version (see the module's
    // trust note); its version field is valid in every version of the table.
    let version = unsafe { ptr.cast::<u64>().read() };
    // Every table from version 2 on is read as ours: a new version must adapt to older ones.
    const _: () = assert!(BORROW_API_VERSION == 2, "older tables need adapting here");
    if version < 2 {
        // Versions 0 and 1 were never released (1 lacked the strided functions): refused
        // before the table is read as one of ours.
        return Err(PySystemError::new_err(format!(
            "dlpack-rs: the shared borrow registry has version {version}, this copy needs 2 or \
             later"
        )));
    }
    // SAFETY: a table of version 2 or later starts with every field of ours.
    Ok(unsafe { ptr.cast::<BorrowApi>().as_ref() })
}
