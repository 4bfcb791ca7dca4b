//! One-time values that may run Python code to be made.

use core::convert::Infallible;

use pyo3::sync::PyOnceLock;
use pyo3::Python;

/// The value of `cell`, made by an idempotent `init` run outside the cell's lock.
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
    // may run finalizers inside the cell's lock. A value stored first wins; ours is dropped.
    drop(cell.set(py, value));
    match cell.get(py) {
        Some(value) => Ok(value),
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
