//! Which dtypes there are and which Rust types are their elements: the [`Element`] trait, the
//! dtype constructors and per-code rules ([`validate_dtype`], [`DtypeName`]), and the device
//! constructors that go with them.

mod codes;
pub(super) mod packed;

pub use codes::{dtype_rule, validate_dtype, DtypeName};

use crate::ffi::{DLDataType, DLDevice, DLDeviceType};

/// A Rust type whose values are the elements of a DLPack tensor of dtype [`Element::DTYPE`].
///
/// Implemented for `bool`, every primitive integer and float, behind features `half` and
/// `num-complex` for `f16`, `bf16`, `Complex32` and `Complex64`, and behind feature `float8`
/// for `float8::F8E4M3` (DLPack `float8_e4m3fn`) and `float8::F8E5M2` (`float8_e5m2`).
/// Sub-byte types (FP4, FP6) have no element type: see [`Packing`](crate::safe::Packing) and
/// [`Managed::as_packed`](crate::safe::Managed::as_packed).
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
/// invalid value. The typed Python arguments (`TensorView`, `TensorViewMut`) ask for it.
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

macro_rules! elements {
    ($( $ty:ty => $dtype:ident $(, $helper:ident)?; )*) => {
        $(
            // SAFETY: a primitive of exactly `bits / 8` bytes whose every bit pattern is a
            // valid value, laid out as DLPack describes this code (two's complement or IEEE 754).
            unsafe impl Element for $ty {
                const DTYPE: DLDataType = DLDataType::$dtype;
            }

            // SAFETY: as above, every bit pattern is a valid value.
            unsafe impl AnyBitPattern for $ty {}

            $(
                #[doc = concat!("The dtype of `", stringify!($ty), "` (the seed's constructor; `DLDataType::", stringify!($dtype), "`).")]
                pub const fn $helper() -> DLDataType {
                    DLDataType::$dtype
                }
            )?
        )*
    };
}

elements! {
    i8 => INT8;
    i16 => INT16;
    i32 => INT32, dtype_i32;
    i64 => INT64, dtype_i64;
    u8 => UINT8, dtype_u8;
    u16 => UINT16, dtype_u16;
    u32 => UINT32;
    u64 => UINT64;
    f32 => FLOAT32, dtype_f32;
    f64 => FLOAT64, dtype_f64;
}

// SAFETY: `bool` is one byte; the bytes 0 and 1 are its only valid values, which
// `is_valid_bytes` checks before a view is handed out.
unsafe impl Element for bool {
    const DTYPE: DLDataType = DLDataType::BOOL;
    const ANY_BIT_PATTERN: bool = false;
    fn is_valid_bytes(bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| b <= 1)
    }
}

/// The dtype of `bool` (the seed's constructor; `DLDataType::BOOL`).
pub const fn dtype_bool() -> DLDataType {
    DLDataType::BOOL
}

#[cfg(feature = "half")]
#[cfg_attr(docsrs, doc(cfg(feature = "half")))]
// SAFETY: `half::f16` is a `#[repr(transparent)]` u16 holding IEEE binary16 bits.
unsafe impl Element for half::f16 {
    const DTYPE: DLDataType = DLDataType::FLOAT16;
}

#[cfg(feature = "half")]
#[cfg_attr(docsrs, doc(cfg(feature = "half")))]
// SAFETY: every bit pattern of its bytes is a valid value (IEEE / bfloat16 bits).
unsafe impl AnyBitPattern for half::f16 {}

#[cfg(feature = "half")]
#[cfg_attr(docsrs, doc(cfg(feature = "half")))]
// SAFETY: `half::bf16` is a `#[repr(transparent)]` u16 holding bfloat16 bits.
unsafe impl Element for half::bf16 {
    const DTYPE: DLDataType = DLDataType::BFLOAT16;
}

#[cfg(feature = "half")]
#[cfg_attr(docsrs, doc(cfg(feature = "half")))]
// SAFETY: every bit pattern of its bytes is a valid value (IEEE / bfloat16 bits).
unsafe impl AnyBitPattern for half::bf16 {}

#[cfg(feature = "float8")]
#[cfg_attr(docsrs, doc(cfg(feature = "float8")))]
// SAFETY: `float8::F8E4M3` is a `#[repr(transparent)]` u8 holding OCP E4M3 bits (no infinity,
// NaN at 0x7F / 0xFF, largest finite 448): DLPack's `kDLFloat8_e4m3fn`, 8 bits, 1 lane.
unsafe impl Element for float8::F8E4M3 {
    const DTYPE: DLDataType = DLDataType::new(crate::ffi::DLDataTypeCode::FLOAT8_E4M3FN, 8, 1);
}

#[cfg(feature = "float8")]
#[cfg_attr(docsrs, doc(cfg(feature = "float8")))]
// SAFETY: a transparent u8: every bit pattern is a value (some of them NaN).
unsafe impl AnyBitPattern for float8::F8E4M3 {}

#[cfg(feature = "float8")]
#[cfg_attr(docsrs, doc(cfg(feature = "float8")))]
// SAFETY: `float8::F8E5M2` is a `#[repr(transparent)]` u8 holding E5M2 bits (IEEE-like, with
// infinities): DLPack's `kDLFloat8_e5m2`, 8 bits, 1 lane.
unsafe impl Element for float8::F8E5M2 {
    const DTYPE: DLDataType = DLDataType::new(crate::ffi::DLDataTypeCode::FLOAT8_E5M2, 8, 1);
}

#[cfg(feature = "float8")]
#[cfg_attr(docsrs, doc(cfg(feature = "float8")))]
// SAFETY: a transparent u8: every bit pattern is a value (some of them NaN).
unsafe impl AnyBitPattern for float8::F8E5M2 {}

#[cfg(feature = "num-complex")]
#[cfg_attr(docsrs, doc(cfg(feature = "num-complex")))]
// SAFETY: `Complex<f32>` is `#[repr(C)]` { re: f32, im: f32 }: 8 bytes, no padding, the
// interleaved layout DLPack uses for complex64.
unsafe impl Element for num_complex::Complex32 {
    const DTYPE: DLDataType = DLDataType::COMPLEX64;
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
    const DTYPE: DLDataType = DLDataType::COMPLEX128;
}

#[cfg(feature = "num-complex")]
#[cfg_attr(docsrs, doc(cfg(feature = "num-complex")))]
// SAFETY: every bit pattern of its bytes is a valid value (IEEE / bfloat16 bits).
unsafe impl AnyBitPattern for num_complex::Complex64 {}

/// The CPU device, `(kDLCPU, 0)` (the seed's constructor; `DLDevice::CPU`).
pub const fn cpu_device() -> DLDevice {
    DLDevice::CPU
}

/// CUDA device number `id` (the seed's constructor; `DLDevice::new(DLDeviceType::CUDA, id)`).
pub const fn cuda_device(id: i32) -> DLDevice {
    DLDevice::new(DLDeviceType::CUDA, id)
}

/// Size of one element of `dtype` in bits (`bits * lanes`).
pub const fn element_bits(dtype: DLDataType) -> u64 {
    dtype.bits as u64 * dtype.lanes as u64
}
