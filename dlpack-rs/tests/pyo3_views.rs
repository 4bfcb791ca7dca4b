//! The typed view arguments (features `pyo3` and `ndarray`) tested from Rust with an embedded
//! interpreter and `dlpack_rs.Tensor` as the producer: a transposed layout read through the
//! borrowed exchange-table route, the shape, layout and dtype-set refusals, and the exclusive
//! borrow of a writable view.
#![cfg(all(feature = "pyo3", feature = "ndarray"))]

use dlpack_rs::ndarray::{array, Ix2};
use dlpack_rs::pyo3_glue::{AnyOf2, CContig, DLPackTensor, Shape2, TensorView, TensorViewMut, ANY};
use dlpack_rs::safe::Export;
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;

fn with_py<R>(f: impl FnOnce(Python<'_>) -> PyResult<R>) -> R {
    Python::initialize();
    Python::attach(|py| f(py).unwrap())
}

/// A 2x3 float32 tensor `[[1, 2, 3], [4, 5, 6]]` seen transposed (3x2, strides 1, 3).
fn transposed(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let t = Export::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])
        .shape(&[3, 2])
        .strides(&[1, 3])
        .versioned()?;
    Ok(Bound::new(py, DLPackTensor::new(t))?.into_any())
}

#[test]
fn a_transposed_tensor_is_read_with_its_layout() {
    with_py(|py| {
        let obj = transposed(py)?;
        let v: TensorView<f32, Ix2> = obj.extract()?;
        assert_eq!(v.view(), array![[1.0f32, 4.0], [2.0, 5.0], [3.0, 6.0]]);
        assert_eq!(v.view().strides(), &[1, 3]);
        let fixed: TensorView<f32, Shape2<ANY, 2>> = obj.extract()?;
        assert_eq!(fixed.view().column(1).to_vec(), vec![4.0, 5.0, 6.0]);
        Ok(())
    })
}

#[test]
fn constraints_are_refused_with_the_expected_and_the_actual() {
    with_py(|py| {
        let obj = transposed(py)?;
        let err = obj
            .extract::<TensorView<f32, Shape2<2, ANY>>>()
            .unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py));
        assert_eq!(
            err.value(py).to_string(),
            "expected shape (2, *), got (3, 2)"
        );
        let err = obj.extract::<TensorView<f32, Ix2, CContig>>().unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py));
        assert!(err
            .value(py)
            .to_string()
            .ends_with("got shape (3, 2) with strides (1, 3)"));
        let err = obj.extract::<AnyOf2<u8, i32>>().unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py));
        assert!(err
            .value(py)
            .to_string()
            .starts_with("expected a tensor of uint8 or int32, got float32 "));
        assert!(matches!(obj.extract::<AnyOf2<u8, f32>>()?, AnyOf2::B(_)));
        Ok(())
    })
}

#[test]
fn a_writable_view_is_exclusive() {
    with_py(|py| {
        let obj = transposed(py)?;
        {
            let mut w: TensorViewMut<f32, Ix2> = obj.extract()?;
            w.view_mut()[[2, 1]] = 60.0;
            // No other view while the writable one lives.
            let err = obj.extract::<TensorView<f32>>().unwrap_err();
            assert!(err.is_instance_of::<PyBufferError>(py));
        }
        let v: TensorView<f32, Ix2> = obj.extract()?;
        assert_eq!(v.view()[[2, 1]], 60.0);
        let err = obj.extract::<TensorViewMut<f32, Ix2>>().unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py));
        Ok(())
    })
}
