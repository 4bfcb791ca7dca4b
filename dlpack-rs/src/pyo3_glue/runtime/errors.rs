//! How errors of the safe layer surface in Python: the exception the DLPack protocol names.

use pyo3::exceptions::{PyBufferError, PyMemoryError, PySystemError, PyTypeError, PyValueError};
use pyo3::{PyErr, Python};

use crate::ffi::DLDataType;
use crate::safe::Error;

/// Converts a safe-layer error to the Python exception the protocol names: `TypeError` for a dtype
/// mismatch or `NotPacked`, `ValueError` for `Unserializable`, `MemoryError`, else `BufferError`.
///
/// ```
/// use dlpack_rs::safe::Error;
/// use pyo3::exceptions::PyBufferError;
/// use pyo3::prelude::*;
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
            Error::DtypeMismatch { expected, found } => PyTypeError::new_err(format!(
                "dtype mismatch: {}",
                dtype_message(&[expected], found)
            )),
            Error::NotPacked(_) => PyTypeError::new_err(message),
            Error::Unserializable(_) => PyValueError::new_err(message),
            Error::NotHostAccessible(_) => PyBufferError::new_err(format!(
                "expected a tensor in CPU memory: {message}; copy it to the host first \
                 (x.cpu() in torch, jax.device_get(x) in jax)"
            )),
            Error::OutOfMemory => PyMemoryError::new_err(message),
            _ => PyBufferError::new_err(message),
        }
    }
}

/// A dtype mismatch message in Python's names, with the conversion that fixes it.
pub(crate) fn dtype_message(wanted: &[DLDataType], got: DLDataType) -> String {
    let first = wanted.first().copied().unwrap_or(got);
    let name = first.name();
    // A conversion hint only where numpy and torch both have the name.
    let hint = if first.numpy_has() {
        format!(" (convert it first, e.g. x.astype(\"{name}\") in numpy or x.to(torch.{name}) in torch)")
    } else if first.fixed_name().is_some() {
        // bfloat16, FP8, FP4: torch and jax have them; numpy cannot pass them over DLPack.
        format!(
            " (convert it first, e.g. x.to(torch.{name}) in torch or x.astype(jnp.{name}) in jax)"
        )
    } else {
        String::new()
    };
    let names: Vec<String> = wanted.iter().map(|d| d.name().to_string()).collect();
    let list = match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    };
    format!("expected a tensor of {list}, got {}{hint}", got.name())
}

/// Extents or strides as Python writes a tuple (`(5,)`, `(*, *, 3)` for `None`).
pub(crate) fn tuple_str(values: impl Iterator<Item = Option<i64>>) -> String {
    let parts: alloc::vec::Vec<String> = values
        .map(|v| v.map_or_else(|| "*".into(), |v| v.to_string()))
        .collect();
    match parts.as_slice() {
        [one] => format!("({one},)"),
        _ => format!("({})", parts.join(", ")),
    }
}

/// [`tuple_str`] of known values.
pub(crate) fn tuple_of(values: &[i64]) -> String {
    tuple_str(values.iter().map(|&v| Some(v)))
}

/// The exception a failed exchange-table call left (`SystemError` if none).
pub(crate) fn pending_error(py: Python<'_>, function: &str) -> PyErr {
    PyErr::take(py).unwrap_or_else(|| {
        PySystemError::new_err(format!(
            "__dlpack_c_exchange_api__: {function} failed without setting an exception"
        ))
    })
}

#[cfg(test)]
mod examples {
    use crate::ffi::{DLDataType, DLDataTypeCode};

    #[test]
    fn python_names() {
        let e5m2fnuz = DLDataType::new(DLDataTypeCode::FLOAT8_E5M2FNUZ, 8, 1);
        assert_eq!(e5m2fnuz.name().to_string(), "float8_e5m2fnuz");
        assert_eq!(
            DLDataType::FLOAT4_E2M1FN.name().to_string(),
            "float4_e2m1fn"
        );
    }
}
