//! Dtypes and their Rust element types ([`Element`]), dtype rules, dtype and device constructors.

mod codes;

pub use codes::dtype_allowed;

use crate::ffi::{DLDataType, DLDevice, DLDeviceType};

/// A Rust type whose values are the elements of a tensor of dtype [`Element::DTYPE`] (sub-byte
/// types have none: see [`Packing`](crate::safe::Packing)).
///
/// # Safety
/// `size_of::<Self>()` must equal `DTYPE.bits * DTYPE.lanes / 8`, with no padding, laid out as
/// DLPack describes `DTYPE`. [`Element::is_valid_bytes`] must reject every invalid bit pattern.
pub unsafe trait Element: Copy + Send + Sync + 'static {
    /// The DLPack data type of this element type.
    const DTYPE: DLDataType;

    /// Whether every bit pattern is a valid value; when false, the derive exports read-only.
    const ANY_BIT_PATTERN: bool = true;

    /// Whether `bytes` (whole elements) holds only valid values of `Self`; true by default.
    fn is_valid_bytes(bytes: &[u8]) -> bool {
        let _ = bytes;
        true
    }
}

/// An [`Element`] whose every bit pattern is valid, so foreign writes cannot make it invalid.
///
/// # Safety
/// Every bit pattern of its size must be a valid `Self`, and [`Element::ANY_BIT_PATTERN`] true.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has invalid bit patterns: a foreign write could make Rust read one",
    note = "view boolean data as `u8` (`x != 0`), whose every byte is valid"
)]
pub unsafe trait AnyBitPattern: Element {}

macro_rules! elements {
    ($( $(#[cfg(feature = $f:literal)])? $ty:ty => $dtype:expr $(, $helper:ident)?; )*) => {
        $(
            $(#[cfg(feature = $f)] #[cfg_attr(docsrs, doc(cfg(feature = $f)))])?
            // SAFETY: each row's type is `bits / 8` bytes without padding, laid out as DLPack lays
            // out its dtype: a primitive, a `#[repr(transparent)]` integer of the format's bits
            // (`half`, `float8`), or a `#[repr(C)]` pair of floats (`num_complex`).
            unsafe impl Element for $ty {
                const DTYPE: DLDataType = $dtype;
            }

            $(#[cfg(feature = $f)] #[cfg_attr(docsrs, doc(cfg(feature = $f)))])?
            // SAFETY: as above; every bit pattern is a valid value (some of them NaN).
            unsafe impl AnyBitPattern for $ty {}

            $(
                #[doc = concat!("The dtype of `", stringify!($ty), "` (`", stringify!($dtype), "`).")]
                pub const fn $helper() -> DLDataType {
                    $dtype
                }
            )?
        )*
    };
}

elements! {
    i8 => DLDataType::INT8;
    i16 => DLDataType::INT16;
    i32 => DLDataType::INT32, dtype_i32;
    i64 => DLDataType::INT64, dtype_i64;
    u8 => DLDataType::UINT8, dtype_u8;
    u16 => DLDataType::UINT16, dtype_u16;
    u32 => DLDataType::UINT32;
    u64 => DLDataType::UINT64;
    f32 => DLDataType::FLOAT32, dtype_f32;
    f64 => DLDataType::FLOAT64, dtype_f64;
    #[cfg(feature = "half")]
    half::f16 => DLDataType::FLOAT16;
    #[cfg(feature = "half")]
    half::bf16 => DLDataType::BFLOAT16;
    #[cfg(feature = "float8")]
    float8::F8E4M3 => DLDataType::new(crate::ffi::DLDataTypeCode::FLOAT8_E4M3FN, 8, 1);
    #[cfg(feature = "float8")]
    float8::F8E5M2 => DLDataType::new(crate::ffi::DLDataTypeCode::FLOAT8_E5M2, 8, 1);
    #[cfg(feature = "num-complex")]
    num_complex::Complex32 => DLDataType::COMPLEX64;
    #[cfg(feature = "num-complex")]
    num_complex::Complex64 => DLDataType::COMPLEX128;
}

// SAFETY: `bool` is one byte; `is_valid_bytes` accepts only 0 and 1.
unsafe impl Element for bool {
    const DTYPE: DLDataType = DLDataType::BOOL;
    const ANY_BIT_PATTERN: bool = false;
    fn is_valid_bytes(bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| b <= 1)
    }
}

/// The dtype of `bool` (`DLDataType::BOOL`).
pub const fn dtype_bool() -> DLDataType {
    DLDataType::BOOL
}

/// The CPU device, `(kDLCPU, 0)` (`DLDevice::CPU`).
pub const fn cpu_device() -> DLDevice {
    DLDevice::CPU
}

/// CUDA device number `id` (`DLDevice::new(DLDeviceType::CUDA, id)`).
pub const fn cuda_device(id: i32) -> DLDevice {
    DLDevice::new(DLDeviceType::CUDA, id)
}

/// Size of one element of `dtype` in bits (`bits * lanes`).
pub const fn element_bits(dtype: DLDataType) -> u64 {
    dtype.bits as u64 * dtype.lanes as u64
}
