//! `#[derive(IntoDLPack)]` on plain Rust structs: the `TensorInfo` it describes and a round
//! trip through a managed tensor.
#![cfg(feature = "derive")]

use std::sync::Arc;

use dlpack_rs::ffi::{DLDataType, DLDevice, DLDeviceType};
use dlpack_rs::safe::{cpu_device, cuda_device, dtype_f32, dtype_u16, dtype_u8, Buffer, Element};
use dlpack_rs::IntoDLPack;

// With feature `pyo3` a non-generic struct also gets `__dlpack__` pymethods, which need a
// `#[pyclass(frozen)]`; these are plain Rust types, so they opt out there.

#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    shape: [usize; 3],
    label: &'static str,
}

#[derive(IntoDLPack)]
struct Flat(#[dlpack(data)] Box<[f32]>);

#[derive(IntoDLPack)]
struct Transposed {
    #[dlpack(data)]
    data: Vec<i32>,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(strides)]
    strides: Vec<isize>,
}

#[derive(IntoDLPack)]
struct Reinterpreted {
    #[dlpack(data)]
    bytes: Vec<u8>,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(byte_offset)]
    offset: usize,
    #[dlpack(shape)]
    shape: Box<[i64]>,
}

#[derive(IntoDLPack)]
#[dlpack(read_only)]
struct Frozen {
    #[dlpack(data)]
    data: Vec<f64>,
}

#[derive(IntoDLPack)]
struct Shared {
    #[dlpack(data)]
    data: Arc<[u16]>,
    #[dlpack(strides)]
    strides: Option<Vec<i64>>,
    #[dlpack(shape)]
    shape: Vec<u32>,
}

/// Device memory (never read here): `len` f32s at `addr` on `device`.
struct DeviceMemory {
    addr: usize,
    len: usize,
    device: DLDevice,
}

// SAFETY: stands for a device allocation of `len` f32s at `addr` on `device`; these tests only
// describe it, nothing reads or writes it.
unsafe impl Buffer for DeviceMemory {
    type Elem = f32;
    fn data_ptr(&self) -> *mut f32 {
        self.addr as *mut f32
    }
    fn num_elements(&self) -> usize {
        self.len
    }
    fn device(&self) -> DLDevice {
        self.device
    }
}

#[derive(IntoDLPack)]
#[dlpack(device = "cuda:1")]
struct OnGpu {
    #[dlpack(data)]
    data: DeviceMemory,
}

/// Soundness reproducer: host memory described as device memory would be read by a consumer
/// as device memory. The derive refuses the mismatch.
#[derive(IntoDLPack)]
#[dlpack(device = "cuda:0")]
struct HostClaimingGpu {
    #[dlpack(data)]
    data: Vec<f32>,
}

#[derive(IntoDLPack)]
struct DeviceField {
    #[dlpack(data)]
    data: DeviceMemory,
    #[dlpack(device)]
    device: DLDevice,
}

#[derive(IntoDLPack)]
struct Tensor<T> {
    #[dlpack(data)]
    data: Vec<T>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[test]
fn named_fields_with_array_shape() {
    let img = Image {
        pixels: (0..24).collect(),
        shape: [2, 3, 4],
        label: "x",
    };
    let info = img.tensor_info();
    assert_eq!(info.shape, vec![2, 3, 4]);
    assert_eq!(info.strides, None);
    assert_eq!(info.dtype, dtype_u8());
    assert_eq!(info.device, cpu_device());
    assert_eq!(info.byte_offset, 0);
    assert_eq!(info.data, img.pixels.as_ptr() as *mut _);
    assert!(!img.is_read_only());
    assert_eq!(img.label, "x");

    let mt = img.into_managed_tensor_versioned().unwrap();
    assert_eq!(mt.shape(), &[2, 3, 4]);
    assert!(!mt.is_read_only());
    assert_eq!(mt.as_slice::<u8>().unwrap(), (0..24).collect::<Vec<u8>>());
}

#[test]
fn tuple_struct_is_one_dimensional() {
    let flat = Flat(vec![1.0, 2.0, 3.0].into_boxed_slice());
    let info = flat.tensor_info();
    assert_eq!(info.shape, vec![3]);
    assert_eq!(info.dtype, dtype_f32());
    // A `Box<[T]>` field's pointer, taken through `&self`, comes from a shared reference: a
    // derived export of it is read-only (so versioned only).
    assert!(flat.is_read_only());
    let mt = flat.into_managed_tensor_versioned().unwrap();
    assert!(mt.is_read_only());
    assert_eq!(mt.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0]);
}

#[test]
fn strides_are_exported() {
    let t = Transposed {
        data: vec![1, 2, 3, 4, 5, 6],
        shape: vec![3, 2],
        strides: vec![1, 3],
    };
    let info = t.tensor_info();
    assert_eq!(info.strides, Some(vec![1, 3]));
    let mt = t.into_managed_tensor_versioned().unwrap();
    assert_eq!(mt.shape(), &[3, 2]);
    assert_eq!(&*mt.strides(), &[1i64, 3]);
}

#[test]
fn dtype_field_and_byte_offset() {
    let mut bytes = vec![0u8; 2];
    bytes.extend_from_slice(&[1, 0, 2, 0]);
    let r = Reinterpreted {
        bytes,
        dtype: dtype_u16(),
        offset: 2,
        shape: vec![2].into_boxed_slice(),
    };
    let info = r.tensor_info();
    assert_eq!(info.dtype, dtype_u16());
    assert_eq!(info.byte_offset, 2);
    assert_eq!(info.shape, vec![2]);
    // The values are read at the offset, as the dtype field says (little-endian u16s 1 and 2).
    let mt = r.into_managed_tensor_versioned().unwrap();
    assert_eq!(mt.byte_offset(), 2);
    let expected = [u16::from_le_bytes([1, 0]), u16::from_le_bytes([2, 0])];
    assert_eq!(&*mt.as_slice::<u16>().unwrap(), &expected);
}

#[test]
fn read_only_attribute_and_read_only_buffers() {
    let f = Frozen {
        data: vec![1.0, 2.0],
    };
    assert!(f.is_read_only());
    let mt = f.into_managed_tensor_versioned().unwrap();
    assert!(mt.is_read_only());
    let f = Frozen { data: vec![1.0] };
    assert!(
        f.into_managed_tensor().is_err(),
        "read-only cannot be legacy"
    );

    let s = Shared {
        data: Arc::from(vec![1u16, 2, 3, 4]),
        strides: None,
        shape: vec![2, 2],
    };
    assert!(s.is_read_only(), "an Arc is shared, so read-only");
    assert_eq!(s.tensor_info().strides, None);
    let mt = s.into_managed_tensor_versioned().unwrap();
    assert!(mt.is_read_only());
    assert_eq!(mt.as_slice::<u16>().unwrap(), &[1, 2, 3, 4]);
}

#[test]
fn devices() {
    let g = OnGpu {
        data: DeviceMemory {
            addr: 0x1000,
            len: 4,
            device: cuda_device(1),
        },
    };
    assert_eq!(g.tensor_info().device, cuda_device(1));
    let host = DLDevice {
        device_type: DLDeviceType::CUDA_HOST,
        device_id: 0,
    };
    let d = DeviceField {
        data: DeviceMemory {
            addr: 0x1000,
            len: 4,
            device: host,
        },
        device: host,
    };
    assert_eq!(d.tensor_info().device.device_type, DLDeviceType::CUDA_HOST);
}

#[test]
#[should_panic(expected = "tensor is on kDLCPU:0, not on kDLCUDA:0")]
fn host_memory_cannot_be_described_as_device_memory() {
    let _ = HostClaimingGpu { data: vec![0.0; 4] }.tensor_info();
}

#[test]
fn generic_struct() {
    fn check<T: Element + PartialEq + std::fmt::Debug>(values: Vec<T>) {
        let n = values.len();
        let t = Tensor {
            data: values.clone(),
            shape: vec![1, n],
        };
        assert_eq!(t.tensor_info().dtype, T::DTYPE);
        let mt = t.into_managed_tensor_versioned().unwrap();
        assert_eq!(mt.shape(), &[1, n as i64]);
        assert_eq!(mt.as_slice::<T>().unwrap(), &values[..]);
    }
    check(vec![1u8, 2, 3]);
    check(vec![1.5f64, -2.0]);
    check(vec![true, false]);
}

#[test]
fn bool_buffers_are_exported_read_only() {
    // A consumer writing the byte 2 into a bool the struct can still read would be undefined
    // behaviour for safe Rust: bool data fields are never exported writable.
    let t = Tensor {
        data: vec![true, false],
        shape: vec![2usize],
    };
    assert!(t.is_read_only());
    assert_eq!(
        t.into_managed_tensor().unwrap_err(),
        dlpack_rs::safe::Error::ReadOnly
    );
    let t = Tensor {
        data: vec![1u8, 0],
        shape: vec![2usize],
    };
    assert!(!t.is_read_only());
}

#[test]
#[should_panic(expected = "address bytes 0..6 of field `data`, which holds 5 bytes")]
fn shape_larger_than_buffer_panics() {
    let t = Tensor {
        data: vec![0u8; 5],
        shape: vec![2, 3],
    };
    let _ = t.tensor_info();
}

#[test]
#[should_panic(expected = "address bytes -8..16 of field `data`, which holds 24 bytes")]
fn negative_strides_below_the_buffer_panic() {
    let t = Transposed {
        data: vec![1, 2, 3, 4, 5, 6],
        shape: vec![3, 2],
        strides: vec![-1, 3],
    };
    let _ = t.tensor_info();
}

#[test]
fn a_layout_outside_the_data_field_is_an_export_error_not_a_panic() {
    // Every export route asks the fallible description first: no unwinding is involved, so a
    // `panic = "abort"` build refuses the same way (a panic here would fail the test).
    let expected = dlpack_rs::safe::Error::OutsideBuffer {
        type_name: "Tensor",
        field: "data",
        first: 0,
        end: 20,
        len: 16,
    };
    let t = || Tensor {
        data: vec![0.0f32; 4],
        shape: vec![5usize],
    };
    assert_eq!(t().into_managed_tensor_versioned().unwrap_err(), expected);
    assert_eq!(t().into_managed_tensor().unwrap_err(), expected);
    let host = HostClaimingGpu { data: vec![0.0; 4] };
    assert_eq!(
        host.into_managed_tensor_versioned().unwrap_err(),
        dlpack_rs::safe::Error::DeviceMismatch {
            expected: dlpack_rs::safe::cuda_device(0),
            found: cpu_device(),
        }
    );
}

#[test]
fn invalid_metadata_is_an_export_error() {
    // An extent that does not fit i64 becomes -1, which the export refuses.
    let t = Tensor {
        data: vec![0u8; 5],
        shape: vec![usize::MAX],
    };
    assert!(t.into_managed_tensor_versioned().is_err());
}

#[test]
fn buffer_trait_is_what_data_fields_use() {
    let v: Vec<u8> = vec![1, 2];
    assert_eq!(v.num_elements(), 2);
}

/// A struct with an inherent method named like the derive's hidden trait method: an inherent
/// method wins over a trait method in method-call syntax, so the derive must call its own by
/// its full path (it once did not, and this method's wild pointer was exported).
#[derive(IntoDLPack)]
struct Shadowing {
    #[dlpack(data)]
    data: Vec<f32>,
}

impl Shadowing {
    #[allow(dead_code)]
    fn __tensor_info_with_extent(&self) -> (dlpack_rs::safe::TensorInfo, ()) {
        (
            dlpack_rs::safe::TensorInfo::contiguous(
                8 as *mut _,
                cpu_device(),
                dtype_f32(),
                vec![1 << 20],
            ),
            (),
        )
    }
}

#[test]
fn an_inherent_method_cannot_stand_in_for_the_derived_one() {
    let s = Shadowing { data: vec![] };
    let info = s.tensor_info();
    assert_eq!(info.shape, vec![0]);
    assert_eq!(info.data, s.data.as_ptr() as *mut _);
    let mt = s.into_managed_tensor_versioned().unwrap();
    assert_eq!(mt.shape(), &[0]);
}

/// Every device name `#[dlpack(device = "...")]` accepts resolves to its `DLDeviceType` constant
/// (the derive names the constant; the values live in `ffi.rs` only).
#[test]
fn every_device_name_resolves_to_its_constant() {
    macro_rules! check_names {
        ($($name:literal => $ty:ident),* $(,)?) => {$({
            #[derive(IntoDLPack)]
            #[dlpack(device = $name)]
            struct Named {
                #[dlpack(data)]
                data: DeviceMemory,
            }
            let device = DLDevice { device_type: DLDeviceType::$ty, device_id: 3 };
            let t = Named { data: DeviceMemory { addr: 0x1000, len: 1, device } };
            assert_eq!(t.tensor_info().device, device, "{}", $name);
        })*};
    }
    check_names!(
        "cpu:3" => CPU, "cuda:3" => CUDA, "cuda_host:3" => CUDA_HOST, "opencl:3" => OPENCL,
        "vulkan:3" => VULKAN, "metal:3" => METAL, "vpi:3" => VPI, "rocm:3" => ROCM,
        "rocm_host:3" => ROCM_HOST, "ext_dev:3" => EXT_DEV, "cuda_managed:3" => CUDA_MANAGED,
        "oneapi:3" => ONE_API, "webgpu:3" => WEBGPU, "hexagon:3" => HEXAGON, "maia:3" => MAIA,
        "trn:3" => TRN, "tpu:3" => TPU, "tpu_host:3" => TPU_HOST,
        "ascend:3" => ASCEND,
    );
}

/// A dimension that answers 4 the first time and 1000 after: its conversion to `i64` is safe
/// user code, so an export must ask the layout once and never again (it once asked `tensor_info` anew for the
/// pointer once the value sat in its block, which panicked there and leaked the block).
#[derive(Clone, Copy)]
struct Flaky;

static FLAKY_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl From<Flaky> for i64 {
    fn from(_: Flaky) -> i64 {
        let first = FLAKY_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
        if first {
            4
        } else {
            1000
        }
    }
}

#[derive(IntoDLPack)]
struct FlakyShape {
    #[dlpack(data)]
    data: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<Flaky>,
}

#[test]
fn an_export_asks_the_layout_once() {
    let t = FlakyShape {
        data: vec![1.0, 2.0, 3.0, 4.0],
        shape: vec![Flaky],
    };
    let mt = t.into_managed_tensor_versioned().unwrap();
    assert_eq!(mt.shape(), &[4]);
    assert_eq!(mt.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
}
