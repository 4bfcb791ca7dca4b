// dlpack-rs 0.3 code: bindgen's enum cast with `as`. The 0.4 device type is a newtype, and the
// error names the fix (`i32::from(..)`, as docs/migrating-from-0.3.md says).
#![allow(deprecated)]
use dlpack_rs::ffi::{DLDevice, DLDeviceType};

fn main() {
    let device = DLDevice {
        device_type: DLDeviceType::kDLCPU,
        device_id: 0,
    };
    let _code = device.device_type as i32;
}
