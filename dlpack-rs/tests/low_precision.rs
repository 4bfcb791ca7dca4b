//! Low-precision dtypes: the bits and lanes each DLPack 1.3 type code allows on import (one
//! test per code), their Python names, packed views and exports of sub-byte data with exact
//! byte counts and borrow ranges, and (feature `float8`) typed FP8 elements.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dlpack_rs::ffi::*;
use dlpack_rs::safe::{Error, Export, ManagedTensorVersioned, Packing};

/// A hand-built producer over memory the test owns (`data`), with a counting deleter.
#[repr(C)]
struct Fake {
    managed: DLManagedTensorVersioned,
    shape: Vec<i64>,
    deletes: Arc<AtomicUsize>,
}

unsafe extern "C" fn fake_deleter(ptr: *mut DLManagedTensorVersioned) {
    // SAFETY: every Fake is made by `import` through Box::into_raw; `managed` is its first field.
    let fake = unsafe { Box::from_raw(ptr.cast::<Fake>()) };
    fake.deletes.fetch_add(1, Ordering::SeqCst);
}

/// Imports a 1-D tensor of `len` elements of `dtype` at `data + byte_offset`, with `flags`;
/// returns the result and how often the deleter ran.
fn import(
    data: *mut u8,
    byte_offset: u64,
    dtype: DLDataType,
    len: i64,
    flags: u64,
) -> (Result<ManagedTensorVersioned, Error>, Arc<AtomicUsize>) {
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut f = Box::new(Fake {
        managed: DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 3 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(fake_deleter),
            flags,
            dl_tensor: DLTensor {
                data: data.cast::<c_void>(),
                device: DLDevice {
                    device_type: K_DL_CPU,
                    device_id: 0,
                },
                ndim: 1,
                dtype,
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset,
            },
        },
        shape: vec![len],
        deletes: deletes.clone(),
    });
    f.managed.dl_tensor.shape = f.shape.as_mut_ptr();
    // SAFETY: a well-formed struct (shape holds ndim values, NULL strides are compact) whose
    // data, kept alive by the caller, holds the bytes the dtype and length need; ours to pass.
    let r = unsafe { ManagedTensorVersioned::from_raw(Box::into_raw(f).cast()) };
    (r, deletes)
}

fn dtype(code: u8, bits: u8, lanes: u16) -> DLDataType {
    DLDataType {
        code: DLDataTypeCode(code),
        bits,
        lanes,
    }
}

/// Imports four elements of each `(bits, lanes)` of `code`: the `ok` ones are accepted, the
/// others refused with `InvalidDtype`, whose message names the rule of the code when it has
/// one; the deleter runs once either way (on drop for an accepted one).
fn check_code(code: u8, ok: &[(u8, u16)], refused: &[(u8, u16)]) {
    let mut buf = vec![0u8; 4 * 255 * 4];
    for &(bits, lanes) in ok {
        let (r, deletes) = import(buf.as_mut_ptr(), 0, dtype(code, bits, lanes), 4, 0);
        let t = r.unwrap_or_else(|e| panic!("code {code} {bits}x{lanes} refused: {e}"));
        drop(t);
        assert_eq!(deletes.load(Ordering::SeqCst), 1);
    }
    for &(bits, lanes) in refused {
        let d = dtype(code, bits, lanes);
        let (r, deletes) = import(buf.as_mut_ptr(), 0, d, 4, 0);
        let err = r.expect_err("a malformed dtype is refused");
        assert_eq!(err, Error::InvalidDtype(d), "code {code} {bits}x{lanes}");
        assert_eq!(deletes.load(Ordering::SeqCst), 1);
        let message = err.to_string();
        assert!(message.starts_with(&format!(
            "invalid dtype: code {:?}, bits {bits}, lanes {lanes}",
            d.code
        )));
        if let Some(rule) = d.code.rule() {
            assert!(
                message.ends_with(&format!("({:?} must be {rule})", d.code)),
                "{message}"
            );
        }
    }
}

#[test]
fn code_0_int() {
    check_code(
        0,
        &[(8, 1), (4, 1), (1, 1), (64, 1), (32, 4)],
        &[(0, 1), (8, 0)],
    );
}

#[test]
fn code_1_uint() {
    check_code(1, &[(8, 1), (4, 1), (16, 1), (8, 4)], &[(0, 1), (8, 0)]);
}

#[test]
fn code_2_float() {
    check_code(2, &[(16, 1), (32, 1), (64, 1), (32, 4)], &[(0, 1), (32, 0)]);
}

#[test]
fn code_3_opaque_handle() {
    check_code(3, &[(64, 1)], &[(0, 1), (64, 0)]);
}

#[test]
fn code_4_bfloat16() {
    check_code(4, &[(16, 1), (16, 2)], &[(8, 1), (32, 1), (16, 0), (0, 1)]);
}

#[test]
fn code_5_complex() {
    check_code(5, &[(64, 1), (128, 1)], &[(0, 1), (64, 0)]);
}

#[test]
fn code_6_bool() {
    check_code(6, &[(8, 1)], &[(1, 1), (16, 1), (8, 0)]);
}

/// The eight FP8 codes: 8 bits, 1 lane, nothing else.
fn check_fp8(code: u8) {
    check_code(code, &[(8, 1)], &[(4, 1), (16, 1), (8, 2), (8, 0), (0, 1)]);
}

#[test]
fn code_7_float8_e3m4() {
    check_fp8(7);
}

#[test]
fn code_8_float8_e4m3() {
    check_fp8(8);
}

#[test]
fn code_9_float8_e4m3b11fnuz() {
    check_fp8(9);
}

#[test]
fn code_10_float8_e4m3fn() {
    check_fp8(10);
}

#[test]
fn code_11_float8_e4m3fnuz() {
    check_fp8(11);
}

#[test]
fn code_12_float8_e5m2() {
    check_fp8(12);
}

#[test]
fn code_13_float8_e5m2fnuz() {
    check_fp8(13);
}

#[test]
fn code_14_float8_e8m0fnu() {
    check_fp8(14);
}

#[test]
fn code_15_float6_e2m3fn() {
    check_code(15, &[(6, 1)], &[(8, 1), (4, 1), (6, 2), (6, 0)]);
}

#[test]
fn code_16_float6_e3m2fn() {
    check_code(16, &[(6, 1)], &[(8, 1), (6, 2), (6, 0)]);
}

#[test]
fn code_17_float4_e2m1fn() {
    // jax: 4 bits x 1 lane; torch's float4_e2m1fn_x2: 4 bits x 2 lanes.
    check_code(
        17,
        &[(4, 1), (4, 2)],
        &[(8, 1), (8, 2), (4, 4), (4, 3), (4, 0), (0, 1)],
    );
}

#[test]
fn code_18_and_unknown_codes_only_need_non_zero_bits_and_lanes() {
    check_code(18, &[(32, 1)], &[(0, 1), (32, 0)]);
    check_code(200, &[(24, 3)], &[(0, 1), (8, 0)]);
}

#[test]
fn python_names_of_every_code() {
    let cases: &[(DLDataType, &str)] = &[
        (dtype(0, 8, 1), "int8"),
        (dtype(0, 4, 1), "int4"),
        (dtype(1, 64, 1), "uint64"),
        (dtype(2, 16, 1), "float16"),
        (dtype(4, 16, 1), "bfloat16"),
        (dtype(5, 128, 1), "complex128"),
        (dtype(6, 8, 1), "bool"),
        (dtype(7, 8, 1), "float8_e3m4"),
        (dtype(8, 8, 1), "float8_e4m3"),
        (dtype(9, 8, 1), "float8_e4m3b11fnuz"),
        (dtype(10, 8, 1), "float8_e4m3fn"),
        (dtype(11, 8, 1), "float8_e4m3fnuz"),
        (dtype(12, 8, 1), "float8_e5m2"),
        (dtype(13, 8, 1), "float8_e5m2fnuz"),
        (dtype(14, 8, 1), "float8_e8m0fnu"),
        (dtype(15, 6, 1), "float6_e2m3fn"),
        (dtype(16, 6, 1), "float6_e3m2fn"),
        (dtype(17, 4, 1), "float4_e2m1fn"),
        (dtype(17, 4, 2), "float4_e2m1fn_x2"),
        (dtype(2, 32, 4), "dtype(code=kDLFloat, bits=32, lanes=4)"),
        (
            dtype(3, 64, 1),
            "dtype(code=kDLOpaqueHandle, bits=64, lanes=1)",
        ),
        (
            dtype(200, 8, 1),
            "dtype(code=DLDataTypeCode(200), bits=8, lanes=1)",
        ),
    ];
    for &(d, name) in cases {
        assert_eq!(d.name().to_string(), name);
    }
    assert!(dtype(6, 8, 1).numpy_has());
    assert!(dtype(2, 16, 1).numpy_has());
    assert!(!dtype(4, 16, 1).numpy_has());
    assert!(!dtype(10, 8, 1).numpy_has());
    assert!(!dtype(17, 4, 2).numpy_has());
}

#[test]
fn dtype_mismatch_names_both_dtypes() {
    let t = Export::new(vec![1u8, 2, 3])
        .packed(DLDataType::new(DLDataTypeCode::FLOAT8_E4M3FN, 8, 1))
        .versioned()
        .unwrap();
    let err = t.as_slice::<u8>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "dtype mismatch: asked for uint8 (kDLUInt/8x1), tensor holds float8_e4m3fn \
         (kDLFloat8_e4m3fn/8x1)"
    );
}

#[test]
fn fp4_byte_counts_follow_the_producers() {
    let jax = Packing::of(DLDataType::FLOAT4_E2M1FN).unwrap();
    let torch = Packing::of(DLDataType::FLOAT4_E2M1FN_X2).unwrap();
    let fp6 = Packing::of(dtype(15, 6, 1)).unwrap();
    for (numel, jax_bytes, torch_bytes, fp6_bytes) in [
        (0, 0, 0, 0),
        (1, 1, 1, 1),
        (4, 2, 4, 3),
        (5, 3, 5, 4),
        (7, 4, 7, 6),
    ] {
        assert_eq!(jax.nbytes(numel), Some(jax_bytes));
        assert_eq!(torch.nbytes(numel), Some(torch_bytes));
        assert_eq!(fp6.nbytes(numel), Some(fp6_bytes));
    }
    assert_eq!(jax.nbytes(usize::MAX), Some(usize::MAX / 2 + 1));
    assert_eq!(
        Packing::of(dtype(10, 8, 1)).unwrap().nbytes(usize::MAX),
        Some(usize::MAX)
    );
    assert_eq!(
        Packing::of(dtype(2, 32, 1)),
        Err(Error::NotPacked(dtype(2, 32, 1)))
    );
}

#[test]
fn fp6_values_cross_byte_boundaries_little_bit_endian() {
    let p = Packing::of(dtype(16, 6, 1)).unwrap();
    let bytes = p.pack(&[0x3f, 0x00, 0x2a, 0x15]);
    // Bits, lowest first: 111111 000000 010101 101010 -> 0x3f, 0xa0, 0x56.
    assert_eq!(bytes, [0x3f, 0xa0, 0x56]);
    let back: Vec<u8> = (0..4).map(|i| p.value(&bytes, i).unwrap()).collect();
    assert_eq!(back, [0x3f, 0x00, 0x2a, 0x15]);
    assert_eq!(p.value(&bytes, 4), None);
}

#[test]
fn packed_export_and_view_of_odd_length_fp4() {
    // jax's layout of [0.5, 1, 1.5, 2, 3]: codes 1..=5, two per byte, low nibble first.
    let t = Export::new(vec![0x21u8, 0x43, 0x05])
        .packed(DLDataType::FLOAT4_E2M1FN)
        .shape(&[5])
        .versioned()
        .unwrap();
    assert_eq!((t.numel(), t.nbytes()), (5, 3));
    let p = t.as_packed().unwrap();
    assert_eq!(p.bytes(), [0x21, 0x43, 0x05]);
    assert_eq!(p.numel(), 5);
    assert_eq!(
        format!("{p:?}"),
        "PackedSlice { dtype: float4_e2m1fn, numel: 5, bytes: [33, 67, 5] }"
    );
    assert_eq!(p.values().collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    assert_eq!((p.value(4), p.value(5)), (Some(5), None));

    // torch's x2 form of the same three bytes: three elements, six values.
    let t = Export::new(vec![0x21u8, 0x43, 0x05])
        .packed(DLDataType::FLOAT4_E2M1FN_X2)
        .versioned()
        .unwrap();
    assert_eq!((t.shape(), t.nbytes()), (&[3][..], 3));
    let p = t.as_packed().unwrap();
    assert_eq!(p.value_count(), 6);
    assert_eq!(p.values().collect::<Vec<_>>(), [1, 2, 3, 4, 5, 0]);
}

#[test]
fn packed_export_needs_the_exact_byte_count() {
    let too_many = Export::new(vec![0u8; 4])
        .packed(DLDataType::FLOAT4_E2M1FN)
        .shape(&[5])
        .versioned();
    assert_eq!(
        too_many.unwrap_err(),
        Error::PackedLength {
            bytes: 4,
            numel: 5,
            needed: 3
        }
    );
    // Packed bytes have no strides: value `i` sits where its index says.
    let strided = Export::new(vec![0u8; 3])
        .packed(DLDataType::FLOAT4_E2M1FN)
        .shape(&[5])
        .strides(&[1])
        .versioned();
    assert_eq!(strided.unwrap_err(), Error::NotContiguous);
    let too_few = Export::new(vec![0u8; 2])
        .packed(DLDataType::FLOAT4_E2M1FN)
        .shape(&[5])
        .legacy();
    assert_eq!(
        too_few.unwrap_err().to_string(),
        "5 packed elements need 3 bytes, the buffer has 2"
    );
    // By default: as many whole elements as the bytes hold.
    let t = Export::new(vec![0u8; 3])
        .packed(dtype(15, 6, 1))
        .versioned()
        .unwrap();
    assert_eq!(t.shape(), &[4]);
    let wide = Export::new(vec![0u8; 4])
        .packed(dtype(2, 32, 1))
        .versioned();
    assert_eq!(wide.unwrap_err(), Error::NotPacked(dtype(2, 32, 1)));
}

#[test]
fn packed_view_borrows_exactly_the_packed_bytes() {
    let mut buf = vec![0x11u8; 8];
    let data = buf.as_mut_ptr();
    // Five FP4 values from byte 0: bytes 0, 1, 2.
    let (fp4, _) = import(data, 0, DLDataType::FLOAT4_E2M1FN, 5, 0);
    let fp4 = fp4.unwrap();
    let view = fp4.as_packed().unwrap();
    assert_eq!(view.bytes().len(), 3);
    // Byte 3 is not borrowed: a mutable view of it is granted.
    let (mut next, _) = import(data, 3, dtype(1, 8, 1), 1, 0);
    let next = next.as_mut().unwrap();
    next.as_mut_slice::<u8>().unwrap()[0] = 7;
    // Byte 2 is (the half-used last byte): refused.
    let (mut last, _) = import(data, 2, dtype(1, 8, 1), 1, 0);
    assert_eq!(
        last.as_mut().unwrap().as_mut_slice::<u8>().unwrap_err(),
        Error::AlreadyBorrowed { exclusive: true }
    );
    drop(view);
    assert!(last.unwrap().as_mut_slice::<u8>().is_ok());
}

#[test]
fn packed_views_need_contiguous_host_data_of_narrow_values() {
    let t = Export::new(vec![0u8; 0])
        .packed(DLDataType::FLOAT4_E2M1FN)
        .versioned()
        .unwrap();
    let p = t.as_packed().unwrap();
    assert_eq!((p.numel(), p.bytes().len(), p.values().count()), (0, 0, 0));
    let wide = dlpack_rs::safe::Export::new(vec![1.0f32])
        .versioned()
        .unwrap();
    assert_eq!(
        wide.as_packed().unwrap_err(),
        Error::NotPacked(dlpack_rs::safe::dtype_f32())
    );
    let strided = dlpack_rs::safe::Export::new(vec![1u8, 2, 3, 4])
        .shape(&[2])
        .strides(&[2])
        .versioned()
        .unwrap();
    assert_eq!(strided.as_packed().unwrap_err(), Error::NotContiguous);
    let bytes = strided.copy().unwrap();
    assert_eq!(bytes.as_packed().unwrap().bytes(), [1, 3]);
}

#[test]
fn padded_sub_byte_imports_are_refused() {
    let mut buf = vec![0u8; 8];
    let (r, deletes) = import(
        buf.as_mut_ptr(),
        0,
        DLDataType::FLOAT4_E2M1FN,
        5,
        DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
    );
    assert_eq!(
        r.unwrap_err(),
        Error::PaddedSubByte(DLDataType::FLOAT4_E2M1FN)
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
    // Whole-byte elements are the same padded or packed: accepted.
    for d in [
        DLDataType::FLOAT4_E2M1FN_X2,
        DLDataType::new(DLDataTypeCode::FLOAT8_E5M2, 8, 1),
    ] {
        let (r, _) = import(
            buf.as_mut_ptr(),
            0,
            d,
            5,
            DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
        );
        assert!(r.is_ok());
    }
}

#[cfg(feature = "float8")]
mod float8_elements {
    use super::*;
    use dlpack_rs::safe::{AnyBitPattern, Element, Export};
    use float8::{F8E4M3, F8E5M2};

    fn is_any_bit_pattern<T: AnyBitPattern>() {}

    #[test]
    fn dtypes_are_the_ones_torch_and_jax_use() {
        assert_eq!(F8E4M3::DTYPE, dtype(10, 8, 1));
        assert_eq!(F8E5M2::DTYPE, dtype(12, 8, 1));
        assert_eq!(F8E4M3::DTYPE.name().to_string(), "float8_e4m3fn");
        assert_eq!(F8E5M2::DTYPE.name().to_string(), "float8_e5m2");
        is_any_bit_pattern::<F8E4M3>();
        is_any_bit_pattern::<F8E5M2>();
    }

    #[test]
    fn typed_export_and_view() {
        let values = [0.5f32, 1.0, 1.5, 2.0, 3.0, -448.0];
        let t = Export::new(values.map(F8E4M3::from_f32).to_vec())
            .shape(&[2, 3])
            .versioned()
            .unwrap();
        assert_eq!(t.dtype(), dtype(10, 8, 1));
        let back: Vec<f32> = t
            .as_slice::<F8E4M3>()
            .unwrap()
            .iter()
            .map(|x| x.to_f32())
            .collect();
        assert_eq!(back, values);
        // The bytes torch and jax export for these values (0x30 is 0.5 in e4m3fn).
        assert_eq!(
            t.as_packed().unwrap().bytes(),
            [0x30, 0x38, 0x3c, 0x40, 0x44, 0xfe]
        );
    }

    #[test]
    fn the_other_variant_is_refused_with_both_names() {
        let t = Export::new(vec![F8E5M2::from_f32(2.0)])
            .versioned()
            .unwrap();
        let err = t.as_slice::<F8E4M3>().unwrap_err();
        assert_eq!(
            err,
            Error::DtypeMismatch {
                expected: dtype(10, 8, 1),
                found: dtype(12, 8, 1)
            }
        );
        let message = err.to_string();
        assert!(
            message.contains("asked for float8_e4m3fn") && message.contains("holds float8_e5m2")
        );
        // An fnuz tensor of the same width is not F8E4M3 either.
        let fnuz = Export::new(vec![0x40u8])
            .packed(DLDataType::new(DLDataTypeCode::FLOAT8_E4M3FNUZ, 8, 1))
            .versioned()
            .unwrap();
        assert!(fnuz
            .as_slice::<F8E4M3>()
            .unwrap_err()
            .to_string()
            .contains("float8_e4m3fnuz"));
        assert_eq!(fnuz.as_packed().unwrap().bytes(), [0x40]);
    }

    #[test]
    fn mutable_view_writes_the_bytes() {
        let mut t = Export::new(vec![F8E5M2::from_f32(1.0); 3])
            .versioned()
            .unwrap();
        t.as_mut_slice::<F8E5M2>().unwrap()[1] = F8E5M2::from_f32(-2.0);
        assert_eq!(t.as_packed().unwrap().bytes(), [0x3c, 0xc0, 0x3c]);
    }
}

#[test]
fn packed_export_is_read_only_when_marked_or_when_its_buffer_is() {
    let fp4 = DLDataType::FLOAT4_E2M1FN;
    let packed = || {
        Export::new(vec![0x21u8, 0x43, 0x05])
            .packed(fp4)
            .shape(&[5])
    };
    // A writable buffer: not READ_ONLY, and a legacy export is allowed.
    assert_eq!(packed().versioned().unwrap().flags(), 0);
    assert!(packed().legacy().is_ok());
    // Marked read-only: flagged, and refused as legacy (the legacy struct cannot say so).
    assert_eq!(
        packed().read_only().versioned().unwrap().flags(),
        DLPACK_FLAG_BITMASK_READ_ONLY
    );
    assert_eq!(packed().read_only().legacy().unwrap_err(), Error::ReadOnly);
    // A buffer others may read (a shared slice): read-only without being marked.
    static SHARED: [u8; 3] = [0x21, 0x43, 0x05];
    let shared = || Export::new(&SHARED[..]).packed(fp4).shape(&[5]);
    let t = shared().versioned().unwrap();
    assert_eq!(t.flags(), DLPACK_FLAG_BITMASK_READ_ONLY);
    assert_eq!(t.as_packed().unwrap().bytes(), SHARED);
    assert_eq!(shared().legacy().unwrap_err(), Error::ReadOnly);
}
