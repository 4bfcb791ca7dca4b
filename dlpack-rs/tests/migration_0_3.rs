//! The upgrade from dlpack-rs 0.3.x, checked by compiling what a 0.3 user wrote: bindgen's
//! names (`DLDeviceType::kDLCPU`, `DLDataTypeCode::kDLFloat`), the `u32` device type, the
//! `K_DL_*` constants and `safe::pack`. It builds against 0.4 with deprecation warnings only
//! (allowed here so the lint run stays clean: remove the `allow` to see each one name its
//! replacement). docs/migrating-from-0.3.md lists every change with its one-line fix.
#![allow(deprecated)]

use dlpack_rs::ffi::{
    DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLManagedTensor, K_DL_CPU, K_DL_FLOAT,
    K_DL_UINT,
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

/// The 0.3 casts that do not compile on the 0.4 newtypes, as the migration guide's table fixes them: 0.3's
/// bindgen names were `u32` constants and `K_DL_*` plain integers (`u32` devices, `u8` codes).
#[test]
fn the_casts_the_migration_guide_fixes() {
    // 0.3: `DLDataType { code: DLDataTypeCode::kDLFloat as u8, .. }`: drop the cast.
    let dtype = DLDataType {
        code: DLDataTypeCode::kDLFloat,
        bits: 32,
        lanes: 1,
    };
    // 0.3: `dtype.code == K_DL_FLOAT`: unchanged.
    assert!(dtype.code == K_DL_FLOAT);
    // 0.3: `K_DL_UINT as u8` and `DLDeviceType::kDLCPU as i32`: `u8::from` / `i32::from`.
    assert_eq!(u8::from(K_DL_UINT), 1);
    assert_eq!(i32::from(DLDeviceType::kDLCPU), 1);
    // 0.3: a `DLDeviceType::Type` (bindgen's `u32`) variable: the type itself, or `u32::from`.
    let t: DLDeviceType = DLDeviceType::kDLTPU;
    assert_eq!(u32::from(t), 19);
    assert_eq!(DLDeviceType::kDLTPUHost, DLDeviceType::TPU_HOST);
    assert_eq!(DLDataTypeCode::kDLBcomplex, DLDataTypeCode::BCOMPLEX);
}

/// 0.3's `PyTensor` accessors: `dlpack_version()` and `element_size()` are deprecated bridges;
/// `strides()` (an `Option` in 0.3) is `raw_strides()`; `data_ptr()` now includes
/// `byte_offset()` (0.3 code that added it must stop).
#[cfg(feature = "pyo3")]
#[test]
fn pytensor_accessors_of_0_3() {
    use dlpack_rs::pyo3_glue::{DLPackTensor, DLPackVariant, PyTensor};
    use dlpack_rs::safe::Export;
    use pyo3::prelude::*;

    Python::initialize();
    Python::attach(|py| {
        let t = DLPackTensor::from_export(Export::new(vec![1.0f64, 2.0, 3.0, 4.0]).shape(&[2, 2]))
            .unwrap();
        let obj = Bound::new(py, t).unwrap().into_any();
        let t = PyTensor::from_pyany(py, &obj).unwrap();
        assert_eq!(t.dlpack_version(), DLPackVariant::Versioned);
        assert_eq!(t.element_size(), 8);
        assert_eq!(t.raw_strides(), Some(&[2i64, 1][..])); // our exports always send strides
        assert_eq!(&*t.strides(), &[2, 1]);
        let raw = t.raw_tensor();
        assert_eq!(
            t.data_ptr() as usize,
            raw.data as usize + raw.byte_offset as usize
        );
    });
}
