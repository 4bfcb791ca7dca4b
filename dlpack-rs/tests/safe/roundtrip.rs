//! Export -> import round trips: every dtype helper and element type, strides, byte offsets,
//! 0-d and empty tensors, negative strides, and the metadata the consumer reads back.

use dlpack_rs::ffi::{DLDataType, DLDataTypeCode, DLDevice};
use dlpack_rs::safe::*;

/// Exports `bytes` raw with `dtype`/`shape`, imports it back through the versioned wrapper.
fn roundtrip_raw(bytes: Vec<u8>, dtype: DLDataType, shape: Vec<i64>) -> ManagedTensorVersioned {
    let mut bytes = bytes;
    let info = TensorInfo::contiguous(bytes.as_mut_ptr().cast(), cpu_device(), dtype, shape);
    // SAFETY: a fresh export of ours, handed to the importer.
    unsafe { ManagedTensorVersioned::from_raw(pack_versioned(bytes, info, 0)) }
        .expect("valid export")
}

#[test]
fn every_named_dtype_round_trips() {
    let helpers: [(DLDataType, DLDataTypeCode, u8); 15] = [
        (DLDataType::BOOL, DLDataTypeCode::BOOL, 8),
        (DLDataType::INT8, DLDataTypeCode::INT, 8),
        (DLDataType::INT16, DLDataTypeCode::INT, 16),
        (DLDataType::INT32, DLDataTypeCode::INT, 32),
        (DLDataType::INT64, DLDataTypeCode::INT, 64),
        (DLDataType::UINT8, DLDataTypeCode::UINT, 8),
        (DLDataType::UINT16, DLDataTypeCode::UINT, 16),
        (DLDataType::UINT32, DLDataTypeCode::UINT, 32),
        (DLDataType::UINT64, DLDataTypeCode::UINT, 64),
        (DLDataType::FLOAT16, DLDataTypeCode::FLOAT, 16),
        (DLDataType::BFLOAT16, DLDataTypeCode::BFLOAT, 16),
        (DLDataType::FLOAT32, DLDataTypeCode::FLOAT, 32),
        (DLDataType::FLOAT64, DLDataTypeCode::FLOAT, 64),
        (DLDataType::COMPLEX64, DLDataTypeCode::COMPLEX, 64),
        (DLDataType::COMPLEX128, DLDataTypeCode::COMPLEX, 128),
    ];
    for (dtype, code, bits) in helpers {
        assert_eq!((dtype.code, dtype.bits, dtype.lanes), (code, bits, 1));
        let item = bits as usize / 8;
        let t = roundtrip_raw(vec![0u8; item * 6], dtype, vec![2, 3]);
        assert_eq!(t.dtype(), dtype);
        assert_eq!(t.shape(), &[2, 3]);
        assert_eq!(t.strides().as_ref(), &[3, 1]);
        assert_eq!(t.numel(), 6);
        assert_eq!(t.nbytes(), item * 6);
        assert_eq!(t.device(), cpu_device());
        assert!(t.is_contiguous());
    }
}

fn typed<T: Element + PartialEq + std::fmt::Debug>(values: Vec<T>) {
    let expected = values.clone();
    let n = values.len();
    let mut t = Export::new(values).versioned().expect("export");
    assert_eq!(t.dtype(), T::DTYPE);
    assert_eq!(t.shape(), &[n as i64]);
    assert_eq!(t.as_slice::<T>().unwrap(), &expected[..]);
    assert_eq!(t.as_mut_slice::<T>().unwrap().len(), n);
}

#[test]
fn every_element_type_round_trips_typed() {
    typed(vec![true, false, true]);
    typed(vec![-1i8, 2, -3]);
    typed(vec![-1i16, 2, i16::MAX]);
    typed(vec![-1i32, 2, i32::MIN]);
    typed(vec![-1i64, 2, i64::MAX]);
    typed(vec![1u8, 2, 255]);
    typed(vec![1u16, 2, u16::MAX]);
    typed(vec![1u32, 2, u32::MAX]);
    typed(vec![1u64, 2, u64::MAX]);
    typed(vec![1.5f32, -2.0, f32::INFINITY]);
    typed(vec![1.5f64, -2.0, f64::MIN_POSITIVE]);
}

#[cfg(feature = "half")]
#[test]
fn half_types_round_trip() {
    typed(vec![half::f16::from_f32(1.5), half::f16::from_f32(-2.0)]);
    typed(vec![half::bf16::from_f32(1.5), half::bf16::from_f32(-2.0)]);
}

#[cfg(feature = "num-complex")]
#[test]
fn complex_types_round_trip() {
    typed(vec![num_complex::Complex32::new(1.0, -1.0)]);
    typed(vec![
        num_complex::Complex64::new(0.5, 2.0),
        num_complex::Complex64::new(-3.0, 4.0),
    ]);
}

#[test]
fn container_kinds_export() {
    let boxed: Box<[i32]> = vec![1, 2, 3, 4].into_boxed_slice();
    let t = Export::new(boxed).shape(&[2, 2]).legacy().unwrap();
    assert_eq!(t.as_slice::<i32>().unwrap(), &[1, 2, 3, 4]);

    let shared: std::sync::Arc<[f64]> = vec![1.0, 2.0].into();
    let t = Export::new(shared.clone()).versioned().unwrap();
    assert!(t.is_read_only(), "Arc is shared: exported read-only");
    assert_eq!(
        t.as_slice::<f64>().unwrap().as_ptr(),
        shared.as_ptr(),
        "zero copy"
    );
    assert_eq!(Export::new(shared).legacy().unwrap_err(), Error::ReadOnly);

    static STATIC: [u8; 3] = [7, 8, 9];
    let t = Export::new(&STATIC[..]).versioned().unwrap();
    assert!(t.is_read_only());
    assert_eq!(t.as_slice::<u8>().unwrap(), &[7, 8, 9]);

    let t = Export::new(vec![1u8, 2]).read_only().versioned().unwrap();
    assert!(t.is_read_only());
}

#[test]
fn zero_copy_write_visible_through_the_export() {
    let values = vec![0u32; 4];
    let ptr = values.as_ptr();
    let mut t = Export::new(values).versioned().unwrap();
    assert_eq!(t.data_ptr().cast::<u32>().cast_const(), ptr);
    t.as_mut_slice::<u32>().unwrap()[2] = 42;
    assert_eq!(t.as_slice::<u32>().unwrap(), &[0, 0, 42, 0]);
}

#[test]
fn strided_views() {
    // Transpose of a 2x3 matrix stored row-major.
    let t = Export::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])
        .shape(&[3, 2])
        .strides(&[1, 3])
        .versioned()
        .unwrap();
    assert_eq!(t.strides().as_ref(), &[1, 3]);
    assert!(!t.is_contiguous());
    assert_eq!(t.as_slice::<f32>().unwrap_err(), Error::NotContiguous);

    // Every other element.
    let t = Export::new(vec![0u8; 10])
        .shape(&[5])
        .strides(&[2])
        .legacy()
        .unwrap();
    assert!(!t.is_contiguous());

    // Size-1 dimensions may carry any stride and stay contiguous.
    let t = Export::new(vec![0i16; 6])
        .shape(&[2, 1, 3])
        .strides(&[3, 77, 1])
        .versioned()
        .unwrap();
    assert!(t.is_contiguous());
    assert_eq!(t.as_slice::<i16>().unwrap().len(), 6);
}

#[test]
fn negative_strides_within_the_buffer() {
    // A reversed view: the first element is the last one in memory, via byte_offset.
    let mut data = vec![1i32, 2, 3, 4];
    let base = data.as_mut_ptr();
    let info = TensorInfo::strided(base.cast(), cpu_device(), dtype_i32(), vec![4], vec![-1])
        .with_byte_offset(12);
    // SAFETY: fresh export of ours.
    let t = unsafe { ManagedTensorVersioned::from_raw(pack_versioned(data, info, 0)) }.unwrap();
    assert_eq!(t.strides().as_ref(), &[-1]);
    assert_eq!(t.byte_offset(), 12);
    let first = t.data_ptr().cast::<i32>();
    // SAFETY: the first element lies at data + byte_offset inside the 4-element buffer.
    assert_eq!(unsafe { *first }, 4);
    assert!(!t.is_contiguous());

    // The safe builder refuses a negative stride that would leave the buffer.
    let err = Export::new(vec![1i32, 2, 3, 4])
        .shape(&[4])
        .strides(&[-1])
        .versioned()
        .unwrap_err();
    assert_eq!(
        err,
        Error::OutOfBounds {
            len: 4,
            min: -3,
            max: 0
        }
    );
}

#[test]
fn byte_offset_moves_the_first_element() {
    let mut data = vec![9u8, 9, 1, 2, 3, 4];
    let info = TensorInfo::contiguous(
        data.as_mut_ptr().cast(),
        cpu_device(),
        dtype_u8(),
        vec![2, 2],
    )
    .with_byte_offset(2);
    // SAFETY: fresh export of ours.
    let t = unsafe { ManagedTensor::from_raw(pack(data, info)) }.unwrap();
    assert_eq!(t.byte_offset(), 2);
    assert_eq!(t.as_slice::<u8>().unwrap(), &[1, 2, 3, 4]);
}

#[test]
fn zero_dimensional_and_empty_tensors() {
    let t = Export::new(vec![3.5f64])
        .shape::<i64>(&[])
        .versioned()
        .unwrap();
    assert_eq!(t.ndim(), 0);
    assert_eq!(t.shape(), &[] as &[i64]);
    assert_eq!(t.numel(), 1);
    assert_eq!(t.as_slice::<f64>().unwrap(), &[3.5]);

    for shape in [vec![0i64], vec![3, 0], vec![0, 5, 2]] {
        let t = Export::new(Vec::<f32>::new())
            .shape(&shape)
            .versioned()
            .unwrap();
        assert_eq!(t.shape(), &shape[..]);
        assert_eq!(t.numel(), 0);
        assert_eq!(t.nbytes(), 0);
        assert!(t.is_contiguous());
        assert_eq!(t.as_slice::<f32>().unwrap(), &[] as &[f32]);
    }

    // A NULL data pointer is fine for an empty tensor.
    let info = TensorInfo::contiguous(std::ptr::null_mut(), cpu_device(), dtype_f32(), vec![0, 4]);
    // SAFETY: fresh export of ours.
    let t = unsafe { ManagedTensorVersioned::from_raw(pack_versioned((), info, 0)) }.unwrap();
    assert!(t.data_ptr().is_null());
    assert_eq!(t.as_slice::<f32>().unwrap().len(), 0);
}

#[test]
fn thirty_two_dims_of_one() {
    let t = Export::new(vec![1u8])
        .shape(&[1usize; 32])
        .versioned()
        .unwrap();
    assert_eq!(t.ndim(), 32);
    assert_eq!(t.numel(), 1);
    assert!(t.is_contiguous());
}

#[test]
fn export_validation_errors() {
    assert_eq!(
        Export::new(vec![0u8; 4])
            .shape(&[2, 2])
            .strides(&[1])
            .versioned()
            .unwrap_err(),
        Error::StridesLength {
            shape: 2,
            strides: 1
        }
    );
    assert_eq!(
        Export::new(vec![0u8; 4])
            .shape(&[2, -2])
            .versioned()
            .unwrap_err(),
        Error::NegativeDim {
            axis: 1,
            extent: -2
        }
    );
    assert_eq!(
        Export::new(vec![0u8; 4])
            .shape(&[5])
            .versioned()
            .unwrap_err(),
        Error::OutOfBounds {
            len: 4,
            min: 0,
            max: 4
        }
    );
    assert_eq!(
        Export::new(vec![0u8; 4])
            .shape(&[2, 2])
            .strides(&[3, 1])
            .versioned()
            .unwrap_err(),
        Error::OutOfBounds {
            len: 4,
            min: 0,
            max: 4
        }
    );
    assert_eq!(
        Export::new(vec![0u8; 4])
            .shape(&[u64::MAX])
            .versioned()
            .unwrap_err(),
        Error::Overflow
    );
    assert_eq!(
        Export::new(vec![0u8; 4])
            .shape(&[i64::MAX, i64::MAX])
            .versioned()
            .unwrap_err(),
        Error::Overflow
    );
    assert_eq!(
        Export::new(vec![0u8; 4])
            .shape(&[2, 2])
            .strides(&[i64::MAX, 1])
            .versioned()
            .unwrap_err(),
        Error::Overflow
    );

    // Raw metadata: NULL data with elements, bad dtypes, too many dims.
    let info = TensorInfo::contiguous(std::ptr::null_mut(), cpu_device(), dtype_f32(), vec![2]);
    assert_eq!(info.numel(), Err(Error::NullData));
    let bad_bool = DLDataType {
        code: DLDataTypeCode::BOOL,
        bits: 1,
        lanes: 1,
    };
    let mut x = 0u8;
    let info = TensorInfo::contiguous((&mut x as *mut u8).cast(), cpu_device(), bad_bool, vec![1]);
    assert_eq!(
        try_pack((), info).unwrap_err(),
        Error::InvalidDtype(bad_bool)
    );
    let info = TensorInfo::contiguous(
        (&mut x as *mut u8).cast(),
        cpu_device(),
        dtype_u8(),
        vec![1; TensorInfo::MAX_NDIM + 1],
    );
    assert!(matches!(
        try_pack_versioned((), info, 0).unwrap_err(),
        Error::TooManyDims(_)
    ));
}

#[test]
fn device_memory_is_described_but_not_viewed() {
    let fake_device_ptr = 0x1000usize as *mut std::ffi::c_void;
    let info = TensorInfo::contiguous(fake_device_ptr, cuda_device(1), dtype_f32(), vec![4]);
    // SAFETY: fresh export of ours; the pointer is never dereferenced for a CUDA device.
    let t = unsafe { ManagedTensorVersioned::from_raw(pack_versioned((), info, 0)) }.unwrap();
    assert_eq!(
        t.device(),
        DLDevice {
            device_type: dlpack_rs::ffi::DLDeviceType::CUDA,
            device_id: 1
        }
    );
    assert_eq!(
        t.as_slice::<f32>().unwrap_err(),
        Error::NotHostAccessible(cuda_device(1))
    );
}

#[test]
fn typed_view_errors() {
    let t = Export::new(vec![1u16, 2]).versioned().unwrap();
    assert_eq!(
        t.as_slice::<i16>().unwrap_err(),
        Error::DtypeMismatch {
            expected: DLDataType::INT16,
            found: dtype_u16()
        }
    );

    // Misaligned: f32 data one byte into a buffer.
    let mut bytes = vec![0u8; 17];
    let info = TensorInfo::contiguous(
        bytes.as_mut_ptr().cast(),
        cpu_device(),
        dtype_f32(),
        vec![4],
    )
    .with_byte_offset(1);
    // SAFETY: fresh export of ours.
    let t = unsafe { ManagedTensorVersioned::from_raw(pack_versioned(bytes, info, 0)) }.unwrap();
    assert!(matches!(
        t.as_slice::<f32>().unwrap_err(),
        Error::Misaligned { align: 4, .. }
    ));

    // A bool tensor holding the byte 2 is not a valid &[bool].
    let mut bytes = vec![0u8, 1, 2];
    let info = TensorInfo::contiguous(
        bytes.as_mut_ptr().cast(),
        cpu_device(),
        dtype_bool(),
        vec![3],
    );
    // SAFETY: fresh export of ours.
    let t = unsafe { ManagedTensorVersioned::from_raw(pack_versioned(bytes, info, 0)) }.unwrap();
    assert_eq!(t.as_slice::<bool>().unwrap_err(), Error::InvalidBool);
}

#[test]
fn errors_display_what_is_wrong() {
    let msg = Error::NegativeDim {
        axis: 1,
        extent: -3,
    }
    .to_string();
    assert!(msg.contains("dimension 1") && msg.contains("-3"), "{msg}");
    let e: &dyn std::error::Error = &Error::Overflow;
    assert!(e.to_string().contains("overflow"));
}

/// A user buffer whose memory is on a CUDA device (a real host allocation stands in for it:
/// nothing may read it from the CPU).
struct DeviceBuffer(Box<[f32]>);

// SAFETY: the elements live in the box's heap block, which does not move; the buffer says they
// are on CUDA device 0, and nothing in this test reads them from the host.
unsafe impl dlpack_rs::safe::Buffer for DeviceBuffer {
    type Elem = f32;
    fn data_ptr(&self) -> *mut f32 {
        self.0.as_ptr().cast_mut()
    }
    fn num_elements(&self) -> usize {
        self.0.len()
    }
    fn is_writable(&self) -> bool {
        false
    }
    fn device(&self) -> dlpack_rs::ffi::DLDevice {
        dlpack_rs::safe::cuda_device(0)
    }
    fn stream_order(&self) -> Option<std::sync::Arc<dyn StreamOrder>> {
        Some(std::sync::Arc::new(NoWork))
    }
}

/// A stream order with nothing to wait for.
struct NoWork;

impl StreamOrder for NoWork {
    fn order_before(&self, _: DLDevice, _: i64) -> Result<(), Error> {
        Ok(())
    }
}

/// The standard buffers have no pending device work; a device buffer's order passes through an
/// `Arc` (what a mutable derived class holds).
#[test]
fn stream_orders_are_the_buffers_own() {
    assert!(Buffer::stream_order(&vec![1.0f32]).is_none());
    assert!(Buffer::stream_order(&AlignedBuffer::<f32>::from_slice(&[1.0]).unwrap()).is_none());
    let device = DeviceBuffer(vec![1.0; 4].into());
    assert!(Buffer::stream_order(&device).is_some());
    assert!(Buffer::stream_order(&std::sync::Arc::new(device)).is_some());
}

/// `Export` took the CPU as every buffer's device, so device memory (directly, or through an
/// `Arc`) came back as a host tensor whose `as_slice` read it on the CPU (found in review).
#[test]
fn export_keeps_the_buffers_device_and_refuses_host_views() {
    let t = Export::new(DeviceBuffer(vec![1.0; 4].into()))
        .versioned()
        .unwrap();
    assert_eq!(t.device(), dlpack_rs::safe::cuda_device(0));
    assert!(t.as_slice::<f32>().is_err());
    let shared = std::sync::Arc::new(DeviceBuffer(vec![1.0; 4].into()));
    let t = Export::new(shared).versioned().unwrap();
    assert_eq!(t.device(), dlpack_rs::safe::cuda_device(0));
    assert!(t.as_slice::<f32>().is_err());
    assert!(t.is_read_only());
}

/// `AlignedBuffer` through `Export`: aligned as asked, values intact, writable.
#[test]
fn aligned_buffer_exports_aligned() {
    let mut data = dlpack_rs::safe::AlignedBuffer::<f64>::zeroed(5).unwrap();
    data.copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0]);
    let mut t = Export::new(data).shape(&[5]).versioned().unwrap();
    assert_eq!(t.data_ptr() as usize % 64, 0);
    t.as_mut_slice::<f64>().unwrap()[0] = 10.0;
    assert_eq!(&*t.as_slice::<f64>().unwrap(), &[10.0, 2.0, 3.0, 4.0, 5.0]);
    let page = dlpack_rs::safe::AlignedBuffer::<u8, 4096>::from_elem(7, 3).unwrap();
    assert_eq!(page.as_ptr() as usize % 4096, 0);
    assert_eq!(&*page, &[7, 7, 7]);
    let empty = dlpack_rs::safe::AlignedBuffer::<f32>::zeroed(0).unwrap();
    assert_eq!((empty.len(), empty.as_ptr() as usize % 64), (0, 0));
    assert_eq!(empty.clone(), empty);
    assert!(dlpack_rs::safe::AlignedBuffer::<f64>::zeroed(usize::MAX).is_err());
}
