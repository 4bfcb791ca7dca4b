//! The values of the C ABI's constants and the helpers around them, checked without a C
//! compiler (the `abi` step of tests/run-all.sh compares them with the official header too).

use dlpack_rs::ffi::{
    DLDataTypeCode, DLDeviceType, DLPackVersion, DLPACK_FLAG_BITMASK_ALL_KNOWN,
    DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
    DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION,
};

#[test]
fn flag_bits_are_dlpacks() {
    assert_eq!(DLPACK_FLAG_BITMASK_READ_ONLY, 1);
    assert_eq!(DLPACK_FLAG_BITMASK_IS_COPIED, 2);
    assert_eq!(DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, 4);
    assert_eq!(DLPACK_FLAG_BITMASK_ALL_KNOWN, 7);
}

#[test]
fn versions_print_as_major_dot_minor() {
    assert_eq!((DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION), (1, 3));
    assert_eq!(DLPackVersion::CURRENT.to_string(), "1.3");
    assert_eq!(
        DLPackVersion {
            major: 2,
            minor: 10
        }
        .to_string(),
        "2.10"
    );
}

#[test]
fn named_values_print_their_c_name_or_their_number() {
    assert_eq!(format!("{:?}", DLDeviceType::CUDA_HOST), "kDLCUDAHost");
    assert_eq!(format!("{:?}", DLDeviceType(1000)), "DLDeviceType(1000)");
    assert_eq!(DLDeviceType::CPU.name(), Some("kDLCPU"));
    assert_eq!(DLDeviceType(-1).name(), None);
    assert_eq!(format!("{:?}", DLDataTypeCode::BFLOAT), "kDLBfloat");
    assert_eq!(format!("{:?}", DLDataTypeCode(200)), "DLDataTypeCode(200)");
    assert_eq!(i32::from(DLDeviceType::from(13)), 13);
    assert_eq!(u8::from(DLDataTypeCode::from(6)), 6);
}

#[test]
fn host_accessible_device_types() {
    for t in [
        DLDeviceType::CPU,
        DLDeviceType::CUDA_HOST,
        DLDeviceType::CUDA_MANAGED,
        DLDeviceType::ROCM_HOST,
    ] {
        assert!(t.is_host_accessible(), "{t:?}");
    }
    for t in [
        DLDeviceType::CUDA,
        DLDeviceType::ROCM,
        DLDeviceType::OPENCL,
        DLDeviceType(0),
    ] {
        assert!(!t.is_host_accessible(), "{t:?}");
    }
}
