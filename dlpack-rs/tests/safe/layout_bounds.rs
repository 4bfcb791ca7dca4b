//! The exact bounds of layout validation: every addressed byte within `isize::MAX` of the data
//! pointer, below it and above it, and the dense byte size within `isize::MAX`; one past each
//! bound is refused with `Overflow`. (Sub-byte elements cannot reach the address bounds: an `i64` index
//! addresses at most `i64::MAX / 2` bytes of them.)

use dlpack_rs::ffi::{DLDataType, DLDataTypeCode};
use dlpack_rs::safe::{cpu_device, dtype_u16, dtype_u8, Error, Export, TensorInfo};

const MAX: i64 = isize::MAX as i64;

/// A non-NULL data pointer that is never read: validation only does arithmetic on it.
fn data() -> *mut core::ffi::c_void {
    core::ptr::NonNull::<u64>::dangling().as_ptr().cast()
}

fn strided(dtype: DLDataType, shape: &[i64], strides: &[i64], byte_offset: u64) -> TensorInfo {
    TensorInfo::strided(
        data(),
        cpu_device(),
        dtype,
        shape.to_vec(),
        strides.to_vec(),
    )
    .with_byte_offset(byte_offset)
}

fn int4() -> DLDataType {
    DLDataType {
        code: DLDataTypeCode::INT,
        bits: 4,
        lanes: 1,
    }
}

#[test]
fn the_lowest_byte_may_lie_isize_max_below_the_data_pointer_and_no_further() {
    // Element -MAX of u8s is the byte MAX below `data`.
    assert_eq!(strided(dtype_u8(), &[2], &[-MAX], 0).numel(), Ok(2));
    assert_eq!(
        strided(dtype_u8(), &[2], &[-MAX - 1], 0).numel(),
        Err(Error::Overflow)
    );
    // The byte offset moves the first element up: one byte of it makes room for one more.
    assert_eq!(strided(dtype_u8(), &[2], &[-MAX - 1], 1).numel(), Ok(2));
    // Two-byte elements: element -(MAX / 2) starts MAX - 1 bytes below, one more is too far.
    assert_eq!(strided(dtype_u16(), &[2], &[-(MAX / 2)], 0).numel(), Ok(2));
    assert_eq!(
        strided(dtype_u16(), &[2], &[-(MAX / 2) - 1], 0).numel(),
        Err(Error::Overflow)
    );
    assert_eq!(
        strided(dtype_u16(), &[2], &[-(MAX / 2) - 1], 2).numel(),
        Ok(2)
    );
}

#[test]
fn the_end_may_lie_isize_max_above_the_data_pointer_and_no_further() {
    // u8 element MAX - 1 ends at byte MAX.
    assert_eq!(strided(dtype_u8(), &[2], &[MAX - 1], 0).numel(), Ok(2));
    assert_eq!(
        strided(dtype_u8(), &[2], &[MAX], 0).numel(),
        Err(Error::Overflow)
    );
    assert_eq!(
        strided(dtype_u8(), &[1], &[1], (MAX - 1) as u64).numel(),
        Ok(1)
    );
    assert_eq!(
        strided(dtype_u8(), &[1], &[1], MAX as u64).numel(),
        Err(Error::Overflow)
    );
    // An empty tensor addresses nothing, but its offset is still bounded.
    assert_eq!(strided(dtype_u8(), &[0], &[1], MAX as u64).numel(), Ok(0));
    assert_eq!(
        strided(dtype_u8(), &[0], &[1], MAX as u64 + 1).numel(),
        Err(Error::Overflow)
    );
}

#[test]
fn the_dense_size_may_be_isize_max_bytes_and_no_more() {
    // Broadcast (stride 0): one byte addressed, but the dense size is what a copy needs.
    assert_eq!(
        strided(dtype_u8(), &[MAX], &[0], 0).numel(),
        Ok(MAX as usize)
    );
    assert_eq!(
        strided(dtype_u8(), &[2, 1 << 62], &[0, 0], 0).numel(),
        Err(Error::Overflow)
    );
    // Half-byte elements round up to whole bytes: 2 * MAX of them fill MAX bytes, one more
    // (2^64 - 1 = 3 * 6148914691236517205) needs a byte more.
    assert_eq!(
        strided(int4(), &[2, MAX], &[0, 0], 0).numel(),
        Ok(2 * MAX as usize)
    );
    assert_eq!(
        strided(int4(), &[3, 6148914691236517205], &[0, 0], 0).numel(),
        Err(Error::Overflow)
    );
}

#[test]
fn a_broadcast_export_reports_its_dense_size() {
    let t = Export::new(vec![7u8])
        .shape(&[MAX])
        .strides(&[0])
        .versioned()
        .unwrap();
    assert_eq!(t.numel(), MAX as usize);
    assert_eq!(t.nbytes(), MAX as usize);
    let t = Export::new(vec![7u16])
        .shape(&[3, 5])
        .strides(&[0, 0])
        .versioned()
        .unwrap();
    assert_eq!((t.numel(), t.nbytes()), (15, 30));
}
