//! One-time values that may run Python code to be made.

use core::convert::Infallible;

use pyo3::sync::PyOnceLock;
use pyo3::Python;

/// The value of `cell`, made by `init` if there is none. Unlike `PyOnceLock::get_or_try_init`,
/// `init` runs outside the cell's lock: it may run Python code (an import, a GC) whose
/// finalizers ask for the same cell, which would then wait for itself forever. `init` must be
/// idempotent: if two run (re-entered or on two threads), the first value stored is kept. Every
/// value in these cells goes through here, so a store never waits on Python code.
pub(crate) fn get_or_try_init<'a, T, E>(
    cell: &'a PyOnceLock<T>,
    py: Python<'_>,
    init: impl FnOnce() -> Result<T, E>,
) -> Result<&'a T, E> {
    if let Some(value) = cell.get(py) {
        return Ok(value);
    }
    let value = init()?;
    // `set`, not `get_or_init`: pyo3 detaches while it initialises a cell, and attaching again
    // may run deferred reference drops (finalizers) inside the cell's lock. A value another
    // initialisation stored first wins; ours is dropped here (pyo3 defers releasing a `Py` when
    // its own attach count is 0, as in a raw C entry point; nothing stored here has a finalizer).
    drop(cell.set(py, value));
    match cell.get(py) {
        Some(value) => Ok(value),
        // `set` returned: the cell holds ours or the other's.
        None => unreachable!("a PyOnceLock is empty after set"),
    }
}

/// [`get_or_try_init`] for a value whose making cannot fail.
pub(crate) fn get_or_init<'a, T>(
    cell: &'a PyOnceLock<T>,
    py: Python<'_>,
    init: impl FnOnce() -> T,
) -> &'a T {
    match get_or_try_init(cell, py, || Ok::<T, Infallible>(init())) {
        Ok(value) => value,
        Err(never) => match never {},
    }
}
