//! How every extension module in the process shares one borrow registry: the first copy of
//! this crate to touch Python publishes its table in a capsule, later copies adopt it.
//!
//! The capsule is named `"dlpack_rs.borrow_registry"` and sits at
//! `sys.modules["_dlpack_rs_shared"].borrow_registry` (a module object made for it, so nothing
//! that walks `sys.modules` finds a stranger there). It points at the C table of
//! `safe::borrow` (`version: u64`, `state`, `acquire`, `release`; later versions only append),
//! so modules built against different releases of this crate see each other's borrows. A
//! table of a version this crate does not read is ignored (this copy keeps its own).
//!
//! Trust: like numpy's C API capsule (and rust-numpy's borrow capsule), the capsule is believed
//! to be what its name says; code that plants a forged one in `sys.modules` is outside the
//! model.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyModule};

use crate::safe::borrow::{self, BorrowApi, BORROW_API_VERSION};

const MODULE: &str = "_dlpack_rs_shared";
const ATTR: &str = "borrow_registry";
const CAPSULE_NAME: &core::ffi::CStr = c"dlpack_rs.borrow_registry";

/// Set once this copy has joined the process-wide registry (or given up trying).
static JOINED: AtomicBool = AtomicBool::new(false);

/// Makes this copy's borrows go to the process-wide registry, publishing this copy's own table
/// when there is none yet. Cheap after the first call (one atomic load).
pub(crate) fn join(py: Python<'_>) {
    if JOINED.load(Ordering::Acquire) {
        return;
    }
    if let Some(api) = find_or_publish(py) {
        // SAFETY: `api` is a table of a copy of this crate (the capsule's name says so, see the
        // module's trust note) of a version we read; it lives in an extension module, which
        // CPython never unloads, so it lives for the rest of the process.
        unsafe { borrow::install(api) };
    } else {
        let _ = PyErr::take(py);
    }
    JOINED.store(true, Ordering::Release);
}

fn find_or_publish(py: Python<'_>) -> Option<&'static BorrowApi> {
    let modules = py.import("sys").ok()?.getattr("modules").ok()?;
    let ours = PyModule::new(py, MODULE).ok()?;
    let api = borrow::local_api();
    // SAFETY: the table is a `static` of this crate, immutable, and lives for the process; the
    // capsule owns nothing and has no destructor.
    let capsule = unsafe {
        PyCapsule::new_with_pointer(py, core::ptr::NonNull::from(api).cast(), CAPSULE_NAME)
    }
    .ok()?;
    ours.setattr(ATTR, capsule).ok()?;
    // `dict.setdefault` is atomic (also without the GIL): whichever module got there first wins.
    let shared = modules.call_method1("setdefault", (MODULE, ours)).ok()?;
    let capsule = shared.getattr(ATTR).ok()?;
    let capsule = capsule.cast::<PyCapsule>().ok()?;
    let ptr = capsule.pointer_checked(Some(CAPSULE_NAME)).ok()?;
    // SAFETY: a capsule of this name points at a live `BorrowApi` (see the module's trust
    // note); its version field is valid in every version of the table.
    let table = unsafe { ptr.cast::<BorrowApi>().as_ref() };
    (table.version >= BORROW_API_VERSION).then_some(table)
}
