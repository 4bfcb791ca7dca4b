//! One-time values that may run Python code to be made.

use pyo3::sync::PyOnceLock;
use pyo3::Python;

/// The value of `cell`, made by `init` when there is none yet. Unlike
/// `PyOnceLock::get_or_try_init`, `init` runs outside the cell's lock: it may run Python code
/// (an import, an allocation that starts a garbage collection) whose finalizers call back into
/// this crate and ask for the same cell, which would wait there for itself for good. Every
/// `init` given must be idempotent: should two run (one re-entered from the other, or on two
/// threads), the value stored first is kept and the other dropped.
pub(crate) fn get_or_try_init<'a, T, E>(
    cell: &'a PyOnceLock<T>,
    py: Python<'_>,
    init: impl FnOnce() -> Result<T, E>,
) -> Result<&'a T, E> {
    if let Some(value) = cell.get(py) {
        return Ok(value);
    }
    let value = init()?;
    // Stores `value` unless another initialisation finished meanwhile (no Python code runs
    // here, so nothing can re-enter).
    Ok(cell.get_or_init(py, || value))
}
