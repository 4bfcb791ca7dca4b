//! How errors of the safe layer surface in Python: the exception the DLPack protocol names.

use pyo3::exceptions::{PyBufferError, PyMemoryError, PyTypeError};
use pyo3::PyErr;

use crate::safe::Error;

/// Converts a safe-layer error into the Python exception the protocol names:
/// `TypeError` when a typed view asked for the wrong element type, `MemoryError` when memory
/// ran out, `BufferError` for everything else: data that cannot be described, read, or
/// exported as asked, and a view refused by the borrow registry
/// ([`Error::AlreadyBorrowed`]).
///
/// ```
/// use dlpack_rs::safe::Error;
/// use pyo3::exceptions::PyBufferError;
/// use pyo3::prelude::*;
///
/// Python::initialize();
/// Python::attach(|py| {
///     let err: PyErr = Error::ReadOnly.into();
///     assert!(err.is_instance_of::<PyBufferError>(py));
/// });
/// ```
impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        let message = err.to_string();
        match err {
            Error::DtypeMismatch { .. } | Error::NotPacked(_) => PyTypeError::new_err(message),
            Error::OutOfMemory => PyMemoryError::new_err(message),
            _ => PyBufferError::new_err(message),
        }
    }
}
