//! The DLPack 1.3 C ABI, written by hand: `#[repr(C)]` data and constants, no logic.
//!
//! Each type matches `dlpack.h` 1.3 in size, alignment and field offsets (checked with a C
//! compiler). C enums are integer newtypes, not Rust `enum`s: a newer header's values stay valid.

use core::ffi::{c_char, c_int, c_void};
use core::fmt;

/// The DLPack major version this crate implements (`DLPACK_MAJOR_VERSION`).
pub const DLPACK_MAJOR_VERSION: u32 = 1;
/// The DLPack minor version this crate implements (`DLPACK_MINOR_VERSION`).
pub const DLPACK_MINOR_VERSION: u32 = 3;

/// Bit of [`DLManagedTensorVersioned::flags`]: the tensor must not be written to.
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;
/// Bit of [`DLManagedTensorVersioned::flags`]: the producer copied the data for this export.
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;
/// Bit of [`DLManagedTensorVersioned::flags`]: sub-byte elements padded to a byte each, not packed.
pub const DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED: u64 = 1 << 2;
/// All flag bits DLPack 1.3 defines.
pub const DLPACK_FLAG_BITMASK_ALL_KNOWN: u64 = DLPACK_FLAG_BITMASK_READ_ONLY
    | DLPACK_FLAG_BITMASK_IS_COPIED
    | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;

/// The ABI version of a managed tensor or of an exchange API table (`DLPackVersion`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DLPackVersion {
    /// Major version: a change here breaks the ABI.
    pub major: u32,
    /// Minor version: additions that keep the ABI.
    pub minor: u32,
}

impl DLPackVersion {
    /// The version this crate implements: 1.3.
    pub const CURRENT: DLPackVersion = DLPackVersion {
        major: DLPACK_MAJOR_VERSION,
        minor: DLPACK_MINOR_VERSION,
    };
}

impl fmt::Display for DLPackVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The kind of device a tensor lives on (C `DLDeviceType`); any `i32` is a valid value.
#[repr(transparent)]
#[derive(Copy, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DLDeviceType(pub i32);

/// The data type code of a tensor's elements (C `DLDataTypeCode`); any `u8` is a valid value.
#[repr(transparent)]
#[derive(Copy, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DLDataTypeCode(pub u8);

/// Whether `a` and `b` are equal in ASCII case, `_` ignored.
const fn same_name(a: &[u8], b: &[u8]) -> bool {
    let (mut i, mut j) = (0, 0);
    loop {
        while i < a.len() && a[i] == b'_' {
            i += 1;
        }
        while j < b.len() && b[j] == b'_' {
            j += 1;
        }
        if i == a.len() || j == b.len() {
            return i == a.len() && j == b.len();
        }
        if !a[i].eq_ignore_ascii_case(&b[j]) {
            return false;
        }
        i += 1;
        j += 1;
    }
}

/// The named values of `$ty` and their C names. A `=> note` adds the C name (0.3's bindgen name)
/// as a deprecated constant, the note spelled out: `#[deprecated]` refuses `concat!`.
macro_rules! named_values {
    ($ty:ident, $inner:ty, $( $(#[$doc:meta])* $assoc:ident = $konst:ident = $value:expr, $cname:ident $(=> $note:literal)?; )*) => {
        impl $ty {
            $( $(#[$doc])* pub const $assoc: $ty = $ty($value); )*

            /// The C name of this value (`"kDLCPU"`, ...), or `None` if DLPack does not define it.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( $value => Some(stringify!($cname)), )*
                    _ => None,
                }
            }

            /// The value whose constant is named `name`, in any case, `_` ignored (`"cuda"`,
            /// `"cuda_host"`, `"oneapi"`): the names `#[dlpack(device = "...")]` takes.
            pub const fn from_short_name(name: &str) -> Option<$ty> {
                $( if same_name(name.as_bytes(), stringify!($assoc).as_bytes()) {
                    return Some($ty::$assoc);
                } )*
                None
            }
        }

        #[allow(non_upper_case_globals)]
        impl $ty {
            $($(
                #[doc = concat!("dlpack-rs 0.3's name of [`", stringify!($ty), "::", stringify!($assoc), "`].")]
                #[deprecated(since = "0.4.0", note = $note)]
                pub const $cname: $ty = $ty::$assoc;
            )?)*
        }
        $( $(#[$doc])* pub const $konst: $ty = $ty::$assoc; )*

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(name) => f.write_str(name),
                    None => write!(f, "{}({})", stringify!($ty), self.0),
                }
            }
        }

        /// The C name (`kDLCPU`, `kDLFloat`), or the number for a value DLPack does not define.
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(name) => f.write_str(name),
                    None => write!(f, "{}", self.0),
                }
            }
        }

        impl From<$inner> for $ty {
            fn from(value: $inner) -> Self {
                $ty(value)
            }
        }

        impl From<$ty> for $inner {
            fn from(value: $ty) -> Self {
                value.0
            }
        }
    };
}

named_values! { DLDeviceType, i32,
    /// CPU memory (`kDLCPU`).
    CPU = K_DL_CPU = 1, kDLCPU => "use `DLDeviceType::CPU`";
    /// CUDA GPU memory (`kDLCUDA`).
    CUDA = K_DL_CUDA = 2, kDLCUDA => "use `DLDeviceType::CUDA`";
    /// Pinned CUDA host memory, allocated by `cudaMallocHost` (`kDLCUDAHost`).
    CUDA_HOST = K_DL_CUDA_HOST = 3, kDLCUDAHost => "use `DLDeviceType::CUDA_HOST`";
    /// OpenCL device memory (`kDLOpenCL`).
    OPENCL = K_DL_OPENCL = 4, kDLOpenCL => "use `DLDeviceType::OPENCL`";
    /// Vulkan buffer (`kDLVulkan`).
    VULKAN = K_DL_VULKAN = 7, kDLVulkan => "use `DLDeviceType::VULKAN`";
    /// Metal buffer on Apple GPUs (`kDLMetal`).
    METAL = K_DL_METAL = 8, kDLMetal => "use `DLDeviceType::METAL`";
    /// Verilog simulator buffer (`kDLVPI`).
    VPI = K_DL_VPI = 9, kDLVPI => "use `DLDeviceType::VPI`";
    /// ROCm GPU memory (`kDLROCM`).
    ROCM = K_DL_ROCM = 10, kDLROCM => "use `DLDeviceType::ROCM`";
    /// Pinned ROCm host memory, allocated by `hipMallocHost` (`kDLROCMHost`).
    ROCM_HOST = K_DL_ROCM_HOST = 11, kDLROCMHost => "use `DLDeviceType::ROCM_HOST`";
    /// Reserved for extension devices, for testing (`kDLExtDev`).
    EXT_DEV = K_DL_EXT_DEV = 12, kDLExtDev => "use `DLDeviceType::EXT_DEV`";
    /// CUDA managed (unified) memory, allocated by `cudaMallocManaged` (`kDLCUDAManaged`).
    CUDA_MANAGED = K_DL_CUDA_MANAGED = 13, kDLCUDAManaged => "use `DLDeviceType::CUDA_MANAGED`";
    /// Unified shared memory of oneAPI (`kDLOneAPI`).
    ONE_API = K_DL_ONE_API = 14, kDLOneAPI => "use `DLDeviceType::ONE_API`";
    /// WebGPU buffer (`kDLWebGPU`).
    WEBGPU = K_DL_WEBGPU = 15, kDLWebGPU => "use `DLDeviceType::WEBGPU`";
    /// Qualcomm Hexagon DSP (`kDLHexagon`).
    HEXAGON = K_DL_HEXAGON = 16, kDLHexagon => "use `DLDeviceType::HEXAGON`";
    /// Microsoft MAIA device (`kDLMAIA`).
    MAIA = K_DL_MAIA = 17, kDLMAIA => "use `DLDeviceType::MAIA`";
    /// AWS Trainium (`kDLTrn`).
    TRN = K_DL_TRN = 18, kDLTrn => "use `DLDeviceType::TRN`";
    /// Google TPU memory (`kDLTPU`, added after 1.3).
    TPU = K_DL_TPU = 19, kDLTPU => "use `DLDeviceType::TPU`";
    /// Google TPU host memory (`kDLTPUHost`, added after 1.3).
    TPU_HOST = K_DL_TPU_HOST = 20, kDLTPUHost => "use `DLDeviceType::TPU_HOST`";
    /// Huawei Ascend NPU memory (`kDLAscend`, added after 1.3).
    ASCEND = K_DL_ASCEND = 21, kDLAscend;
}

impl DLDeviceType {
    /// Whether the CPU can address this memory at all (CPU, CUDA/ROCm host, CUDA managed).
    pub const fn is_host_accessible(self) -> bool {
        matches!(
            self,
            DLDeviceType::CPU
                | DLDeviceType::CUDA_HOST
                | DLDeviceType::ROCM_HOST
                | DLDeviceType::CUDA_MANAGED
        )
    }

    /// Whether safe Rust may view or copy this memory on the host: plain CPU memory only.
    ///
    /// ```
    /// use dlpack_rs::ffi::DLDeviceType;
    /// assert_eq!(DLDeviceType::from_short_name("cuda_host"), Some(DLDeviceType::CUDA_HOST));
    /// assert_eq!(DLDeviceType::from_short_name("oneapi"), Some(DLDeviceType::ONE_API));
    /// assert_eq!(DLDeviceType::from_short_name("cudda"), None);
    /// assert!(DLDeviceType::CPU.is_host_viewable());
    /// assert!(!DLDeviceType::CUDA_HOST.is_host_viewable());
    /// assert!(DLDeviceType::CUDA_HOST.is_host_accessible());
    /// ```
    pub const fn is_host_viewable(self) -> bool {
        self.0 == DLDeviceType::CPU.0
    }
}

named_values! { DLDataTypeCode, u8,
    /// Signed integer (`kDLInt`).
    INT = K_DL_INT = 0, kDLInt => "use `DLDataTypeCode::INT`";
    /// Unsigned integer (`kDLUInt`).
    UINT = K_DL_UINT = 1, kDLUInt => "use `DLDataTypeCode::UINT`";
    /// IEEE floating point (`kDLFloat`).
    FLOAT = K_DL_FLOAT = 2, kDLFloat => "use `DLDataTypeCode::FLOAT`";
    /// Opaque handle (`kDLOpaqueHandle`); only meaningful to the producer.
    OPAQUE_HANDLE = K_DL_OPAQUE_HANDLE = 3, kDLOpaqueHandle => "use `DLDataTypeCode::OPAQUE_HANDLE`";
    /// bfloat16 (`kDLBfloat`).
    BFLOAT = K_DL_BFLOAT = 4, kDLBfloat => "use `DLDataTypeCode::BFLOAT`";
    /// Complex number, real and imaginary parts of `bits / 2` each (`kDLComplex`).
    COMPLEX = K_DL_COMPLEX = 5, kDLComplex => "use `DLDataTypeCode::COMPLEX`";
    /// Boolean, one byte per element (`kDLBool`).
    BOOL = K_DL_BOOL = 6, kDLBool => "use `DLDataTypeCode::BOOL`";
    /// FP8 e3m4 (`kDLFloat8_e3m4`).
    FLOAT8_E3M4 = K_DL_FLOAT8_E3M4 = 7, kDLFloat8_e3m4 => "use `DLDataTypeCode::FLOAT8_E3M4`";
    /// FP8 e4m3 (`kDLFloat8_e4m3`).
    FLOAT8_E4M3 = K_DL_FLOAT8_E4M3 = 8, kDLFloat8_e4m3 => "use `DLDataTypeCode::FLOAT8_E4M3`";
    /// FP8 e4m3b11fnuz (`kDLFloat8_e4m3b11fnuz`).
    FLOAT8_E4M3B11FNUZ = K_DL_FLOAT8_E4M3B11FNUZ = 9, kDLFloat8_e4m3b11fnuz => "use `DLDataTypeCode::FLOAT8_E4M3B11FNUZ`";
    /// FP8 e4m3fn (`kDLFloat8_e4m3fn`).
    FLOAT8_E4M3FN = K_DL_FLOAT8_E4M3FN = 10, kDLFloat8_e4m3fn => "use `DLDataTypeCode::FLOAT8_E4M3FN`";
    /// FP8 e4m3fnuz (`kDLFloat8_e4m3fnuz`).
    FLOAT8_E4M3FNUZ = K_DL_FLOAT8_E4M3FNUZ = 11, kDLFloat8_e4m3fnuz => "use `DLDataTypeCode::FLOAT8_E4M3FNUZ`";
    /// FP8 e5m2 (`kDLFloat8_e5m2`).
    FLOAT8_E5M2 = K_DL_FLOAT8_E5M2 = 12, kDLFloat8_e5m2 => "use `DLDataTypeCode::FLOAT8_E5M2`";
    /// FP8 e5m2fnuz (`kDLFloat8_e5m2fnuz`).
    FLOAT8_E5M2FNUZ = K_DL_FLOAT8_E5M2FNUZ = 13, kDLFloat8_e5m2fnuz => "use `DLDataTypeCode::FLOAT8_E5M2FNUZ`";
    /// FP8 e8m0fnu (`kDLFloat8_e8m0fnu`).
    FLOAT8_E8M0FNU = K_DL_FLOAT8_E8M0FNU = 14, kDLFloat8_e8m0fnu => "use `DLDataTypeCode::FLOAT8_E8M0FNU`";
    /// FP6 e2m3fn, packed (`kDLFloat6_e2m3fn`).
    FLOAT6_E2M3FN = K_DL_FLOAT6_E2M3FN = 15, kDLFloat6_e2m3fn => "use `DLDataTypeCode::FLOAT6_E2M3FN`";
    /// FP6 e3m2fn, packed (`kDLFloat6_e3m2fn`).
    FLOAT6_E3M2FN = K_DL_FLOAT6_E3M2FN = 16, kDLFloat6_e3m2fn => "use `DLDataTypeCode::FLOAT6_E3M2FN`";
    /// FP4 e2m1fn, packed (`kDLFloat4_e2m1fn`).
    FLOAT4_E2M1FN = K_DL_FLOAT4_E2M1FN = 17, kDLFloat4_e2m1fn => "use `DLDataTypeCode::FLOAT4_E2M1FN`";
    /// Complex of two bfloat16 (`kDLBcomplex`, added after 1.3).
    BCOMPLEX = K_DL_BCOMPLEX = 18, kDLBcomplex => "use `DLDataTypeCode::BCOMPLEX`";
}

/// A 0.3 `u32` device type: the `i32` of the same bits, as C stores the enum.
impl From<u32> for DLDeviceType {
    fn from(value: u32) -> Self {
        DLDeviceType(value as i32)
    }
}

/// The 0.3 `u32` of a device type (the same bits).
impl From<DLDeviceType> for u32 {
    fn from(value: DLDeviceType) -> Self {
        value.0 as u32
    }
}

/// A device: its type and an index among devices of that type (`DLDevice`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DLDevice {
    /// The kind of device.
    pub device_type: DLDeviceType,
    /// The device index (0 for the CPU).
    pub device_id: i32,
}

/// The element type of a tensor (`DLDataType`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DLDataType {
    /// The type code, the kind of number.
    pub code: DLDataTypeCode,
    /// Number of bits of one lane (8 for bool, 16 for bfloat16, 64 for complex64).
    pub bits: u8,
    /// Number of lanes, for vector types; 1 for ordinary tensors.
    pub lanes: u16,
}

impl DLDevice {
    /// The CPU (`kDLCPU`, device 0).
    pub const CPU: DLDevice = DLDevice::new(DLDeviceType::CPU, 0);

    /// Device `device_id` of `device_type`.
    pub const fn new(device_type: DLDeviceType, device_id: i32) -> DLDevice {
        DLDevice {
            device_type,
            device_id,
        }
    }
}

/// Named dtypes (`DLDataType::FLOAT32`); any other is [`DLDataType::new`].
impl DLDataType {
    /// `code`, `bits` per lane and `lanes`.
    pub const fn new(code: DLDataTypeCode, bits: u8, lanes: u16) -> DLDataType {
        DLDataType { code, bits, lanes }
    }

    /// `bool`: one byte per element.
    pub const BOOL: DLDataType = DLDataType::new(DLDataTypeCode::BOOL, 8, 1);
    /// `int8`.
    pub const INT8: DLDataType = DLDataType::new(DLDataTypeCode::INT, 8, 1);
    /// `int16`.
    pub const INT16: DLDataType = DLDataType::new(DLDataTypeCode::INT, 16, 1);
    /// `int32`.
    pub const INT32: DLDataType = DLDataType::new(DLDataTypeCode::INT, 32, 1);
    /// `int64`.
    pub const INT64: DLDataType = DLDataType::new(DLDataTypeCode::INT, 64, 1);
    /// `uint8`.
    pub const UINT8: DLDataType = DLDataType::new(DLDataTypeCode::UINT, 8, 1);
    /// `uint16`.
    pub const UINT16: DLDataType = DLDataType::new(DLDataTypeCode::UINT, 16, 1);
    /// `uint32`.
    pub const UINT32: DLDataType = DLDataType::new(DLDataTypeCode::UINT, 32, 1);
    /// `uint64`.
    pub const UINT64: DLDataType = DLDataType::new(DLDataTypeCode::UINT, 64, 1);
    /// `float16` (IEEE half precision).
    pub const FLOAT16: DLDataType = DLDataType::new(DLDataTypeCode::FLOAT, 16, 1);
    /// `bfloat16`.
    pub const BFLOAT16: DLDataType = DLDataType::new(DLDataTypeCode::BFLOAT, 16, 1);
    /// `float32`.
    pub const FLOAT32: DLDataType = DLDataType::new(DLDataTypeCode::FLOAT, 32, 1);
    /// `float64`.
    pub const FLOAT64: DLDataType = DLDataType::new(DLDataTypeCode::FLOAT, 64, 1);
    /// `complex64`: two `float32`.
    pub const COMPLEX64: DLDataType = DLDataType::new(DLDataTypeCode::COMPLEX, 64, 1);
    /// `complex128`: two `float64`.
    pub const COMPLEX128: DLDataType = DLDataType::new(DLDataTypeCode::COMPLEX, 128, 1);
    /// `float4_e2m1fn` as jax exports it: two per byte, element `2k` in byte `k`'s low nibble.
    pub const FLOAT4_E2M1FN: DLDataType = DLDataType::new(DLDataTypeCode::FLOAT4_E2M1FN, 4, 1);
    /// `float4_e2m1fn_x2` as torch exports it: 2 lanes, one byte each, lane 0 in the low nibble.
    pub const FLOAT4_E2M1FN_X2: DLDataType = DLDataType::new(DLDataTypeCode::FLOAT4_E2M1FN, 4, 2);
}

/// `kDLCPU:0`: the device type's C name (or number) and the index.
impl fmt::Display for DLDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.device_type, self.device_id)
    }
}

/// `kDLFloat/32x1`: the code's C name (or number), the bits and the lanes.
impl fmt::Display for DLDataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}x{}", self.code, self.bits, self.lanes)
    }
}

/// A tensor's memory and layout, without ownership (`DLTensor`).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct DLTensor {
    /// Opaque data pointer; the first element is at `data + byte_offset`.
    pub data: *mut c_void,
    /// Where the memory lives.
    pub device: DLDevice,
    /// Number of dimensions.
    pub ndim: i32,
    /// Element type.
    pub dtype: DLDataType,
    /// Extent of each dimension, `ndim` values (may be NULL when `ndim == 0`).
    pub shape: *mut i64,
    /// Step of each dimension in elements, `ndim` values, or NULL for compact row-major.
    pub strides: *mut i64,
    /// Offset in bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// A tensor together with the means to release it (`DLManagedTensor`, the legacy form).
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The tensor.
    pub dl_tensor: DLTensor,
    /// Producer-private context.
    pub manager_ctx: *mut c_void,
    /// Called by the consumer, exactly once, when it no longer needs the tensor.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// A versioned managed tensor with flags (`DLManagedTensorVersioned`, DLPack >= 1.0).
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The ABI version of this struct; a consumer must check `major` before reading further.
    pub version: DLPackVersion,
    /// Producer-private context.
    pub manager_ctx: *mut c_void,
    /// Called by the consumer, exactly once, when it no longer needs the tensor.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// Bit mask of `DLPACK_FLAG_BITMASK_*` values.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

/// Error callback given to a [`DLPackManagedTensorAllocator`]: `(error_ctx, kind, message)`.
pub type DLPackSetError = Option<
    unsafe extern "C" fn(error_ctx: *mut c_void, kind: *const c_char, message: *const c_char),
>;

/// Allocates a managed tensor like `prototype`: 0 on success, -1 after calling `set_error`.
pub type DLPackManagedTensorAllocator = Option<
    unsafe extern "C" fn(
        prototype: *mut DLTensor,
        out: *mut *mut DLManagedTensorVersioned,
        error_ctx: *mut c_void,
        set_error: DLPackSetError,
    ) -> c_int,
>;

/// Exports a `PyObject*` as a new managed tensor, unsynchronised: 0, or -1 with an exception set.
pub type DLPackManagedTensorFromPyObjectNoSync = Option<
    unsafe extern "C" fn(py_object: *mut c_void, out: *mut *mut DLManagedTensorVersioned) -> c_int,
>;

/// Wraps (and takes) a managed tensor in a new Python object: 0, or -1 with an exception set.
pub type DLPackManagedTensorToPyObjectNoSync = Option<
    unsafe extern "C" fn(
        tensor: *mut DLManagedTensorVersioned,
        out_py_object: *mut *mut c_void,
    ) -> c_int,
>;

/// Fills a non-owning `DLTensor` view of a Python object: 0, or -1 with an exception set.
pub type DLPackDLTensorFromPyObjectNoSync =
    Option<unsafe extern "C" fn(py_object: *mut c_void, out: *mut DLTensor) -> c_int>;

/// The producer's current work stream for a device (NULL if none): 0, or -1 with an exception.
pub type DLPackCurrentWorkStream = Option<
    unsafe extern "C" fn(
        device_type: DLDeviceType,
        device_id: i32,
        out_current_stream: *mut *mut c_void,
    ) -> c_int,
>;

/// Header of an exchange API table: its version and a link to an older table.
#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPIHeader {
    /// Version of the table this header starts.
    pub version: DLPackVersion,
    /// An older table for consumers that do not know `version`, or NULL.
    pub prev_api: *mut DLPackExchangeAPIHeader,
}

/// The C exchange API a Python type exposes as `__dlpack_c_exchange_api__` (DLPack 1.3).
#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPI {
    /// Version and link to older tables.
    pub header: DLPackExchangeAPIHeader,
    /// Allocates tensors of the producer's kind.
    pub managed_tensor_allocator: DLPackManagedTensorAllocator,
    /// Object to managed tensor (the fast `__dlpack__`).
    pub managed_tensor_from_py_object_no_sync: DLPackManagedTensorFromPyObjectNoSync,
    /// Managed tensor to object (the fast `from_dlpack`).
    pub managed_tensor_to_py_object_no_sync: DLPackManagedTensorToPyObjectNoSync,
    /// Object to a borrowed `DLTensor` view; may be NULL.
    pub dltensor_from_py_object_no_sync: DLPackDLTensorFromPyObjectNoSync,
    /// The producer's current stream for a device.
    pub current_work_stream: DLPackCurrentWorkStream,
}

/// Name of the capsule `__dlpack__` returns for a [`DLManagedTensor`].
pub const DLPACK_CAPSULE_NAME: &core::ffi::CStr = c"dltensor";
/// Name of the capsule `__dlpack__` returns for a [`DLManagedTensorVersioned`].
pub const DLPACK_VERSIONED_CAPSULE_NAME: &core::ffi::CStr = c"dltensor_versioned";
/// Name a consumer gives a legacy capsule once it owns the tensor.
pub const DLPACK_USED_CAPSULE_NAME: &core::ffi::CStr = c"used_dltensor";
/// Name a consumer gives a versioned capsule once it owns the tensor.
pub const DLPACK_USED_VERSIONED_CAPSULE_NAME: &core::ffi::CStr = c"used_dltensor_versioned";
/// Name of the capsule held by `type(x).__dlpack_c_exchange_api__`.
pub const DLPACK_EXCHANGE_API_CAPSULE_NAME: &core::ffi::CStr = c"dlpack_exchange_api";
