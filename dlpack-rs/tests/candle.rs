//! candle tensors both ways (feature `candle`), with the real numpy, torch and jax in an
//! embedded interpreter: the test command's `candle` step runs this with the suite's packages
//! on `PYTHONPATH`.
#![cfg(all(feature = "candle", feature = "pyo3"))]

use candle_core::{CpuStorage, DType, Device, Storage, Tensor};
use dlpack_rs::ffi::{DLDataType, DLDeviceType};
use dlpack_rs::pyo3_glue::PyTensor;
use dlpack_rs::safe::{Error, ManagedTensorVersioned, SharedMut};
use dlpack_rs::IntoDLPack;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

mod embedded_py;
use embedded_py::{eval, hand, managed, with_py};

/// The address of `t`'s first element in candle's storage.
fn first_address(t: &Tensor) -> usize {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(CpuStorage::F32(v)) = &*storage else {
        panic!("a CPU f32 tensor")
    };
    v[layout.start_offset()..].as_ptr() as usize
}

#[test]
fn shared_candle_tensor_is_torch_memory_read_only() {
    with_py(|py| {
        let t = Tensor::arange(0f32, 12.0, &Device::Cpu)?.reshape((3, 4))?;
        // SAFETY: `t` and its clones are not written in this test; torch only reads.
        let mut shared = unsafe { ManagedTensorVersioned::share_candle(&t) }?;
        assert!(shared.is_read_only());
        assert!(matches!(shared.as_mut_slice::<f32>(), Err(Error::ReadOnly)));
        let x = hand(py, "torch", shared)?;
        let ptr: usize = x.call_method0("data_ptr")?.extract()?;
        assert_eq!(ptr, first_address(&t));
        let values: Vec<Vec<f32>> = x.call_method0("tolist")?.extract()?;
        assert_eq!(values, t.to_vec2::<f32>()?);
        Ok(())
    })
}

#[test]
fn strided_and_offset_candle_views_keep_their_layout() {
    with_py(|py| {
        let base = Tensor::arange(0f32, 24.0, &Device::Cpu)?.reshape((4, 6))?;
        // Rows 1..3, transposed: a start offset and non-compact strides.
        let view = base.narrow(0, 1, 2)?.t()?;
        let want = view.to_vec2::<f32>()?;
        // SAFETY: nothing writes `base` while the export lives.
        let shared = unsafe { ManagedTensorVersioned::share_candle(&view) }?;
        assert_eq!(shared.shape(), &[6, 2]);
        assert_eq!(&*shared.strides(), &[1, 6]);
        let x = hand(py, "numpy", shared)?;
        let ptr: usize = eval(py, c"x.ctypes.data", &x)?.extract()?;
        assert_eq!(ptr, first_address(&view));
        assert_eq!(
            eval(py, c"x.tolist()", &x)?.extract::<Vec<Vec<f32>>>()?,
            want
        );
        // A broadcast view copies into compact storage.
        let row = Tensor::new(&[1f32, 2.0, 3.0], &Device::Cpu)?.broadcast_as((2, 3))?;
        let copy = ManagedTensorVersioned::try_from(&row)?;
        assert!(copy.is_copied() && copy.is_contiguous() && !copy.is_read_only());
        assert_eq!(*copy.as_slice::<f32>()?, [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
        Ok(())
    })
}

#[test]
fn candle_to_torch_and_back_by_copy() {
    with_py(|py| {
        let t = Tensor::arange(0f32, 6.0, &Device::Cpu)?
            .reshape((2, 3))?
            .t()?;
        let x = hand(py, "torch", ManagedTensorVersioned::try_from(&t)?)?;
        let ptr: usize = x.call_method0("data_ptr")?.extract()?;
        assert_ne!(ptr, first_address(&t));
        assert_eq!(ptr % 64, 0);
        // Back from a strided torch view: x.T[:, 1:] is (2, 2) with strides (1, 2).
        let y = eval(py, c"x.T[:, 1:] * 10", &x)?;
        let y = eval(py, c"x.T", &y)?;
        let imported = PyTensor::from_pyany(py, &y)?;
        let back = Tensor::try_from(&*imported)?;
        assert_eq!(back.to_vec2::<f32>()?, [[10.0, 40.0], [20.0, 50.0]]);
        Ok(())
    })
}

#[test]
fn bfloat16_both_ways_with_torch_and_jax() {
    with_py(|py| {
        let t = Tensor::new(&[1.5f32, -2.0, 0.25], &Device::Cpu)?.to_dtype(DType::BF16)?;
        let x = hand(py, "torch", ManagedTensorVersioned::try_from(&t)?)?;
        assert_eq!(
            eval(py, c"str(x.dtype)", &x)?.extract::<String>()?,
            "torch.bfloat16"
        );
        let back = Tensor::try_from(&*PyTensor::from_pyany(py, &eval(py, c"x * 2", &x)?)?)?;
        assert_eq!(back.dtype(), DType::BF16);
        assert_eq!(
            back.to_dtype(DType::F32)?.to_vec1::<f32>()?,
            [3.0, -4.0, 0.5]
        );
        let j = hand(py, "jax.numpy", ManagedTensorVersioned::try_from(&t)?)?;
        assert_eq!(
            eval(py, c"str(x.dtype)", &j)?.extract::<String>()?,
            "bfloat16"
        );
        let back = Tensor::try_from(&*PyTensor::from_pyany(py, &j)?)?;
        assert_eq!(
            back.to_dtype(DType::F32)?.to_vec1::<f32>()?,
            [1.5, -2.0, 0.25]
        );
        Ok(())
    })
}

#[test]
fn numpy_and_jax_round_trips_keep_values() {
    with_py(|py| {
        for (module, make) in [
            (
                "numpy",
                c"__import__('numpy').arange(12, dtype='int64').reshape(3, 4)[::2, ::-1]",
            ),
            (
                "jax",
                c"__import__('jax.numpy').numpy.arange(6, dtype='int32').reshape(2, 3)",
            ),
        ] {
            let x = py.eval(make, None, None)?;
            let t = Tensor::try_from(&*PyTensor::from_pyany(py, &x)?)?;
            let want: Vec<Vec<i64>> = eval(py, c"x.tolist()", &x)?.extract()?;
            let got: Vec<Vec<i64>> = t.to_dtype(DType::I64)?.to_vec2::<i64>()?;
            assert_eq!(got, want, "{module}");
            let again = hand(py, "numpy", ManagedTensorVersioned::try_from(&t)?)?;
            assert_eq!(
                eval(py, c"x.tolist()", &again)?.extract::<Vec<Vec<i64>>>()?,
                want
            );
        }
        Ok(())
    })
}

#[test]
fn refusals_name_what_to_do() {
    with_py(|py| {
        // A dtype candle lacks: numpy int8 (a ValueError in Python).
        let x = py.eval(c"__import__('numpy').zeros(3, dtype='int8')", None, None)?;
        let err = Tensor::try_from(&*PyTensor::from_pyany(py, &x)?).unwrap_err();
        assert!(
            err.to_string().contains("candle has no int8 tensors"),
            "{err}"
        );
        assert!(PyErr::from(err).is_instance_of::<PyValueError>(py));
        // Device memory: a tensor described on CUDA host memory is not read.
        let t = managed(
            vec![0; 8],
            DLDeviceType::CUDA_HOST,
            DLDataType::FLOAT32,
            vec![2],
        );
        assert!(matches!(
            Tensor::try_from(&t),
            Err(Error::NotHostAccessible(_))
        ));
        drop(t);
        // A mutable view of the source blocks the copy (registry borrow).
        let data = SharedMut::from_slice(&[1f32, 2.0])?;
        let m = data.clone().into_managed_tensor_versioned()?;
        let w = data.write()?;
        assert!(matches!(
            Tensor::try_from(&m),
            Err(Error::AlreadyBorrowed { .. })
        ));
        drop(w);
        assert_eq!(Tensor::try_from(&m)?.to_vec1::<f32>()?, [1.0, 2.0]);
        // candle's sub-byte dtypes have no export.
        let f4 = Tensor::from_raw_buffer(&[0u8, 1], DType::F4, &[2], &Device::Cpu)?;
        let err = ManagedTensorVersioned::try_from(&f4).unwrap_err();
        assert!(
            err.to_string().contains("F4 tensors hold raw bytes"),
            "{err}"
        );
        // SAFETY: nothing is exported.
        let err = unsafe { ManagedTensorVersioned::share_candle(&f4) }.unwrap_err();
        assert!(matches!(err, Error::Unserializable(_)));
        Ok(())
    })
}
