//! The typed view arguments (features `pyo3` and `ndarray`) tested from Rust with an embedded
//! interpreter and `dlpack_rs.Tensor` as the producer: a transposed layout read through the
//! borrowed exchange-table route, the shape, layout and dtype-set refusals, and the exclusive
//! borrow of a writable view; the any-device arguments (`TensorView<'_, .., AnyDevice>`) on
//! a tensor that says it lives on CUDA.
#![cfg(all(feature = "pyo3", feature = "ndarray"))]

use dlpack_rs::ffi::{DLDevice, DLDeviceType};
use dlpack_rs::ndarray::array;
use dlpack_rs::pyo3_glue::{
    AnyDevice, AnyOf, CContig, DLPackTensor, Dims, Strided, TensorView, TensorViewMut, ANY,
};
use dlpack_rs::safe::{Buffer, Export};
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
        let v: TensorView<'_, f32, Dims<2>> = obj.extract()?;
        assert_eq!(v.view(), array![[1.0f32, 4.0], [2.0, 5.0], [3.0, 6.0]]);
        assert_eq!(v.view().strides(), &[1, 3]);
        let fixed: TensorView<'_, f32, Dims<2, ANY, 2>> = obj.extract()?;
        assert_eq!(fixed.view().column(1).to_vec(), vec![4.0, 5.0, 6.0]);
        Ok(())
    })
}

#[test]
fn constraints_are_refused_with_the_expected_and_the_actual() {
    with_py(|py| {
        let obj = transposed(py)?;
        let err = obj
            .extract::<TensorView<'_, f32, Dims<2, 2, ANY>>>()
            .unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py));
        assert_eq!(
            err.value(py).to_string(),
            "expected shape (2, *), got (3, 2)"
        );
        let err = obj
            .extract::<TensorView<'_, f32, Dims<2>, CContig>>()
            .unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py));
        assert!(err
            .value(py)
            .to_string()
            .ends_with("got shape (3, 2) with strides (1, 3)"));
        let err = obj.extract::<AnyOf<'_, (u8, i32)>>().unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py));
        assert!(err
            .value(py)
            .to_string()
            .starts_with("expected a tensor of uint8 or int32, got float32 "));
        assert!(matches!(
            obj.extract::<AnyOf<'_, (u8, f32)>>()?,
            AnyOf::B(_)
        ));
        Ok(())
    })
}

#[test]
fn a_writable_view_is_exclusive() {
    with_py(|py| {
        let obj = transposed(py)?;
        {
            let mut w: TensorViewMut<'_, f32, Dims<2>> = obj.extract()?;
            w.view_mut()[[2, 1]] = 60.0;
            // No other view while the writable one lives.
            let err = obj.extract::<TensorView<'_, f32>>().unwrap_err();
            assert!(err.is_instance_of::<PyBufferError>(py));
        }
        let v: TensorView<'_, f32, Dims<2>> = obj.extract()?;
        assert_eq!(v.view()[[2, 1]], 60.0);
        let err = obj
            .extract::<TensorViewMut<'_, f32, Dims<2>>>()
            .unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py));
        Ok(())
    })
}

/// Host floats that claim to live on CUDA device 0: nothing here dereferences them (only the
/// address and the metadata are looked at), which is all the checks need.
struct OnCuda(Vec<f32>);

// SAFETY: the Vec's heap buffer holds `len` f32s and stays in place when the value moves;
// `Vec::as_ptr` carries write permission; nothing writes through `&self`. The device is a
// claim for tests that never read the memory.
unsafe impl Buffer for OnCuda {
    type Elem = f32;
    const SHARED_PTR_WRITABLE: bool = true;
    fn data_ptr(&self) -> *mut f32 {
        self.0.as_ptr().cast_mut()
    }
    fn num_elements(&self) -> usize {
        self.0.len()
    }
    fn device(&self) -> DLDevice {
        DLDevice {
            device_type: DLDeviceType::CUDA,
            device_id: 0,
        }
    }
}

/// A 2x3 float32 tensor on "CUDA" seen transposed (3x2, strides 1, 3), and its address.
fn on_cuda(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, usize)> {
    let data = OnCuda(vec![0.0; 6]);
    let address = data.0.as_ptr() as usize;
    let t = Export::new(data)
        .shape(&[3, 2])
        .strides(&[1, 3])
        .versioned()?;
    Ok((Bound::new(py, DLPackTensor::new(t))?.into_any(), address))
}

#[test]
fn a_device_tensor_gives_its_metadata_and_address_but_no_host_view() {
    with_py(|py| {
        let (obj, address) = on_cuda(py)?;
        let cuda = DLDevice {
            device_type: DLDeviceType::CUDA,
            device_id: 0,
        };
        {
            let t: TensorView<'_, f32, Dims<2>, Strided, AnyDevice> = obj.extract()?;
            assert_eq!(t.device(), cuda);
            assert_eq!(t.shape(), &[3, 2]);
            assert_eq!(&*t.strides(), &[1, 3]);
            assert_eq!(t.ndim(), 2);
            assert_eq!(t.data_ptr() as usize, address);
            // Shared with another shared argument, never with a writable one.
            let again: TensorView<'_, f32, Dims<ANY>, Strided, AnyDevice> = obj.extract()?;
            assert_eq!(again.data_ptr() as usize, address);
            let err = obj
                .extract::<TensorViewMut<'_, f32, Dims<ANY>, Strided, AnyDevice>>()
                .unwrap_err();
            assert!(err.is_instance_of::<PyBufferError>(py));
            assert!(err.value(py).to_string().contains("already borrowed"));
        }
        let mut w: TensorViewMut<'_, f32, Dims<2, 3, 2>, Strided, AnyDevice> = obj.extract()?;
        assert_eq!(w.data_ptr_mut() as usize, address);
        drop(w);
        // Host arguments refuse it, naming CPU memory and the fix.
        for err in [
            obj.extract::<TensorView<'_, f32>>().unwrap_err(),
            obj.extract::<TensorView<'_, f32, Dims<ANY>, CContig>>()
                .unwrap_err(),
        ] {
            assert!(err.is_instance_of::<PyBufferError>(py));
            let message = err.value(py).to_string();
            assert!(
                message.starts_with("expected a tensor in CPU memory: "),
                "{message}"
            );
            assert!(message.contains("(x.cpu() in torch"), "{message}");
        }
        Ok(())
    })
}

#[test]
fn a_device_tensor_is_checked_like_a_view() {
    with_py(|py| {
        let (obj, _) = on_cuda(py)?;
        let err = obj
            .extract::<TensorView<'_, f64, Dims<ANY>, Strided, AnyDevice>>()
            .unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py));
        assert!(err
            .value(py)
            .to_string()
            .starts_with("expected a tensor of float64, got float32 "));
        let err = obj
            .extract::<TensorView<'_, f32, Dims<2, 2, ANY>, Strided, AnyDevice>>()
            .unwrap_err();
        assert!(err.is_instance_of::<PyTypeError>(py));
        assert_eq!(
            err.value(py).to_string(),
            "expected shape (2, *), got (3, 2)"
        );
        let err = obj
            .extract::<TensorView<'_, f32, Dims<2>, CContig, AnyDevice>>()
            .unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py));
        assert!(err
            .value(py)
            .to_string()
            .ends_with("got shape (3, 2) with strides (1, 3)"));
        // A broadcast tensor (stride 0) is readable, not writable.
        let t = Export::new(OnCuda(vec![0.0; 2]))
            .shape(&[4, 2])
            .strides(&[0, 1])
            .versioned()?;
        let obj = Bound::new(py, DLPackTensor::new(t))?.into_any();
        let _shared: TensorView<'_, f32, Dims<2>, Strided, AnyDevice> = obj.extract()?;
        drop(_shared);
        let err = obj
            .extract::<TensorViewMut<'_, f32, Dims<2>, Strided, AnyDevice>>()
            .unwrap_err();
        assert!(err.is_instance_of::<PyBufferError>(py));
        assert!(err
            .value(py)
            .to_string()
            .starts_with("expected a writable tensor whose elements are distinct"));
        Ok(())
    })
}

/// An empty tensor whose non-zero extents multiply past `isize::MAX` (`(0, 2^62, 2^62)`): valid
/// DLPack (nothing is addressed), but no ndarray view may describe it, on either route. Found by
/// review: the C-contiguous (slice) route once handed such a shape to ndarray's constructor.
#[test]
fn an_empty_tensor_too_large_for_a_view_is_refused_on_every_route() {
    with_py(|py| {
        let t = Export::new(Vec::<u8>::new())
            .shape(&[0, 1i64 << 62, 1i64 << 62])
            .versioned()?;
        let obj = Bound::new(py, DLPackTensor::new(t))?.into_any();
        let contiguous = obj
            .extract::<TensorView<'_, u8, Dims<3>, CContig>>()
            .unwrap_err();
        let strided = obj.extract::<TensorView<'_, u8, Dims<3>>>().unwrap_err();
        for err in [contiguous, strided] {
            assert!(err.is_instance_of::<PyBufferError>(py), "{err}");
        }
        // A small empty tensor is an empty view on both routes.
        let t = Export::new(Vec::<u8>::new()).shape(&[0, 3]).versioned()?;
        let obj = Bound::new(py, DLPackTensor::new(t))?.into_any();
        let c: TensorView<'_, u8, Dims<2>, CContig> = obj.extract()?;
        assert_eq!(
            (c.view().shape(), c.as_slice()),
            (&[0usize, 3][..], Some(&[][..]))
        );
        let s: TensorView<'_, u8, Dims<2>> = obj.extract()?;
        assert_eq!(s.view().shape(), &[0, 3]);
        assert_eq!(s.get(&[0, 0]), None);
        Ok(())
    })
}

/// The backing of a hand-made producer whose shape the test rewrites after handing it over.
struct Changing {
    managed: dlpack_rs::ffi::DLManagedTensorVersioned,
    shape: [i64; 1],
    data: [f32; 4],
}

unsafe extern "C" fn free_changing(ptr: *mut dlpack_rs::ffi::DLManagedTensorVersioned) {
    // SAFETY: `ptr` is the first field of a leaked `Box<Changing>` (repr(C) not needed: the
    // test keeps the box's address in `manager_ctx`).
    drop(unsafe { Box::from_raw((*ptr).manager_ctx.cast::<Changing>()) });
}

/// A producer that changes the shape of a tensor it handed over breaks DLPack's contract
/// (SAFETY.md: outside the model), but a typed argument still reaches only what it checked and
/// borrowed at extraction: indexing is bounded by the borrowed elements, slices keep their
/// length, and a view of a shape that no longer fits panics instead of reading past them.
#[test]
fn a_typed_argument_reaches_only_what_it_borrowed_when_the_producer_changes_the_shape() {
    use dlpack_rs::ffi::{
        DLDataType, DLManagedTensorVersioned, DLPackVersion, DLTensor, DLPACK_MAJOR_VERSION,
        DLPACK_MINOR_VERSION,
    };
    use dlpack_rs::safe::ManagedTensorVersioned;
    with_py(|py| {
        let mut backing = Box::new(Changing {
            // SAFETY: all-zero is a valid (empty) value of this plain C struct; filled below.
            managed: unsafe { core::mem::zeroed() },
            shape: [4],
            data: [1.0, 2.0, 3.0, 4.0],
        });
        let shape = backing.shape.as_mut_ptr();
        backing.managed = DLManagedTensorVersioned {
            version: DLPackVersion {
                major: DLPACK_MAJOR_VERSION,
                minor: DLPACK_MINOR_VERSION,
            },
            manager_ctx: core::ptr::null_mut(),
            deleter: Some(free_changing),
            flags: 0,
            dl_tensor: DLTensor {
                data: backing.data.as_mut_ptr().cast(),
                device: DLDevice::CPU,
                ndim: 1,
                dtype: DLDataType::FLOAT32,
                shape,
                strides: core::ptr::null_mut(),
                byte_offset: 0,
            },
        };
        let raw = Box::into_raw(backing);
        // SAFETY: `raw` is alive until the deleter frees it.
        unsafe { (*raw).managed.manager_ctx = raw.cast() };
        // SAFETY: a valid versioned tensor whose deleter frees its backing once.
        let t = unsafe { ManagedTensorVersioned::from_raw(&raw mut (*raw).managed) }.unwrap();
        let obj = Bound::new(py, DLPackTensor::new(t))?.into_any();
        let contiguous: TensorView<'_, f32, Dims<1>, CContig> = obj.extract()?;
        let strided: TensorView<'_, f32, Dims<1>> = obj.extract()?;
        // The producer now claims 2^40 elements.
        // SAFETY: the test's own array, alive while `obj` (which owns the backing) lives.
        unsafe { *shape = 1 << 40 };
        assert_eq!(contiguous.shape(), &[1 << 40]);
        assert_eq!(contiguous.get(&[3]), Some(&4.0));
        assert_eq!(contiguous.get(&[4]), None);
        assert_eq!(contiguous.as_slice().map(<[f32]>::len), Some(4));
        assert_eq!(contiguous.len(), 4);
        assert_eq!(strided.get(&[3]), Some(&4.0));
        assert_eq!(strided.get(&[100]), None);
        assert_eq!(strided.as_slice().map(<[f32]>::len), Some(4));
        assert_eq!(strided.view().len(), 4);
        let view =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| contiguous.view().len()));
        assert!(view.is_err());
        drop((contiguous, strided));
        // SAFETY: as above.
        unsafe { *shape = 4 };
        Ok(())
    })
}
