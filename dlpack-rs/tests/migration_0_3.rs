//! The upgrade from dlpack-rs 0.3.x, checked by compiling what a 0.3 user wrote: bindgen's
//! names (`DLDeviceType::kDLCPU`, `DLDataTypeCode::kDLFloat`), the `u32` device type, the
//! `K_DL_*` constants and `safe::pack`. It builds against 0.4 with deprecation warnings only
//! (allowed here so the lint run stays clean: remove the `allow` to see each one name its
//! replacement). The README's "Migrating from 0.3.x" lists every change with its one-line fix.
#![allow(deprecated)]

use dlpack_rs::ffi::{
    DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLManagedTensor, K_DL_CPU, K_DL_FLOAT,
};
use dlpack_rs::safe::{pack, TensorInfo};

/// What 0.3 code did with devices and dtypes, unchanged but for the casts (`as i32` / `as u8`
/// on the 0.4 newtypes are `i32::from` / `u8::from`, or `.0`).
#[test]
fn bindgen_names_and_integer_conversions_still_compile() {
    let device = DLDevice {
        device_type: DLDeviceType::kDLCPU,
        device_id: 0,
    };
    assert_eq!(device.device_type, K_DL_CPU);
    assert_eq!(device.device_type, DLDeviceType::CPU);
    // 0.3 typed the device type as bindgen's `u32`.
    let from_c: u32 = 2;
    let cuda: DLDeviceType = from_c.into();
    assert_eq!(cuda, DLDeviceType::kDLCUDA);
    assert_eq!(u32::from(cuda), 2);
    // 0.3: `device.device_type as i32`.
    assert_eq!(i32::from(device.device_type), 1);
    // 0.3: `DLDataTypeCode::kDLFloat as u8`, and codes printed with `{}`.
    assert_eq!(u8::from(DLDataTypeCode::kDLFloat), 2);
    assert_eq!(DLDataTypeCode::kDLFloat, K_DL_FLOAT);
    assert_eq!(DLDataTypeCode::kDLFloat.to_string(), "kDLFloat");
    assert_eq!(DLDataTypeCode(200).to_string(), "200");
    assert_eq!(device.to_string(), "kDLCPU:0");
    let dtype = DLDataType {
        code: DLDataTypeCode::kDLUInt,
        bits: 8,
        lanes: 1,
    };
    assert_eq!(dtype.to_string(), "kDLUInt/8x1");
    assert_eq!(DLDeviceType::kDLCUDAHost, DLDeviceType::CUDA_HOST);
    assert_eq!(DLDataTypeCode::kDLBool, DLDataTypeCode::BOOL);
}

/// 0.3's raw route: `pack(keepalive, info)`, the consumer calling the deleter.
#[test]
fn pack_keeps_its_0_3_shape() {
    let mut data = vec![1.0f32, 2.0, 3.0, 4.0];
    let info = TensorInfo::contiguous(
        data.as_mut_ptr().cast(),
        DLDevice {
            device_type: DLDeviceType::kDLCPU,
            device_id: 0,
        },
        DLDataType {
            code: DLDataTypeCode::kDLFloat,
            bits: 32,
            lanes: 1,
        },
        vec![2, 2],
    );
    let mt: *mut DLManagedTensor = pack(data, info);
    // SAFETY: the export made just above, deleted once.
    unsafe {
        assert_eq!((*mt).dl_tensor.ndim, 2);
        ((*mt).deleter.unwrap())(mt);
    }
}
