//! What `#[derive(IntoDLPack)]`'s generated code calls. Hidden; may change in any release.

pub use alloc::sync::Arc;

pub use crate::into_dlpack::DerivedData;
/// The validated extent of a layout, for the export that follows the derive's bounds check.
pub use crate::safe::layout::Extent;

/// The class-side pieces of the Python methods the derive adds (feature `pyo3`).
#[cfg(feature = "pyo3")]
pub use crate::pyo3_glue::export::{
    class_export::{export_dlpack_device, ClassRoute},
    dlpack_method::{dlpack_method, CapsuleObject, MethodDescriptor},
    exchange_export::{class_exchange_api_capsule, exchange_api},
};

use alloc::vec::Vec;
use core::ffi::c_void;

use crate::ffi::{DLDataType, DLDevice};
use crate::safe::{Buffer, Element, Error, TensorInfo};

/// Checks that a `#[dlpack(data)]` field is a [`Buffer`].
#[inline]
pub fn data_field<B: Buffer>(buffer: &B) -> &B {
    buffer
}

/// The buffer's first element, as the untyped pointer `TensorInfo` holds.
#[inline]
pub fn data_ptr<B: Buffer>(buffer: &B) -> *mut c_void {
    buffer.data_ptr().cast()
}

/// Whether a derived export of `buffer` may let consumers write to it.
#[inline]
pub fn consumers_may_write<B: Buffer>(buffer: &B) -> bool {
    // Safe Rust can read the buffer through `&self`: no consumer may write invalid bit patterns
    // (bool), and the pointer taken through `&self` must carry write permission.
    buffer.is_writable() && B::SHARED_PTR_WRITABLE && <B::Elem as Element>::ANY_BIT_PATTERN
}

/// `Buffer::REGISTRY_GUARDED`: a derived `IntoDLPack::rust_access_registered`.
#[inline]
pub fn registry_guarded<B: Buffer>(_buffer: &B) -> bool {
    B::REGISTRY_GUARDED
}

/// The dtype of the buffer's element type.
pub fn element_dtype<B: Buffer>(_buffer: &B) -> DLDataType {
    <B::Elem as Element>::DTYPE
}

/// The shape without a shape field: one dimension over the whole buffer, in elements of `dtype`.
pub fn whole_buffer_shape<B: Buffer>(buffer: &B, dtype: DLDataType) -> Vec<i64> {
    let bits = buffer_bits(buffer);
    let element = crate::safe::element_bits(dtype);
    let len = if element == 0 {
        0
    } else {
        bits / element as u128
    };
    alloc::vec![i64::try_from(len).unwrap_or(i64::MAX)]
}

fn buffer_bits<B: Buffer>(buffer: &B) -> u128 {
    buffer.num_elements() as u128 * core::mem::size_of::<B::Elem>() as u128 * 8
}

/// Extents or strides as `i64`, `overflow` for a value that does not fit.
fn to_dims<D: Copy + TryInto<i64>>(values: &[D], overflow: i64) -> Vec<i64> {
    values
        .iter()
        .map(|&v| v.try_into().unwrap_or(overflow))
        .collect()
}

/// A field usable as `#[dlpack(shape)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a `#[dlpack(shape)]` field",
    label = "not a list of integer extents",
    note = "use `Vec<i64>`, `Vec<usize>`, `[usize; N]`, `Box<[i64]>`, `Arc<[i64]>` or `&'static [i64]` (any integer element)"
)]
pub trait ShapeField {
    /// The extents as `i64`.
    fn dims(&self) -> Vec<i64>;
}

/// A field usable as `#[dlpack(strides)]` (`None`: compact row-major).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a `#[dlpack(strides)]` field",
    label = "not a list of integer strides",
    note = "use `Vec<i64>`, `Vec<isize>`, `[i64; N]`, `Box<[i64]>` (any integer element), or an `Option` of one"
)]
pub trait StridesField {
    /// The strides in elements, or `None` for compact row-major.
    fn strides(&self) -> Option<Vec<i64>>;
}

macro_rules! dims_fields {
    ($([$($g:tt)*] $t:ty;)*) => {$(
        impl<$($g)*> ShapeField for $t {
            fn dims(&self) -> Vec<i64> {
                to_dims(&self[..], -1)
            }
        }
        impl<$($g)*> StridesField for $t {
            fn strides(&self) -> Option<Vec<i64>> {
                Some(to_dims(&self[..], i64::MAX))
            }
        }
        impl<$($g)*> StridesField for Option<$t> {
            fn strides(&self) -> Option<Vec<i64>> {
                self.as_ref().map(|s| to_dims(&s[..], i64::MAX))
            }
        }
    )*};
}

dims_fields! {
    [D: Copy + TryInto<i64>] Vec<D>;
    [D: Copy + TryInto<i64>] alloc::boxed::Box<[D]>;
    [D: Copy + TryInto<i64>] alloc::sync::Arc<[D]>;
    [D: Copy + TryInto<i64>] alloc::rc::Rc<[D]>;
    [D: Copy + TryInto<i64>, const N: usize] [D; N];
    ['a, D: Copy + TryInto<i64>] &'a [D];
}

/// A field usable as `#[dlpack(dtype)]`.
#[diagnostic::on_unimplemented(
    message = "`#[dlpack(dtype)]` must be of type `DLDataType`, not `{Self}`",
    label = "not a `dlpack_rs::ffi::DLDataType`"
)]
pub trait DtypeField {
    /// The dtype.
    fn dtype(&self) -> DLDataType;
}

impl DtypeField for DLDataType {
    fn dtype(&self) -> DLDataType {
        *self
    }
}

/// A field usable as `#[dlpack(device)]`.
#[diagnostic::on_unimplemented(
    message = "`#[dlpack(device)]` must be of type `DLDevice`, not `{Self}`",
    label = "not a `dlpack_rs::ffi::DLDevice`"
)]
pub trait DeviceField {
    /// The device.
    fn device(&self) -> DLDevice;
}

impl DeviceField for DLDevice {
    fn device(&self) -> DLDevice {
        *self
    }
}

/// The value of `#[dlpack(device = EXPR)]`, checked to be a `DLDevice`.
#[inline]
pub fn device_value(device: DLDevice) -> DLDevice {
    device
}

/// A field usable as `#[dlpack(byte_offset)]`.
#[diagnostic::on_unimplemented(
    message = "`#[dlpack(byte_offset)]` must be an unsigned integer (`u64`, `usize`, `u32`), not `{Self}`",
    label = "not an unsigned byte offset"
)]
pub trait ByteOffsetField {
    /// The offset in bytes.
    fn byte_offset(&self) -> u64;
}

macro_rules! byte_offsets {
    ($($t:ty),*) => {$(
        impl ByteOffsetField for $t {
            fn byte_offset(&self) -> u64 {
                u64::try_from(*self).unwrap_or(u64::MAX)
            }
        }
    )*};
}
byte_offsets!(u64, usize, u32, u16, u8);

/// Returns `info` with its extent (`None` for malformed metadata) once its device is the
/// buffer's ([`Error::DeviceMismatch`]) and every byte lies inside it ([`Error::OutsideBuffer`]).
pub fn within_buffer_extent<B: Buffer>(
    buffer: &B,
    info: TensorInfo,
    type_name: &'static str,
    field: &'static str,
) -> Result<(TensorInfo, Option<Extent>), Error> {
    if info.device != buffer.device() {
        return Err(Error::DeviceMismatch {
            expected: info.device,
            found: buffer.device(),
        });
    }
    let Ok(extent) = info.extent() else {
        return Ok((info, None));
    };
    if extent.numel == 0 {
        return Ok((info, Some(extent)));
    }
    // The element range addressed, relative to the first element.
    let (min, max) = (extent.min as i128, extent.max as i128);
    let element = crate::safe::element_bits(info.dtype) as i128;
    let first_bit = info.byte_offset as i128 * 8 + min * element;
    let end_bit = info.byte_offset as i128 * 8 + (max + 1) * element;
    let available = buffer_bits(buffer) as i128;
    if first_bit < 0 || end_bit > available {
        let clamp = |bits: i128| i64::try_from(bits).unwrap_or(i64::MAX);
        return Err(Error::OutsideBuffer {
            type_name,
            field,
            first: clamp(first_bit.div_euclid(8)),
            end: clamp((end_bit + 7).div_euclid(8)),
            len: (available / 8) as u64,
        });
    }
    Ok((info, Some(extent)))
}

/// The derive's `tensor_info`: the checked description, or a panic (exports return the error).
#[track_caller]
pub fn expect_within(checked: Result<(TensorInfo, Option<Extent>), Error>) -> TensorInfo {
    match checked {
        Ok((info, _)) => info,
        Err(e) => panic!("#[derive(IntoDLPack)]: {e}"),
    }
}

/// Implemented by both ways of adding the protocol methods: giving both is one E0119 error.
#[allow(non_camel_case_types)]
pub trait Use_either_dlpack_pyclass_or_dlpack_rs_pymethods_not_both {}

/// Whether a concrete type is a `#[pyclass]` with the protocol methods, at compile time.
pub struct Probe<T: ?Sized>(core::marker::PhantomData<T>);

/// The answers for types the inherent impls of [`Probe`] do not cover.
pub trait ProbeFallback {
    /// Not a `#[pyclass]`.
    const IS_PYCLASS: bool = false;
    /// No protocol methods from dlpack-rs.
    const HAS_PROTOCOL: bool = false;
}

impl<T: ?Sized> ProbeFallback for Probe<T> {}

#[cfg(feature = "pyo3")]
impl<T: pyo3::PyClass> Probe<T> {
    /// A `#[pyclass]`.
    pub const IS_PYCLASS: bool = true;
}

impl<T: Use_either_dlpack_pyclass_or_dlpack_rs_pymethods_not_both> Probe<T> {
    /// Given the protocol methods (or `#[dlpack(no_pymethods)]`).
    pub const HAS_PROTOCOL: bool = true;
}

/// Refuses at compile time a `#[pyclass]` deriving `IntoDLPack` without the protocol methods.
#[doc(hidden)]
#[macro_export]
macro_rules! __dlpack_check_methods {
    ($ty:ty, $name:literal) => {
        const _: () = {
            #[allow(unused_imports)]
            use $crate::__private_derive_v0_4::ProbeFallback as _;
            if <$crate::__private_derive_v0_4::Probe<$ty>>::IS_PYCLASS
                && !<$crate::__private_derive_v0_4::Probe<$ty>>::HAS_PROTOCOL
            {
                ::core::panic!(::core::concat!(
                    "`",
                    $name,
                    "` is a #[pyclass] deriving IntoDLPack, but Python will not see ",
                    "`__dlpack__`: add `#[dlpack(pyclass)]` to the struct, or write ",
                    "`#[dlpack_rs::pymethods]` in place of `#[pymethods]` on its impl block ",
                    "(or `#[dlpack(no_pymethods)]` if you write the protocol methods yourself)"
                ));
            }
        };
    };
}

/// The `#[pymethods]` block of the class's own items plus the DLPack protocol.
#[cfg(feature = "pyo3")]
#[doc(hidden)]
#[macro_export]
macro_rules! __dlpack_pymethods {
    // From `#[dlpack(pyclass)]`: the methods under their Python names.
    (@derive $ty:ty) => {
        $crate::__dlpack_pymethods! {
            @block [] [] $ty {}
            __dlpack__ __dlpack_device__ __dlpack_c_exchange_api__
        }
    };
    // From `#[dlpack_rs::pymethods]`: Rust names of their own (one conflict error for both
    // ways); the block's `cfg` also guards the marker impl.
    ([$($attr:tt)*] cfg[$($cfg:tt)*] $ty:ty { $($items:tt)* }) => {
        $crate::__dlpack_pymethods! {
            @block [$($attr)*] [$($cfg)*] $ty { $($items)* }
            __dlpack_rs_dlpack __dlpack_rs_dlpack_device __dlpack_rs_exchange_api
        }
    };
    (@block [$($attr:tt)*] [$($cfg:tt)*] $ty:ty { $($items:tt)* } $dlpack:ident $device:ident $api:ident) => {
        $($cfg)*
        impl $crate::__private_derive_v0_4::Use_either_dlpack_pyclass_or_dlpack_rs_pymethods_not_both for $ty {}

        #[$crate::pyo3::pymethods]
        #[pyo3(crate = "::dlpack_rs::pyo3")]
        $($attr)*
        impl $ty {
            $($items)*

            /// Exports the data as a DLPack capsule (added by dlpack-rs).
            #[classattr]
            #[pyo3(name = "__dlpack__")]
            fn $dlpack(
                py: $crate::pyo3::Python<'_>,
            ) -> $crate::pyo3::PyResult<$crate::__private_derive_v0_4::MethodDescriptor<'_>> {
                $crate::__private_derive_v0_4::dlpack_method::<Self>(py)
            }

            /// `(device_type, device_id)` of the data (added by dlpack-rs).
            #[pyo3(name = "__dlpack_device__")]
            fn $device(&self) -> $crate::pyo3::PyResult<(i32, i32)> {
                $crate::__private_derive_v0_4::export_dlpack_device(self)
            }

            #[classattr]
            #[pyo3(name = "__dlpack_c_exchange_api__")]
            fn $api(
                py: $crate::pyo3::Python<'_>,
            ) -> $crate::pyo3::PyResult<$crate::__private_derive_v0_4::CapsuleObject<'_>> {
                $crate::__private_derive_v0_4::class_exchange_api_capsule::<Self>(py)
                    .map($crate::__private_derive_v0_4::CapsuleObject)
            }
        }
    };
}

/// Without feature `pyo3` there is no Python side to add.
#[cfg(not(feature = "pyo3"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __dlpack_pymethods {
    ($($any:tt)*) => {
        ::core::compile_error!(
            "the Python methods (`#[dlpack(pyclass)]`, `#[dlpack_rs::pymethods]`) need dlpack-rs's \
             feature `pyo3`: `dlpack-rs = { version = \"0.4\", features = [\"derive\", \"pyo3\"] }`"
        );
    };
}
