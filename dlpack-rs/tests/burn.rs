//! burn's `TensorData` both ways (feature `burn`), with the real numpy, torch and jax in an
//! embedded interpreter: the test command's `candle` step runs this with the suite's packages
//! on `PYTHONPATH`.
#![cfg(all(feature = "burn", feature = "pyo3"))]

use std::mem::MaybeUninit;

use burn_std::{
    AccessError, AccessPolicy, AllocationController, AllocationProperty, BoolStore, Bytes, DType,
    SplitPolicy, TensorData,
};
use dlpack_rs::ffi::{DLDataType, DLDeviceType};
use dlpack_rs::pyo3_glue::PyTensor;
use dlpack_rs::safe::{Error, ManagedTensorVersioned, SharedMut};
use dlpack_rs::IntoDLPack;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

mod embedded_py;
use embedded_py::{eval, hand, managed, with_py};

#[test]
fn burn_data_is_torch_memory_writable_and_comes_back() {
    with_py(|py| {
        let data = TensorData::new((0..6).map(|i| i as f32).collect::<Vec<_>>(), [2, 3]);
        let first = data.as_slice::<f32>()?.as_ptr() as usize;
        let exported = ManagedTensorVersioned::try_from(data)?;
        assert!(!exported.is_copied() && !exported.is_read_only());
        let x = hand(py, "torch", exported)?;
        assert_eq!(x.call_method0("data_ptr")?.extract::<usize>()?, first);
        // torch writes the memory burn gave up; the strided view comes back by one copy.
        let y = eval(py, c"x.mul_(10).T[1:]", &x)?;
        let back = TensorData::try_from(&*PyTensor::from_pyany(py, &y)?)?;
        assert_eq!(back.shape().as_slice(), [2, 2]);
        assert_eq!(back.as_slice::<f32>()?, [10.0, 40.0, 20.0, 50.0]);
        Ok(())
    })
}

/// Bytes shared with a clone are copied on write before the export: the clone never sees a
/// consumer's writes, and the export says it was copied.
#[test]
fn shared_bytes_are_copied_and_the_clone_is_untouched() {
    with_py(|py| {
        let bytes = Bytes::from_elems(vec![1i32, 2, 3, 4]).shared();
        let data = TensorData::from_bytes(bytes, [4], DType::I32);
        let kept = data.clone();
        let kept_ptr = kept.as_slice::<i32>()?.as_ptr() as usize;
        assert_eq!(data.as_slice::<i32>()?.as_ptr() as usize, kept_ptr); // shared
        let exported = ManagedTensorVersioned::try_from(data)?;
        assert!(exported.is_copied() && !exported.is_read_only());
        let x = hand(py, "torch", exported)?;
        assert_ne!(x.call_method0("data_ptr")?.extract::<usize>()?, kept_ptr);
        eval(py, c"x.fill_(7)", &x)?;
        assert_eq!(kept.as_slice::<i32>()?, [1, 2, 3, 4]);
        Ok(())
    })
}

#[test]
fn every_dtype_round_trips_through_numpy_and_torch() {
    with_py(|py| {
        let cases: Vec<(TensorData, &str)> = vec![
            (TensorData::new(vec![1.5f64, -2.0], [2]), "float64"),
            (TensorData::new(vec![1.5f32, -2.0], [2]), "float32"),
            (
                TensorData::new(
                    vec![half::f16::from_f32(1.5), half::f16::from_f32(-2.0)],
                    [2],
                ),
                "float16",
            ),
            (TensorData::new(vec![-5i64, 6], [2]), "int64"),
            (TensorData::new(vec![-5i32, 6], [2]), "int32"),
            (TensorData::new(vec![-5i16, 6], [2]), "int16"),
            (TensorData::new(vec![-5i8, 6], [2]), "int8"),
            (TensorData::new(vec![u64::MAX, 6], [2]), "uint64"),
            (TensorData::new(vec![u32::MAX, 6], [2]), "uint32"),
            (TensorData::new(vec![u16::MAX, 6], [2]), "uint16"),
            (TensorData::new(vec![255u8, 6], [2]), "uint8"),
            (TensorData::new(vec![true, false], [2]), "bool"),
            (
                TensorData::from_bytes_vec(vec![0, 1], [2], DType::Bool(BoolStore::U8)),
                "bool",
            ),
        ];
        for (data, name) in cases {
            let want = data.as_bytes().to_vec();
            let x = hand(py, "numpy", ManagedTensorVersioned::try_from(data)?)?;
            assert_eq!(eval(py, c"str(x.dtype)", &x)?.extract::<String>()?, name);
            let back = TensorData::try_from(&*PyTensor::from_pyany(py, &x)?)?;
            assert_eq!(back.as_bytes(), want, "{name}");
        }
        // bfloat16, which numpy lacks, through torch and jax.
        let bf = |v: &[f32]| {
            v.iter()
                .map(|&f| half::bf16::from_f32(f))
                .collect::<Vec<_>>()
        };
        for module in ["torch", "jax.numpy"] {
            let data = TensorData::new(bf(&[1.5, -2.0, 0.25]), [3]);
            let x = hand(py, module, ManagedTensorVersioned::try_from(data)?)?;
            assert!(eval(py, c"str(x.dtype)", &x)?
                .extract::<String>()?
                .ends_with("bfloat16"));
            let back = TensorData::try_from(&*PyTensor::from_pyany(py, &x)?)?;
            assert_eq!(back.dtype(), DType::BF16);
            assert_eq!(back.as_slice::<half::bf16>()?, bf(&[1.5, -2.0, 0.25]));
        }
        Ok(())
    })
}

#[test]
fn jax_shares_and_numpy_views_import_with_their_layout() {
    with_py(|py| {
        let data = TensorData::new((0..12).map(|i| i as f32).collect::<Vec<_>>(), [3, 4]);
        let x = hand(py, "jax.numpy", ManagedTensorVersioned::try_from(data)?)?;
        assert_eq!(eval(py, c"x.sum().item()", &x)?.extract::<f64>()?, 66.0);
        let x = py.eval(
            c"__import__('numpy').arange(12, dtype='int64').reshape(3, 4)[::2, ::-1]",
            None,
            None,
        )?;
        let back = TensorData::try_from(&*PyTensor::from_pyany(py, &x)?)?;
        assert_eq!(back.shape().as_slice(), [2, 4]);
        assert_eq!(back.as_slice::<i64>()?, [3, 2, 1, 0, 11, 10, 9, 8]);
        Ok(())
    })
}

#[test]
fn refusals_name_what_to_do() {
    with_py(|py| {
        // u32-stored bools have no DLPack dtype.
        let data = TensorData::from_bytes_vec(vec![0; 8], [2], DType::Bool(BoolStore::U32));
        let err = ManagedTensorVersioned::try_from(data).unwrap_err();
        assert!(err.to_string().contains("u32-stored bools"), "{err}");
        // A dtype burn lacks: numpy complex64 (a ValueError in Python).
        let x = py.eval(
            c"__import__('numpy').zeros(3, dtype='complex64')",
            None,
            None,
        )?;
        let err = TensorData::try_from(&*PyTensor::from_pyany(py, &x)?).unwrap_err();
        assert!(
            err.to_string().contains("burn has no complex64 data"),
            "{err}"
        );
        assert!(PyErr::from(err).is_instance_of::<PyValueError>(py));
        // Memory that is not on the host.
        let m = managed(vec![0; 8], DLDeviceType::CUDA, DLDataType::FLOAT32, vec![2]);
        assert!(matches!(
            TensorData::try_from(&m),
            Err(Error::NotHostAccessible(_))
        ));
        // A mutable view of the source blocks the copy (registry borrow).
        let shared = SharedMut::from_slice(&[1f32, 2.0])?;
        let m = shared.clone().into_managed_tensor_versioned()?;
        let w = shared.write()?;
        assert!(matches!(
            TensorData::try_from(&m),
            Err(Error::AlreadyBorrowed { .. })
        ));
        drop(w);
        assert_eq!(TensorData::try_from(&m)?.as_slice::<f32>()?, [1.0, 2.0]);
        // A zero-stride view of 2^40 elements: OutOfMemory, not an abort.
        let x = py.eval(
            c"__import__('numpy').broadcast_to(__import__('numpy').zeros(1, 'u1'), (1 << 20, 1 << 20))",
            None,
            None,
        )?;
        assert!(matches!(
            TensorData::try_from(&*PyTensor::from_pyany(py, &x)?),
            Err(Error::OutOfMemory)
        ));
        Ok(())
    })
}

/// burn multiplies the extents in order: an empty tensor whose earlier extents overflow is
/// refused with `Overflow` (not a panic inside burn); one that is empty first imports.
#[test]
fn empty_imports_follow_burns_shape_rule() {
    let m = managed(
        Vec::new(),
        DLDeviceType::CPU,
        DLDataType::UINT8,
        vec![1 << 40, 1 << 40, 0],
    );
    assert!(matches!(TensorData::try_from(&m), Err(Error::Overflow)));
    let m = managed(
        Vec::new(),
        DLDeviceType::CPU,
        DLDataType::UINT8,
        vec![0, 1 << 40, 1 << 40],
    );
    let data = TensorData::try_from(&m).unwrap();
    assert_eq!(
        (data.num_elements(), data.shape().as_slice()),
        (0, &[0, 1 << 40, 1 << 40][..])
    );
}

/// Bytes that are not `0` or `1` import as `true` (burn's bools are exact).
#[test]
fn bool_bytes_import_normalised() {
    let m = managed(
        vec![0, 1, 2, 255],
        DLDeviceType::CPU,
        DLDataType::BOOL,
        vec![4],
    );
    let data = TensorData::try_from(&m).unwrap();
    assert_eq!(data.as_slice::<bool>().unwrap(), [false, true, true, true]);
}

/// burn's bools are bytes 0 or 1 (`TensorData::from_bytes_vec` checks only the length): any
/// other byte would reach numpy or torch as a `bool` they may not hold, so the export refuses it.
#[test]
fn bool_bytes_other_than_0_or_1_are_refused_on_export() {
    for store in [BoolStore::Native, BoolStore::U8] {
        let data = TensorData::from_bytes_vec(vec![0, 1, 2], [3], DType::Bool(store));
        assert!(
            matches!(
                ManagedTensorVersioned::try_from(data),
                Err(Error::InvalidBool)
            ),
            "{store:?}"
        );
        let data = TensorData::from_bytes_vec(vec![0, 1, 1], [3], DType::Bool(store));
        let exported = ManagedTensorVersioned::try_from(data).unwrap();
        assert_eq!(exported.as_slice::<bool>().unwrap(), [false, true, true]);
    }
}

/// An imported bool tensor is the one copy `TensorData::new(Vec<bool>)` holds (burn realigns
/// raw byte vectors, a second copy whose allocation failure aborts): burn gives it back as a
/// `Vec<bool>` without copying.
#[test]
fn bool_imports_are_one_copy() {
    let m = managed(vec![0, 1, 2], DLDeviceType::CPU, DLDataType::BOOL, vec![3]);
    let data = TensorData::try_from(&m).unwrap();
    assert_eq!(data.dtype(), DType::Bool(BoolStore::Native));
    let bools = data.into_bytes().try_into_vec::<bool>();
    assert_eq!(bools.ok(), Some(vec![false, true, true]));
}

/// Lazy storage as cubecl's file-backed controller keeps it (that one needs cubecl's `std`,
/// which this build lacks): nothing is resident until a copying access, which reads the bytes
/// into a new vector of `len` bytes (`vec![0u8; size]` in cubecl), or fails.
struct Lazy {
    len: usize,
    fail: bool,
    host: std::sync::OnceLock<Vec<u8>>,
}

impl Lazy {
    fn bytes(len: usize, fail: bool) -> Bytes {
        let lazy = Lazy {
            len,
            fail,
            host: std::sync::OnceLock::new(),
        };
        // SAFETY: every access yields `len` initialised bytes (or none: an error).
        unsafe { Bytes::from_controller(Box::new(lazy), len) }
    }

    fn host(&self, policy: AccessPolicy) -> Result<&Vec<u8>, AccessError> {
        if let Some(host) = self.host.get() {
            return Ok(host);
        }
        if !policy.copy_allowed() {
            return Err(AccessError::WouldCopy);
        }
        if self.fail {
            return Err(AccessError::Read("No such file or directory".into()));
        }
        Ok(self.host.get_or_init(|| vec![7u8; self.len]))
    }
}

impl AllocationController for Lazy {
    fn alloc_align(&self) -> usize {
        16
    }

    fn property(&self) -> AllocationProperty {
        AllocationProperty::File
    }

    fn capacity(&self) -> usize {
        self.len
    }

    fn memory(&self, policy: AccessPolicy) -> Result<&[MaybeUninit<u8>], AccessError> {
        let host = self.host(policy)?;
        // SAFETY: initialised bytes read as possibly uninitialised ones, same layout.
        Ok(unsafe { std::slice::from_raw_parts(host.as_ptr().cast(), host.len()) })
    }

    unsafe fn memory_mut(
        &mut self,
        policy: AccessPolicy,
    ) -> Result<&mut [MaybeUninit<u8>], AccessError> {
        self.host(policy)?;
        let host = self.host.get_mut().expect("initialised just above");
        // SAFETY: as in `memory`, exclusive through `&mut self`.
        Ok(unsafe { std::slice::from_raw_parts_mut(host.as_mut_ptr().cast(), host.len()) })
    }
}

/// Lazy storage is brought to the host by the export (flagged `IS_COPIED`); a failed read is an
/// error, also through burn's `shared()` wrapper (whose reads panic on it), never a panic.
#[test]
fn lazy_storage_exports_copied_and_failures_are_errors() {
    let data = TensorData::from_bytes(Lazy::bytes(4, false), [4], DType::U8);
    let exported = ManagedTensorVersioned::try_from(data).unwrap();
    assert!(exported.is_copied());
    assert_eq!(exported.as_slice::<u8>().unwrap(), [7; 4]);
    for bytes in [Lazy::bytes(4, true), Lazy::bytes(4, true).shared()] {
        let data = TensorData::from_bytes(bytes, [4], DType::U8);
        let err = ManagedTensorVersioned::try_from(data).unwrap_err();
        assert!(matches!(err, Error::Unserializable(_)), "{err}");
    }
}

/// A lazy length burn accepts (its extents multiply within a `usize`) but no allocation can
/// hold: `Overflow` before burn is asked to read it (cubecl's file reader would panic).
#[test]
fn lazy_storage_larger_than_an_allocation_is_overflow() {
    let data = TensorData::from_bytes(Lazy::bytes(1 << 63, false), [1usize << 62, 2], DType::U8);
    assert!(matches!(
        ManagedTensorVersioned::try_from(data),
        Err(Error::Overflow)
    ));
}

/// Views and splits of shared bytes export copied and aligned, whatever their offset; the
/// bytes they view are untouched by a consumer's writes.
#[test]
fn views_and_splits_export_copied_and_aligned() {
    let whole = Bytes::from_elems(vec![1i32, 2, 3, 4]).shared();
    let view = whole.view(4, 12).unwrap();
    let (_, right) = whole.clone().split(1, SplitPolicy::Shared).unwrap();
    let (odd, _) = right.split(8, SplitPolicy::Shared).unwrap();
    for (bytes, want) in [(view, [2, 3]), (odd, [2 << 24, 3 << 24])] {
        let data = TensorData::from_bytes(bytes, [2], DType::I32);
        let mut exported = ManagedTensorVersioned::try_from(data).unwrap();
        assert!(exported.is_copied());
        assert_eq!(exported.as_slice::<i32>().unwrap(), want);
        exported.as_mut_slice::<i32>().unwrap().fill(-1);
    }
    assert_eq!(&*whole, &Bytes::from_elems(vec![1i32, 2, 3, 4])[..]);
}

/// Empty data, a scalar and Flex32 (f32 values) export as DLPack sees them.
#[test]
fn empty_scalar_and_flex32_export() {
    let data = TensorData::new(Vec::<f32>::new(), [0, 3]);
    let exported = ManagedTensorVersioned::try_from(data).unwrap();
    assert_eq!(exported.shape(), [0, 3]);
    assert_eq!(exported.as_slice::<f32>().unwrap(), [0f32; 0]);
    let data = TensorData::new(vec![2.5f64], [0usize; 0]);
    let exported = ManagedTensorVersioned::try_from(data).unwrap();
    assert_eq!(exported.as_slice::<f64>().unwrap(), [2.5]);
    let data = TensorData::from_bytes_vec(1.5f32.to_ne_bytes().to_vec(), [1], DType::Flex32);
    let exported = ManagedTensorVersioned::try_from(data).unwrap();
    assert_eq!(exported.dtype(), DLDataType::FLOAT32);
    assert_eq!(exported.as_slice::<f32>().unwrap(), [1.5]);
    // An extent DLPack's i64 cannot hold, in an empty tensor burn accepts.
    let data = TensorData::new(Vec::<u8>::new(), [0, 1usize << 63]);
    assert!(matches!(
        ManagedTensorVersioned::try_from(data),
        Err(Error::Overflow)
    ));
}
