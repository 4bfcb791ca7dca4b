//! The ownership model without Python: export Rust memory as managed tensors, and import
//! managed tensors as owned values with validated metadata and borrow-checked views.
//!
//! | question | item |
//! |---|---|
//! | what does an export describe? | [`TensorInfo`] |
//! | which memory can the safe route export? | [`Buffer`], [`SharedBuffer`] |
//! | owned storage aligned for jax (64 bytes) | [`AlignedBuffer`] |
//! | memory Rust edits while Python views it | [`SharedMut`] |
//! | how do I export safely? | [`Export`] |
//! | how do I export a raw pointer? | [`pack`], [`pack_versioned`], `try_` forms |
//! | who owns a managed tensor? | [`Managed`] ([`ManagedTensor`], [`ManagedTensorVersioned`], [`AnyManaged`]) |
//! | how are views kept from aliasing? | [the borrow registry](#the-borrow-registry), [`ReadGuard`], [`WriteGuard`] |
//! | element types and devices | [`Element`], `dtype_*`, `*_device`, [`DLDataType::name`](crate::ffi::DLDataType::name) |
//! | sub-byte and low-precision data | [`Packing`], [`Managed::as_packed`], [`PackedExport`] |
//!
//! With feature `ndarray`, `Managed::as_array` / `as_array_mut` give ndarray views.
//!
//! # The borrow registry
//!
//! DLPack lets many owners describe one memory (two `__dlpack__` calls on one numpy array, a
//! torch tensor re-exporting our capsule), so the borrow checker alone cannot check `&mut`.
//! Every view (`as_slice`, `as_mut_slice`, `as_array`, `as_array_mut`) first registers the
//! bytes it covers. Shared borrows may overlap; an exclusive one that overlaps any other is
//! refused with [`Error::AlreadyBorrowed`]. Dropping the view releases its bytes.
//!
//! The registry is a versioned C table (`BorrowApi`), so every extension module in a process
//! shares one whatever its release: the Python glue publishes the first module's table and
//! later modules adopt it. Without Python each copy of the crate uses its own table.
//!
//! A view registers the bytes from its lowest to its highest element that lie on its period
//! (the gcd of its byte strides). Two borrows conflict only when these sets share a byte,
//! decided exactly; past 64 walked elements the answer is "conflict". So `z[::2]` and
//! `z[1::2]` may be viewed mutably together, as may an image's channels. With several strided
//! axes the set is a superset, so some disjoint views conflict (a refusal, never an alias).
//! Sub-byte elements, contiguous views, exports and version-1 tables use whole ranges.
//!
//! The lock is a spin lock held only to scan the live borrows (no foreign code, no Python), so
//! it cannot deadlock and needs no GIL.

pub(crate) mod borrow;
mod dtype;
mod error;
pub(crate) mod export;
pub(crate) mod import;
pub(crate) mod layout;
mod packed;

pub use export::aligned::AlignedBuffer;
pub(crate) use export::block::Readers;
pub use export::buffer::{Buffer, SharedBuffer, StreamOrder};
pub(crate) use export::copy::{copy_described, AlignedBytes};
#[allow(unused_imports)] // used by the layers above safe/
pub(crate) use import::described::Described;
// Named one by one, so that what is public is a decision.
#[cfg(feature = "safetensors")]
#[cfg_attr(docsrs, doc(cfg(feature = "safetensors")))]
pub use crate::interop::safetensors::SafeTensorsFile;
pub use borrow::guard::{ReadGuard, WriteGuard};
#[allow(unused_imports)] // used by the layers above safe/
pub(crate) use dtype::element_bits;
pub use dtype::{
    cpu_device, cuda_device, dtype_bool, dtype_f32, dtype_f64, dtype_i32, dtype_i64, dtype_u16,
    dtype_u8, AnyBitPattern, Element,
};
pub use error::Error;
pub use export::pack::{pack, pack_versioned, try_pack, try_pack_versioned};
#[allow(unused_imports)] // used by the layers above safe/
pub(crate) use export::pack::{pack_owned, pack_validated, PackAs};
pub use export::shared_mut::SharedMut;
pub use export::Export;
#[allow(unused_imports)] // used by the layers above safe/
pub(crate) use import::views::{host_viewable, External, ExternalApi};
pub use import::{AnyKind, AnyManaged, Kind, Managed, ManagedTensor, ManagedTensorVersioned};
pub use layout::tensor_info::TensorInfo;
#[allow(unused_imports)] // used by the layers above safe/
pub(crate) use layout::tensor_info::Validated;
#[allow(unused_imports)] // used by the layers above safe/
pub(crate) use layout::validate_dtype;
#[allow(unused_imports)] // used by the layers above safe/
pub(crate) use layout::Extent;
#[allow(unused_imports)] // used by the layers above safe/
pub(crate) use layout::{compact_strides, is_c_contiguous};
pub use packed::{PackedExport, PackedSlice, Packing};
