// Every supported field form; runs without feature `pyo3` (no pymethods are generated).
use std::sync::Arc;

use dlpack_rs::ffi::{DLDataType, DLDevice};
use dlpack_rs::safe::{cpu_device, dtype_f32, Buffer, Element};
use dlpack_rs::IntoDLPack;

#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(dtype)]
    dtype: DLDataType,
}

#[derive(IntoDLPack)]
struct Boxed {
    #[dlpack(data)]
    data: Box<[f32]>,
    #[dlpack(shape)]
    shape: [usize; 2],
    #[dlpack(strides)]
    strides: [i64; 2],
}

#[derive(IntoDLPack)]
#[dlpack(read_only)]
struct Shared {
    #[dlpack(data)]
    data: Arc<[i16]>,
    #[dlpack(shape)]
    shape: Box<[i64]>,
    #[dlpack(strides)]
    strides: Option<Vec<isize>>,
    #[dlpack(byte_offset)]
    offset: u64,
}

#[derive(IntoDLPack)]
#[dlpack(device = "cuda:1")]
struct Gpu {
    #[dlpack(data)]
    data: Vec<f64>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[derive(IntoDLPack)]
struct WithDevice {
    #[dlpack(data)]
    data: &'static [u32],
    #[dlpack(device)]
    device: DLDevice,
}

const HOST: DLDevice = DLDevice::new(dlpack_rs::ffi::DLDeviceType::CUDA_HOST, 0);

/// Pinned host memory: a buffer that says so.
struct PinnedBytes(Vec<u8>);

// SAFETY: as `Vec<u8>` (whose heap buffer never moves), on the device it says.
unsafe impl Buffer for PinnedBytes {
    type Elem = u8;
    fn data_ptr(&self) -> *mut u8 {
        self.0.as_ptr().cast_mut()
    }
    fn num_elements(&self) -> usize {
        self.0.len()
    }
    fn device(&self) -> DLDevice {
        HOST
    }
}

#[derive(IntoDLPack)]
#[dlpack(device = HOST)]
struct Pinned(#[dlpack(data)] PinnedBytes, #[dlpack(shape)] Vec<u32>);

#[derive(IntoDLPack)]
struct Tensor<T: Element> {
    #[dlpack(data)]
    data: Vec<T>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[derive(IntoDLPack)]
struct Unbounded<T, const N: usize> {
    #[dlpack(data)]
    data: Vec<T>,
    #[dlpack(shape)]
    shape: [usize; N],
}

#[derive(IntoDLPack)]
struct Editable {
    #[dlpack(data)]
    pixels: dlpack_rs::safe::SharedMut<u8>,
    #[dlpack(shape)]
    shape: [usize; 2],
}

#[derive(IntoDLPack)]
#[dlpack(read_only, legacy_read_only = "share")]
struct SharedLegacy {
    #[dlpack(data)]
    pixels: Arc<[f32]>,
}

#[derive(IntoDLPack)]
#[dlpack(legacy_read_only = "copy")]
struct CopiedLegacy {
    #[dlpack(data)]
    pixels: Vec<f32>,
}

fn main() {
    let e = Editable {
        pixels: dlpack_rs::safe::SharedMut::zeroed(6).unwrap(),
        shape: [2, 3],
    };
    assert!(e.rust_access_registered() && !e.is_read_only());
    let s = SharedLegacy { pixels: vec![1.0].into() };
    assert!(s.share_read_only_legacy() && s.is_read_only() && !s.rust_access_registered());
    let c = CopiedLegacy { pixels: vec![1.0] };
    assert!(!c.share_read_only_legacy());
    let t = Tensor {
        data: vec![1.0f32, 2.0],
        shape: vec![2],
    };
    assert_eq!(t.tensor_info().dtype, dtype_f32());
    assert_eq!(t.tensor_info().device, cpu_device());
    let u = Unbounded {
        data: vec![1u8; 6],
        shape: [2, 3],
    };
    assert_eq!(u.tensor_info().shape, vec![2, 3]);
    let p = Pinned(PinnedBytes(vec![0; 4]), vec![4]);
    assert_eq!(p.tensor_info().device, HOST);
    let _ = (
        Image::tensor_info,
        Boxed::tensor_info,
        Shared::is_read_only,
        Gpu::tensor_info,
        WithDevice::tensor_info,
    );
}
