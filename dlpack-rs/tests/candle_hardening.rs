//! Feature `candle` under attack: odd layouts, every dtype, huge and empty shapes, concurrent
//! candle writes, leaks, and the refusals (the adversarial review's cases, each asserting the
//! one right answer).
#![cfg(all(feature = "candle", feature = "pyo3"))]

use candle_core::{CpuStorage, DType, Device, Tensor};
use dlpack_rs::ffi::{DLDataType, DLDataTypeCode, DLDevice, DLDeviceType};
use dlpack_rs::pyo3_glue::PyTensor;
use dlpack_rs::safe::{Error, ManagedTensorVersioned, TensorInfo};
use pyo3::prelude::*;

mod embedded_py;
use embedded_py::{eval, hand, managed, with_py};

/// A zero-stride numpy view of 2^40 elements (1 byte of data) is refused with `OutOfMemory`,
/// as the crate's own copy refuses it, instead of aborting the process.
#[test]
fn import_of_a_huge_broadcast_is_out_of_memory() {
    with_py(|py| {
        let x = py.eval(
            c"__import__('numpy').broadcast_to(__import__('numpy').zeros(1, 'u1'), (1 << 20, 1 << 20))",
            None,
            None,
        )?;
        let t = PyTensor::from_pyany(py, &x)?;
        assert!(matches!(t.copy(), Err(Error::OutOfMemory)));
        assert!(matches!(Tensor::try_from(&*t), Err(Error::OutOfMemory)));
        Ok(())
    });
}

/// An empty tensor whose other extents multiply past `usize` is valid DLPack but no candle
/// shape: refused with `Overflow`, not a panic inside candle.
#[test]
fn empty_import_with_overflowing_extents_is_refused() {
    for shape in [vec![0i64, 1 << 40, 1 << 40], vec![1 << 40, 1 << 40, 0]] {
        let m = managed(
            Vec::new(),
            DLDeviceType::CPU,
            DLDataType::UINT8,
            shape.clone(),
        );
        assert_eq!(m.numel(), 0);
        assert!(
            matches!(Tensor::try_from(&m), Err(Error::Overflow)),
            "{shape:?}"
        );
    }
}

/// candle's raw-byte F4 / F6 tensors are refused with a message that offers no conversion
/// candle refuses; its F8E8M0 (one byte per element) is DLPack's float8_e8m0fnu both ways.
#[test]
fn raw_byte_dtypes_are_refused_and_f8e8m0_round_trips() {
    for dtype in [DType::F4, DType::F6E2M3, DType::F6E3M2] {
        let t = Tensor::from_raw_buffer(&[0u8, 1], dtype, &[2], &Device::Cpu).unwrap();
        let err = ManagedTensorVersioned::try_from(&t).unwrap_err();
        assert!(matches!(err, Error::Unserializable(_)), "{dtype:?}");
        assert!(err.to_string().contains("not exported"), "{err}");
        assert!(!err.to_string().contains("to_dtype"), "{err}");
    }
    let e8m0 = DLDataType::new(DLDataTypeCode::FLOAT8_E8M0FNU, 8, 1);
    let t = Tensor::from_raw_buffer(&[127u8, 128, 1], DType::F8E8M0, &[3], &Device::Cpu).unwrap();
    let out = ManagedTensorVersioned::try_from(&t).unwrap();
    assert_eq!(out.dtype(), e8m0);
    let bytes_of = |t: &Tensor| {
        let (storage, _) = t.storage_and_layout();
        let candle_core::Storage::Cpu(CpuStorage::F8E8M0(bytes)) = &*storage else {
            panic!("F8E8M0 storage")
        };
        bytes.clone()
    };
    let back = Tensor::try_from(&out).unwrap();
    assert_eq!(back.dtype(), DType::F8E8M0);
    assert_eq!(bytes_of(&back), [127, 128, 1]);
    let m = managed(vec![127u8, 128], DLDeviceType::CPU, e8m0, vec![2]);
    assert_eq!(bytes_of(&Tensor::try_from(&m).unwrap()), [127, 128]);
}

// ---------------------------------------------------------------------------------------------
// What held
// ---------------------------------------------------------------------------------------------

/// candle's writers (`slice_set`) take the storage's write lock, so the copy (which holds the
/// read lock) never sees a torn state.
#[test]
fn copy_excludes_concurrent_slice_set() {
    const N: usize = 1 << 16;
    let dst = Tensor::zeros((1, N), DType::F32, &Device::Cpu).unwrap();
    let ones = Tensor::ones((1, N), DType::F32, &Device::Cpu).unwrap();
    let zeros = Tensor::zeros((1, N), DType::F32, &Device::Cpu).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (dst, stop) = (dst.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut k = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let src = if k % 2 == 0 { &ones } else { &zeros };
                dst.slice_set(src, 0, 0).unwrap();
                k += 1;
            }
            k
        })
    };
    // A strided view too (transpose of the (1, N) row is (N, 1), compact; take every other).
    for i in 0..200 {
        let view = if i % 2 == 0 {
            dst.clone()
        } else {
            dst.narrow(1, 1, N - 1).unwrap()
        };
        let c = ManagedTensorVersioned::try_from(&view).unwrap();
        let s = c.as_slice::<f32>().unwrap();
        let first = s[0];
        assert!(s.iter().all(|&v| v == first), "torn copy at iteration {i}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.join().unwrap();
    assert!(writes > 0);
}

/// Layouts candle produces: empty with start offset at the end, zero-size storage, 0-d,
/// broadcast (zero strides), transposed narrow; copy and share agree with candle.
#[test]
fn odd_layouts_copy_and_share() {
    with_py(|py| {
        let base = Tensor::arange(0f32, 6.0, &Device::Cpu)?;
        let at_end = base.narrow(0, 6, 0)?;
        assert_eq!(at_end.layout().start_offset(), 6);
        let empty = Tensor::zeros((0, 3), DType::F32, &Device::Cpu)?;
        let scalar = Tensor::new(2.5f32, &Device::Cpu)?;
        let bcast = Tensor::new(&[1f32, 2.0, 3.0], &Device::Cpu)?
            .reshape((3, 1))?
            .broadcast_as((3, 4))?;
        let tnarrow = base.reshape((2, 3))?.narrow(1, 1, 2)?.t()?;
        for (name, t) in [
            ("at_end", &at_end),
            ("empty", &empty),
            ("scalar", &scalar),
            ("bcast", &bcast),
            ("tnarrow", &tnarrow),
        ] {
            let want = t.flatten_all()?.to_vec1::<f32>()?;
            let c = ManagedTensorVersioned::try_from(t)?;
            assert_eq!(
                c.shape().iter().map(|&d| d as usize).collect::<Vec<_>>(),
                t.dims(),
                "{name}"
            );
            assert_eq!(&*c.as_slice::<f32>()?, &want[..], "{name}");
            for module in ["numpy", "torch", "jax.numpy"] {
                // SAFETY: nothing writes these tensors; the consumers only read.
                let s = unsafe { ManagedTensorVersioned::share_candle(t) }?;
                let x = hand(py, module, s)?;
                let got: Vec<f32> = eval(
                    py,
                    c"__import__('numpy').asarray(x).reshape(-1).tolist()",
                    &x,
                )?
                .extract()?;
                assert_eq!(got, want, "{name} via {module}");
                let x = hand(py, module, ManagedTensorVersioned::try_from(t)?)?;
                let got: Vec<f32> = eval(
                    py,
                    c"__import__('numpy').asarray(x).reshape(-1).tolist()",
                    &x,
                )?
                .extract()?;
                assert_eq!(got, want, "{name} copy via {module}");
            }
        }
        Ok(())
    })
}

/// A huge broadcast candle view: copy refuses with OutOfMemory and releases the read lock.
#[test]
fn huge_broadcast_export_is_out_of_memory_and_unlocks() {
    let one = Tensor::zeros((1, 1), DType::U8, &Device::Cpu).unwrap();
    let huge = one.broadcast_as((1usize << 20, 1usize << 20)).unwrap();
    assert!(matches!(
        ManagedTensorVersioned::try_from(&huge),
        Err(Error::OutOfMemory)
    ));
    // The read lock is released: a writer proceeds.
    one.slice_set(
        &Tensor::ones((1, 1), DType::U8, &Device::Cpu).unwrap(),
        0,
        0,
    )
    .unwrap();
}

/// Every dtype both ways through torch, bit-exact.
#[test]
fn every_dtype_round_trips_through_torch() {
    with_py(|py| {
        let raw: Vec<u8> = (0u8..64).map(|b| b.wrapping_mul(37) & 0x7e).collect();
        for dtype in [
            DType::U8,
            DType::U32,
            DType::I16,
            DType::I32,
            DType::I64,
            DType::BF16,
            DType::F16,
            DType::F32,
            DType::F64,
            DType::F8E4M3,
        ] {
            let n = raw.len() / dtype.size_in_bytes();
            let t = Tensor::from_raw_buffer(
                &raw[..n * dtype.size_in_bytes()],
                dtype,
                &[n],
                &Device::Cpu,
            )?;
            let t = t.reshape((n / 2, 2))?.t()?; // strided
            let x = hand(py, "torch", ManagedTensorVersioned::try_from(&t)?)?;
            let y = eval(py, c"x.T.contiguous().T", &x)?; // torch-side strided copy
            let back = Tensor::try_from(&*PyTensor::from_pyany(py, &y)?)?;
            assert_eq!(back.dtype(), dtype);
            // Bit-exact comparison in torch (candle's own F8E4M3::to_f64 recurses forever).
            let a = hand(py, "torch", ManagedTensorVersioned::try_from(&t)?)?;
            let b = hand(py, "torch", ManagedTensorVersioned::try_from(&back)?)?;
            let locals = pyo3::types::PyDict::new(py);
            locals.set_item("a", a)?;
            locals.set_item("b", b)?;
            let eq: bool = py
                .eval(c"(a.shape == b.shape) and bool((a.contiguous().view(-1).view(__import__('torch').uint8) == b.contiguous().view(-1).view(__import__('torch').uint8)).all())", None, Some(&locals))?
                .extract()?;
            assert!(eq, "{dtype:?}");
        }
        Ok(())
    })
}

/// Imports: negative strides, unaligned data, byte offset, NULL data with zero elements,
/// and refusals naming bool, int8, complex64.
#[test]
fn import_edges_and_refusals() {
    with_py(|py| {
        let np = |code: &std::ffi::CStr| py.eval(code, None, None);
        // Unaligned float32 (frombuffer at offset 1), reversed and strided.
        let x = np(c"__import__('numpy').frombuffer(bytes(range(41)), dtype='<f4', offset=1, count=10)[::-3]")?;
        let want: Vec<f32> = eval(py, c"x.tolist()", &x)?.extract()?;
        let pt = PyTensor::from_pyany(py, &x)?;
        assert_eq!(Tensor::try_from(&*pt)?.to_vec1::<f32>()?, want);
        // Byte offset via torch storage_offset.
        let x = np(c"__import__('torch').arange(20, dtype=__import__('torch').int16).reshape(4,5)[1:, 2:].flip(0)")?;
        let want: Vec<Vec<i16>> = eval(py, c"x.tolist()", &x)?.extract()?;
        assert_eq!(
            Tensor::try_from(&*PyTensor::from_pyany(py, &x)?)?.to_vec2::<i16>()?,
            want
        );
        // NULL data, zero elements.
        let info = TensorInfo::contiguous(
            std::ptr::null_mut(),
            DLDevice::new(DLDeviceType::CPU, 0),
            DLDataType::FLOAT32,
            vec![0, 3],
        );
        let raw = dlpack_rs::safe::try_pack_versioned((), info, 0)?;
        // SAFETY: just packed.
        let m = unsafe { ManagedTensorVersioned::from_raw(raw) }?;
        assert_eq!(Tensor::try_from(&m)?.dims(), [0, 3]);
        for (code, name) in [
            (c"__import__('numpy').zeros(2, dtype=bool)", "bool"),
            (c"__import__('numpy').zeros(2, dtype='int8')", "int8"),
            (
                c"__import__('numpy').zeros(2, dtype='complex64')",
                "complex64",
            ),
            (c"__import__('numpy').zeros(2, dtype='uint16')", "uint16"),
        ] {
            let err = Tensor::try_from(&*PyTensor::from_pyany(py, &np(code)?)?).unwrap_err();
            assert!(
                err.to_string()
                    .contains(&format!("candle has no {name} tensors")),
                "{err}"
            );
            assert!(PyErr::from(err).is_instance_of::<pyo3::exceptions::PyValueError>(py));
        }
        // Device memory (CUDA_MANAGED) is a BufferError.
        let m = managed(
            vec![0; 8],
            DLDeviceType::CUDA_MANAGED,
            DLDataType::FLOAT32,
            vec![2],
        );
        let err = Tensor::try_from(&m).unwrap_err();
        assert!(matches!(err, Error::NotHostAccessible(_)));
        assert!(PyErr::from(err).is_instance_of::<pyo3::exceptions::PyBufferError>(py));
        Ok(())
    })
}

/// share_candle registers its bytes: a writable torch re-export of them cannot be viewed
/// mutably through this crate while the export lives, and can once torch drops it.
#[test]
fn share_registers_a_shared_borrow() {
    with_py(|py| {
        let t = Tensor::new(&[1f32, 2.0, 3.0, 4.0], &Device::Cpu)?;
        // SAFETY: the test writes nothing (the mutable view is refused).
        let shared = unsafe { ManagedTensorVersioned::share_candle(&t) }?;
        let x = hand(py, "torch", shared)?;
        let mut again = PyTensor::from_pyany(py, &x)?;
        assert!(matches!(
            again.as_mut_slice::<f32>(),
            Err(Error::AlreadyBorrowed { .. })
        ));
        Ok(())
    })
}

/// Exports and failures do not leak: many share/copy/refusal cycles of 4 MiB tensors keep the
/// resident set bounded (a leaked clone would keep each storage alive).
#[test]
fn no_leak_across_exports_and_refusals() {
    fn rss_kib() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        s.lines()
            .find(|l| l.starts_with("VmRSS"))
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap()
    }
    let cycle = || {
        let t = Tensor::zeros(1 << 20, DType::F32, &Device::Cpu).unwrap();
        // SAFETY: nothing writes `t`.
        let s = unsafe { ManagedTensorVersioned::share_candle(&t) }.unwrap();
        let c = ManagedTensorVersioned::try_from(&t).unwrap();
        let back = Tensor::try_from(&s).unwrap();
        drop((t, s, c, back));
        let f4 = Tensor::from_raw_buffer(&vec![0u8; 1 << 22], DType::F4, &[1 << 22], &Device::Cpu)
            .unwrap();
        // SAFETY: nothing exported.
        assert!(unsafe { ManagedTensorVersioned::share_candle(&f4) }.is_err());
    };
    for _ in 0..20 {
        cycle();
    }
    let before = rss_kib();
    for _ in 0..200 {
        cycle();
    }
    let after = rss_kib();
    assert!(
        after < before + 64 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
}
