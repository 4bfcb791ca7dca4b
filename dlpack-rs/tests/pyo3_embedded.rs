//! The pyo3 layer tested from Rust with an embedded interpreter: the `__dlpack__` arguments,
//! capsule consumption, the borrow registry across an export and an import, and the read-only
//! rule for legacy imports, without building a Python extension.
#![cfg(feature = "pyo3")]

use dlpack_rs::pyo3_glue::{DLPackTensor, ImportOptions, PyTensor};
use dlpack_rs::safe::{Error, Export};
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

fn with_py<R>(f: impl FnOnce(Python<'_>) -> PyResult<R>) -> R {
    Python::initialize();
    Python::attach(|py| f(py).unwrap())
}

fn tensor(py: Python<'_>, values: Vec<f32>) -> PyResult<Bound<'_, DLPackTensor>> {
    Bound::new(py, DLPackTensor::from_export(Export::new(values))?)
}

/// A legacy `"dltensor"` capsule of `values`, from `dlpack_rs.Tensor.__dlpack__()`.
fn legacy_capsule<T: dlpack_rs::safe::Element>(
    py: Python<'_>,
    values: Vec<T>,
) -> PyResult<Bound<'_, PyCapsule>> {
    let t = Bound::new(py, DLPackTensor::from_export(Export::new(values))?)?;
    Ok(t.call_method0("__dlpack__")?.cast_into::<PyCapsule>()?)
}

#[test]
fn dlpack_arguments_raise_what_the_protocol_names() {
    with_py(|py| {
        let t = tensor(py, vec![1.0])?;
        let call = |key: &str, value: Bound<'_, PyAny>| {
            let kwargs = PyDict::new(py);
            kwargs.set_item(key, value)?;
            t.call_method("__dlpack__", (), Some(&kwargs))
        };
        let bad_version = (1, 2, 3).into_pyobject(py)?.into_any();
        let err = call("max_version", bad_version).unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py));
        let bad_copy = 1i64.into_pyobject(py)?.into_any();
        let err = call("copy", bad_copy).unwrap_err();
        assert!(err.is_instance_of::<PyValueError>(py));
        let huge = (1i64 << 40, 0).into_pyobject(py)?.into_any();
        let err = call("max_version", huge).unwrap_err();
        assert!(err.is_instance_of::<PyValueError>(py));
        let versioned = call("max_version", (1, 3).into_pyobject(py)?.into_any())?;
        let capsule = versioned.cast_into::<PyCapsule>()?;
        // SAFETY: the capsule is alive for the whole call, and with it the name it points at.
        assert_eq!(
            capsule.name()?.map(|n| unsafe { n.as_cstr() }.to_owned()),
            Some(c"dltensor_versioned".to_owned())
        );
        Ok(())
    })
}

#[test]
fn dunder_dlpack_gives_the_capsule_asked_for() {
    with_py(|py| {
        let t = tensor(py, vec![1.0, 2.0])?;
        let legacy = t.call_method0("__dlpack__")?;
        let name = |c: &Bound<'_, PyAny>| -> PyResult<String> {
            let c = c.cast::<PyCapsule>()?;
            // SAFETY: the name of a live capsule, read while it lives.
            Ok(unsafe { c.name()?.unwrap().as_cstr() }
                .to_string_lossy()
                .into_owned())
        };
        assert_eq!(name(&legacy)?, "dltensor");
        let kwargs = PyDict::new(py);
        kwargs.set_item("max_version", (1, 0))?;
        let versioned = t.call_method("__dlpack__", (), Some(&kwargs))?;
        assert_eq!(name(&versioned)?, "dltensor_versioned");
        kwargs.set_item("stream", 5)?;
        let err = t.call_method("__dlpack__", (), Some(&kwargs)).unwrap_err();
        assert!(
            err.is_instance_of::<PyValueError>(py),
            "CPU data takes stream=None only"
        );
        Ok(())
    })
}

#[test]
fn bare_capsules_need_the_unsafe_entry_point() {
    with_py(|py| {
        let capsule = legacy_capsule(py, vec![7u8, 8])?;
        let err = PyTensor::from_pyany(py, capsule.as_any()).unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py));
        // SAFETY: `__dlpack__()` just made this "dltensor" capsule of a DLManagedTensor.
        let t = unsafe { PyTensor::from_capsule(&capsule) }?;
        assert_eq!(t.as_slice::<u8>()?, &[7, 8]);
        // Legacy: read-only unless asked otherwise.
        assert!(t.is_read_only());
        // Consumed once: a second take raises ValueError.
        // SAFETY: as above (the capsule now carries its used_ name).
        let again = unsafe { PyTensor::from_capsule(&capsule) }.unwrap_err();
        assert!(again.is_instance_of::<PyValueError>(py));
        Ok(())
    })
}

#[test]
fn an_import_cannot_write_while_the_owner_reads() {
    with_py(|py| {
        let t = tensor(py, vec![1.0, 2.0, 3.0])?;
        let read = t.get().tensor().as_slice::<f32>()?;
        let mut imported = PyTensor::from_pyany(py, t.as_any())?;
        assert_eq!(
            imported.as_mut_slice::<f32>().unwrap_err(),
            Error::AlreadyBorrowed { exclusive: true }
        );
        let err: PyErr = imported.as_mut_slice::<f32>().unwrap_err().into();
        assert!(err.is_instance_of::<PyBufferError>(py));
        drop(read);
        imported.as_mut_slice::<f32>()?[0] = 10.0;
        assert_eq!(t.get().tensor().as_slice::<f32>()?[0], 10.0);
        // Two imports of the one object alias: the second mutable view is refused.
        let mut second = ImportOptions::new()
            .exchange_api(false)
            .import(t.as_any())?;
        let w = imported.as_mut_slice::<f32>()?;
        assert!(second.as_mut_slice::<f32>().is_err());
        drop(w);
        assert!(second.as_mut_slice::<f32>().is_ok());
        Ok(())
    })
}

#[test]
fn a_read_only_reexport_stays_read_only() {
    with_py(|py| {
        let capsule = legacy_capsule(py, vec![1u16, 2])?;
        // SAFETY: made just above by `__dlpack__()`.
        let imported = unsafe { PyTensor::from_capsule(&capsule) }?;
        let again = Bound::new(py, DLPackTensor::from(imported))?;
        assert!(again.getattr("read_only")?.extract::<bool>()?);
        // A legacy request of read-only data: a copy when copy=None, refused with copy=False.
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("copy", false)?;
        let err = again
            .call_method("__dlpack__", (), Some(&kwargs))
            .unwrap_err();
        assert!(
            err.is_instance_of::<PyBufferError>(py),
            "no zero-copy legacy export of read-only data"
        );
        let copy = again.call_method0("__dlpack__")?;
        // SAFETY: made just above by our own `__dlpack__`.
        let copy = unsafe { PyTensor::from_capsule(copy.cast::<pyo3::types::PyCapsule>()?) }?;
        assert_eq!(*copy.as_slice::<u16>()?, [1, 2]);
        assert_ne!(copy.data_ptr(), again.get().tensor().data_ptr());
        Ok(())
    })
}
