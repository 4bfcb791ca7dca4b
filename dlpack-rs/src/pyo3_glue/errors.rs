//! How errors of the safe layer surface in Python: the exception the DLPack protocol names.

use pyo3::exceptions::{PyBufferError, PyMemoryError, PyTypeError};
use pyo3::PyErr;

use crate::safe::Error;

/// Converts a safe-layer error into the Python exception the protocol names:
/// `TypeError` when a typed view asked for the wrong element type (in Python's names:
/// `dtype mismatch: expected a tensor of float32, got float64 (convert it first, ...)`), `MemoryError` when memory
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
            // In the names Python users write, as the typed arguments say it.
            Error::DtypeMismatch { expected, found } => PyTypeError::new_err(format!(
                "dtype mismatch: {}",
                super::extract::dtype_message(&[expected], found)
            )),
            Error::NotPacked(_) => PyTypeError::new_err(message),
            Error::NotHostAccessible(_) => PyBufferError::new_err(format!(
                "expected a tensor in CPU memory: {message}; copy it to the host first \
                 (x.cpu() in torch, jax.device_get(x) in jax)"
            )),
            Error::OutOfMemory => PyMemoryError::new_err(message),
            _ => PyBufferError::new_err(message),
        }
    }
}
