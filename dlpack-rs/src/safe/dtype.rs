//! Element types: the [`Element`] trait and the dtype and device constructors.

use crate::ffi::{DLDataType, DLDataTypeCode, DLDevice, DLDeviceType};

/// A Rust type whose values are the elements of a DLPack tensor of dtype [`Element::DTYPE`].
///
/// Implemented for `bool`, every primitive integer and float, and behind features `half` and
/// `num-complex` for `f16`, `bf16`, `Complex32` and `Complex64`.
///
/// # Safety
///
/// `size_of::<Self>()` must equal `DTYPE.bits * DTYPE.lanes / 8`, the type must have no padding,
/// and its in-memory representation must be the one DLPack describes for `DTYPE`. If some bit
/// patterns of that size are not valid values of `Self`, [`Element::is_valid_bytes`] must reject
/// them.
pub unsafe trait Element: Copy + Send + Sync + 'static {
    /// The DLPack data type of this element type.
    const DTYPE: DLDataType;

    /// Whether every bit pattern of `size_of::<Self>()` bytes is a valid value. When false
    /// (`bool`), an export that Rust code can still read is made read-only by the derive, since
    /// a consumer could otherwise write a byte Rust must never see.
    const ANY_BIT_PATTERN: bool = true;

    /// Whether `bytes` (a whole number of elements) only holds valid values of `Self`.
    /// Types for which every bit pattern is valid keep the default, which is always true.
    fn is_valid_bytes(bytes: &[u8]) -> bool {
        let _ = bytes;
        true
    }
}

/// An [`Element`] every bit pattern of which is a valid value (every element type but `bool`):
/// memory of it may be viewed while a foreign side writes it without Rust ever reading an
/// invalid value. The typed Python arguments (`TensorRef`, `TensorMut`) ask for it.
///
/// # Safety
///
/// Every bit pattern of `size_of::<Self>()` bytes must be a valid `Self` (and
/// [`Element::ANY_BIT_PATTERN`] true).
#[diagnostic::on_unimplemented(
    message = "`{Self}` has invalid bit patterns: a foreign write could make Rust read one",
    note = "view boolean data as `u8` (`x != 0`), whose every byte is valid"
)]
pub unsafe trait AnyBitPattern: Element {}

const fn dt(code: DLDataTypeCode, bits: u8) -> DLDataType {
    DLDataType {
        code,
        bits,
        lanes: 1,
    }
}

macro_rules! elements {
    ($( $ty:ty => $code:ident, $bits:expr, $helper:ident; )*) => {
        $(
            // SAFETY: a primitive of exactly `bits / 8` bytes whose every bit pattern is a
            // valid value, laid out as DLPack describes this code (two's complement or IEEE 754).
            unsafe impl Element for $ty {
                const DTYPE: DLDataType = dt(DLDataTypeCode::$code, $bits);
            }

            // SAFETY: as above, every bit pattern is a valid value.
            unsafe impl AnyBitPattern for $ty {}

            #[doc = concat!("The dtype of `", stringify!($ty), "`: code `", stringify!($code), "`, ", stringify!($bits), " bits, 1 lane.")]
            pub const fn $helper() -> DLDataType {
                dt(DLDataTypeCode::$code, $bits)
            }
        )*
    };
}

elements! {
    i8 => INT, 8, dtype_i8;
    i16 => INT, 16, dtype_i16;
    i32 => INT, 32, dtype_i32;
    i64 => INT, 64, dtype_i64;
    u8 => UINT, 8, dtype_u8;
    u16 => UINT, 16, dtype_u16;
    u32 => UINT, 32, dtype_u32;
    u64 => UINT, 64, dtype_u64;
    f32 => FLOAT, 32, dtype_f32;
    f64 => FLOAT, 64, dtype_f64;
}

// SAFETY: `bool` is one byte; the bytes 0 and 1 are its only valid values, which
// `is_valid_bytes` checks before a view is handed out.
unsafe impl Element for bool {
    const DTYPE: DLDataType = dt(DLDataTypeCode::BOOL, 8);
    const ANY_BIT_PATTERN: bool = false;
    fn is_valid_bytes(bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| b <= 1)
    }
}

/// The dtype of `bool`: code `BOOL`, 8 bits, 1 lane.
pub const fn dtype_bool() -> DLDataType {
    dt(DLDataTypeCode::BOOL, 8)
}

/// The dtype of an IEEE half-precision float: code `FLOAT`, 16 bits.
pub const fn dtype_f16() -> DLDataType {
    dt(DLDataTypeCode::FLOAT, 16)
}

/// The dtype of bfloat16: code `BFLOAT`, 16 bits.
pub const fn dtype_bf16() -> DLDataType {
    dt(DLDataTypeCode::BFLOAT, 16)
}

/// The dtype of a complex number of two `f32`: code `COMPLEX`, 64 bits.
pub const fn dtype_complex64() -> DLDataType {
    dt(DLDataTypeCode::COMPLEX, 64)
}

/// The dtype of a complex number of two `f64`: code `COMPLEX`, 128 bits.
pub const fn dtype_complex128() -> DLDataType {
    dt(DLDataTypeCode::COMPLEX, 128)
}

#[cfg(feature = "half")]
#[cfg_attr(docsrs, doc(cfg(feature = "half")))]
// SAFETY: `half::f16` is a `#[repr(transparent)]` u16 holding IEEE binary16 bits.
unsafe impl Element for half::f16 {
    const DTYPE: DLDataType = dtype_f16();
}

#[cfg(feature = "half")]
#[cfg_attr(docsrs, doc(cfg(feature = "half")))]
// SAFETY: every bit pattern of its bytes is a valid value (IEEE / bfloat16 bits).
unsafe impl AnyBitPattern for half::f16 {}

#[cfg(feature = "half")]
#[cfg_attr(docsrs, doc(cfg(feature = "half")))]
// SAFETY: `half::bf16` is a `#[repr(transparent)]` u16 holding bfloat16 bits.
unsafe impl Element for half::bf16 {
    const DTYPE: DLDataType = dtype_bf16();
}

#[cfg(feature = "half")]
#[cfg_attr(docsrs, doc(cfg(feature = "half")))]
// SAFETY: every bit pattern of its bytes is a valid value (IEEE / bfloat16 bits).
unsafe impl AnyBitPattern for half::bf16 {}

#[cfg(feature = "num-complex")]
#[cfg_attr(docsrs, doc(cfg(feature = "num-complex")))]
// SAFETY: `Complex<f32>` is `#[repr(C)]` { re: f32, im: f32 }: 8 bytes, no padding, the
// interleaved layout DLPack uses for complex64.
unsafe impl Element for num_complex::Complex32 {
    const DTYPE: DLDataType = dtype_complex64();
}

#[cfg(feature = "num-complex")]
#[cfg_attr(docsrs, doc(cfg(feature = "num-complex")))]
// SAFETY: every bit pattern of its bytes is a valid value (IEEE / bfloat16 bits).
unsafe impl AnyBitPattern for num_complex::Complex32 {}

#[cfg(feature = "num-complex")]
#[cfg_attr(docsrs, doc(cfg(feature = "num-complex")))]
// SAFETY: `Complex<f64>` is `#[repr(C)]` { re: f64, im: f64 }: 16 bytes, no padding, the
// interleaved layout DLPack uses for complex128.
unsafe impl Element for num_complex::Complex64 {
    const DTYPE: DLDataType = dtype_complex128();
}

#[cfg(feature = "num-complex")]
#[cfg_attr(docsrs, doc(cfg(feature = "num-complex")))]
// SAFETY: every bit pattern of its bytes is a valid value (IEEE / bfloat16 bits).
unsafe impl AnyBitPattern for num_complex::Complex64 {}

/// The CPU device, `(kDLCPU, 0)`.
pub const fn cpu_device() -> DLDevice {
    DLDevice {
        device_type: DLDeviceType::CPU,
        device_id: 0,
    }
}

/// CUDA device number `id`.
pub const fn cuda_device(id: i32) -> DLDevice {
    DLDevice {
        device_type: DLDeviceType::CUDA,
        device_id: id,
    }
}

/// Pinned CUDA host memory (`kDLCUDAHost`), device 0.
pub const fn cuda_host_device() -> DLDevice {
    DLDevice {
        device_type: DLDeviceType::CUDA_HOST,
        device_id: 0,
    }
}

/// ROCm device number `id`.
pub const fn rocm_device(id: i32) -> DLDevice {
    DLDevice {
        device_type: DLDeviceType::ROCM,
        device_id: id,
    }
}

/// Any device, by type and index.
pub const fn device(device_type: DLDeviceType, device_id: i32) -> DLDevice {
    DLDevice {
        device_type,
        device_id,
    }
}

/// Checks that a dtype is well formed: non-zero bits and lanes, and for the codes with a fixed
/// width (bool, bfloat16, FP8, FP6, FP4) that exact width. Unknown codes are only checked for
/// non-zero bits and lanes.
pub fn validate_dtype(dtype: DLDataType) -> Result<(), super::Error> {
    let fixed = match dtype.code.0 {
        6 => Some(8),       // bool
        4 => Some(16),      // bfloat16
        7..=14 => Some(8),  // FP8 variants
        15 | 16 => Some(6), // FP6
        17 => Some(4),      // FP4
        _ => None,
    };
    let ok = dtype.bits != 0 && dtype.lanes != 0 && fixed.is_none_or(|bits| dtype.bits == bits);
    if ok {
        Ok(())
    } else {
        Err(super::Error::InvalidDtype(dtype))
    }
}

/// Size of one element of `dtype` in bits (`bits * lanes`).
pub const fn element_bits(dtype: DLDataType) -> u64 {
    dtype.bits as u64 * dtype.lanes as u64
}
