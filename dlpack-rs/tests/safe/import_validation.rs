//! Import of hand-made, malformed managed tensors: each gives a precise error, and the
//! producer's deleter runs exactly once (ownership passed on the call), never for NULL.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dlpack_rs::ffi::*;
use dlpack_rs::safe::{dtype_f32, Error, ManagedTensor, ManagedTensorVersioned};

/// A hand-built producer: the struct, its shape/strides storage and a deleter that counts.
#[repr(C)]
struct Fake {
    managed: DLManagedTensorVersioned,
    shape: Vec<i64>,
    strides: Vec<i64>,
    data: Vec<f32>,
    deletes: Arc<AtomicUsize>,
}

unsafe extern "C" fn fake_deleter(ptr: *mut DLManagedTensorVersioned) {
    // SAFETY: every Fake is made by `fake` through Box::into_raw; `managed` is its first field.
    let fake = unsafe { Box::from_raw(ptr.cast::<Fake>()) };
    fake.deletes.fetch_add(1, Ordering::SeqCst);
}

fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

/// A valid 2x3 f32 tensor, modified by `edit` before it is handed over.
fn fake(deletes: Arc<AtomicUsize>, edit: impl FnOnce(&mut Fake)) -> *mut DLManagedTensorVersioned {
    let mut f = Box::new(Fake {
        managed: DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 3 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(fake_deleter),
            flags: 0,
            dl_tensor: DLTensor {
                data: std::ptr::null_mut(),
                device: DLDevice {
                    device_type: K_DL_CPU,
                    device_id: 0,
                },
                ndim: 2,
                dtype: dtype_f32(),
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
        },
        shape: vec![2, 3],
        strides: vec![3, 1],
        data: vec![0.0; 6],
        deletes,
    });
    let t = &mut f.managed.dl_tensor;
    t.data = f.data.as_mut_ptr().cast::<c_void>();
    t.shape = f.shape.as_mut_ptr();
    t.strides = f.strides.as_mut_ptr();
    edit(&mut f);
    Box::into_raw(f).cast()
}

/// Imports a fake modified by `edit`, returning the result and how often the deleter ran.
fn import(edit: impl FnOnce(&mut Fake)) -> (Result<ManagedTensorVersioned, Error>, usize) {
    let deletes = counter();
    // SAFETY: `fake` builds a well-formed allocation whose shape/strides hold ndim values
    // (or are NULL) unless the edit says otherwise; ownership passes here.
    let r = unsafe { ManagedTensorVersioned::from_raw(fake(deletes.clone(), edit)) };
    (r, deletes.load(Ordering::SeqCst))
}

fn expect_err(edit: impl FnOnce(&mut Fake), expected: Error) {
    let (r, deletes) = import(edit);
    assert_eq!(r.unwrap_err(), expected);
    assert_eq!(
        deletes, 1,
        "the deleter runs once when an import is refused"
    );
}

#[test]
fn a_valid_fake_imports_and_is_deleted_once() {
    let deletes = counter();
    // SAFETY: a well-formed fake.
    let t = unsafe { ManagedTensorVersioned::from_raw(fake(deletes.clone(), |_| {})) }.unwrap();
    assert_eq!(t.shape(), &[2, 3]);
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    drop(t);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}

#[test]
fn null_pointer_is_refused() {
    // SAFETY: NULL is allowed by the contract.
    assert_eq!(
        unsafe { ManagedTensorVersioned::from_raw(std::ptr::null_mut()) }.unwrap_err(),
        Error::NullPointer
    );
    // SAFETY: as above.
    assert_eq!(
        unsafe { ManagedTensor::from_raw(std::ptr::null_mut()) }.unwrap_err(),
        Error::NullPointer
    );
}

#[test]
fn unknown_major_versions_only_call_the_deleter() {
    for major in [0u32, 2, 255] {
        let version = DLPackVersion { major, minor: 0 };
        // The tensor is garbage: a consumer must not read it for an unknown major.
        expect_err(
            |f| {
                f.managed.version = version;
                f.managed.dl_tensor.ndim = -7;
                f.managed.dl_tensor.shape = 0x10 as *mut i64;
            },
            Error::UnsupportedVersion(version),
        );
    }
}

#[test]
fn newer_minor_is_accepted() {
    let (r, _) = import(|f| f.managed.version.minor = 9);
    assert_eq!(r.unwrap().version(), DLPackVersion { major: 1, minor: 9 });
}

#[test]
fn flags() {
    expect_err(
        |f| f.managed.flags = 1 << 40,
        Error::UnknownFlags {
            version: DLPackVersion { major: 1, minor: 3 },
            bits: 1 << 40,
        },
    );
    // A newer minor may define bits we do not know: accepted.
    let (r, _) = import(|f| {
        f.managed.version.minor = 4;
        f.managed.flags = 1 << 40 | DLPACK_FLAG_BITMASK_READ_ONLY;
    });
    assert!(r.unwrap().is_read_only());
    let (r, _) = import(|f| f.managed.flags = DLPACK_FLAG_BITMASK_IS_COPIED);
    assert!(r.unwrap().is_copied());
}

#[test]
fn ndim_and_shape_errors() {
    expect_err(|f| f.managed.dl_tensor.ndim = -1, Error::NegativeNdim(-1));
    expect_err(
        |f| f.managed.dl_tensor.ndim = 1 << 20,
        Error::TooManyDims(1 << 20),
    );
    expect_err(
        |f| f.managed.dl_tensor.shape = std::ptr::null_mut(),
        Error::NullShape,
    );
    expect_err(
        |f| f.shape[1] = -3,
        Error::NegativeDim {
            axis: 1,
            extent: -3,
        },
    );
    expect_err(|f| f.shape[0] = i64::MAX, Error::Overflow);
    expect_err(
        |f| {
            f.shape[0] = 1 << 40;
            f.shape[1] = 1 << 40;
        },
        Error::Overflow,
    );
    expect_err(|f| f.strides[0] = i64::MAX / 2, Error::Overflow);
    expect_err(
        |f| f.managed.dl_tensor.byte_offset = u64::MAX,
        Error::Overflow,
    );
}

#[test]
fn null_strides_mean_compact_row_major() {
    let (r, _) = import(|f| f.managed.dl_tensor.strides = std::ptr::null_mut());
    let t = r.unwrap();
    assert_eq!(t.strides().as_ref(), &[3, 1]);
    assert!(t.is_contiguous());
    assert!(t.raw_strides().is_none());
}

#[test]
fn zero_dim_with_null_shape_and_strides() {
    let (r, _) = import(|f| {
        f.managed.dl_tensor.ndim = 0;
        f.managed.dl_tensor.shape = std::ptr::null_mut();
        f.managed.dl_tensor.strides = std::ptr::null_mut();
    });
    let t = r.unwrap();
    assert_eq!(t.numel(), 1);
    assert_eq!(t.as_slice::<f32>().unwrap(), &[0.0]);
}

#[test]
fn data_and_dtype_errors() {
    expect_err(
        |f| f.managed.dl_tensor.data = std::ptr::null_mut(),
        Error::NullData,
    );
    for (code, bits, lanes) in [
        (6u8, 1u8, 1u16),
        (17, 8, 1),
        (15, 8, 1),
        (2, 0, 1),
        (2, 32, 0),
        (4, 32, 1),
        (9, 16, 1),
    ] {
        let dtype = DLDataType {
            code: DLDataTypeCode(code),
            bits,
            lanes,
        };
        expect_err(
            |f| f.managed.dl_tensor.dtype = dtype,
            Error::InvalidDtype(dtype),
        );
    }
    // Unknown codes and devices are held, not rejected; typed views refuse them.
    let (r, _) = import(|f| {
        f.managed.dl_tensor.dtype.code = DLDataTypeCode(40);
        f.managed.dl_tensor.device.device_type = DLDeviceType(99);
    });
    let t = r.unwrap();
    assert_eq!(format!("{:?}", t.device().device_type), "DLDeviceType(99)");
    assert!(matches!(
        t.as_slice::<f32>().unwrap_err(),
        Error::DtypeMismatch { .. }
    ));
    // Vector lanes are described but are not a scalar f32.
    let (r, _) = import(|f| f.managed.dl_tensor.dtype.lanes = 4);
    assert!(matches!(
        r.unwrap().as_slice::<f32>().unwrap_err(),
        Error::DtypeMismatch { .. }
    ));
}

#[test]
fn null_deleter_is_never_called() {
    let deletes = counter();
    let p = fake(deletes.clone(), |f| f.managed.deleter = None);
    // SAFETY: a well-formed fake.
    let t = unsafe { ManagedTensorVersioned::from_raw(p) }.unwrap();
    drop(t);
    assert_eq!(deletes.load(Ordering::SeqCst), 0);
    // Free it ourselves (as its producer would have arranged).
    // SAFETY: the allocation came from `fake` and was not freed.
    unsafe { fake_deleter(p) };
}

#[test]
fn legacy_import_validates_too() {
    #[repr(C)]
    struct Legacy {
        managed: DLManagedTensor,
        shape: [i64; 1],
        deletes: Arc<AtomicUsize>,
    }
    unsafe extern "C" fn del(p: *mut DLManagedTensor) {
        // SAFETY: made by Box::into_raw below; `managed` is the first field.
        let b = unsafe { Box::from_raw(p.cast::<Legacy>()) };
        b.deletes.fetch_add(1, Ordering::SeqCst);
    }
    let deletes = counter();
    let mut b = Box::new(Legacy {
        managed: DLManagedTensor {
            dl_tensor: DLTensor {
                data: std::ptr::null_mut(),
                device: DLDevice {
                    device_type: K_DL_CPU,
                    device_id: 0,
                },
                ndim: 1,
                dtype: dtype_f32(),
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(del),
        },
        shape: [5],
        deletes: deletes.clone(),
    });
    b.managed.dl_tensor.shape = b.shape.as_mut_ptr();
    // SAFETY: well-formed legacy tensor, except NULL data with 5 elements.
    let r = unsafe { ManagedTensor::from_raw(Box::into_raw(b).cast()) };
    assert_eq!(r.unwrap_err(), Error::NullData);
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}
