//! The ownership model without Python: exports of Rust memory, and validated imports with
//! borrow-checked views.
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
//! | sub-byte and low-precision data | [`Packing`], [`Managed::as_packed`], [`Export::packed`] |
//!
//! With feature `ndarray`, `Managed::as_array` / `as_array_mut` give ndarray views.
//!
//! # The borrow registry
//!
//! Many owners may describe one memory, so every view registers the bytes it covers until it
//! drops. Shared borrows may overlap. An exclusive one that overlaps any other fails with
//! [`Error::AlreadyBorrowed`]. A strided view registers the bytes on its period (the gcd of its
//! byte strides), so `z[::2]` and `z[1::2]` may be viewed mutably together. The registry is a C
//! table shared by every extension module of a process (SAFETY.md, "The borrow registry").

pub(crate) mod borrow;
mod dtype;
mod error;
pub(crate) mod export;
pub(crate) mod import;
pub(crate) mod layout;
mod packed;

pub use export::aligned::AlignedBuffer;
#[allow(unused_imports)] // used by the Python glue, above safe/
pub(crate) use export::block::{set_keepalive_dropper, DropAt, KeepaliveDropper};
pub(crate) use export::block::{PackAs, Readers};
pub use export::buffer::{Buffer, SharedBuffer, StreamOrder};
#[allow(unused_imports)] // used by the layers above safe/
pub(crate) use export::copy::{copy_described, AlignedBytes};
#[cfg(any(feature = "candle", feature = "burn"))]
pub(crate) use export::{buffer::to_i64s, copy::copy_elements};
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
pub(crate) use export::pack::{pack_owned, pack_validated};
pub use export::shared_mut::SharedMut;
pub use export::Export;
#[allow(unused_imports)] // used by the layers above safe/
pub(crate) use import::views::{dtype_is, host_viewable, External, ExternalApi};
pub use import::{AnyKind, AnyManaged, Kind, Managed, ManagedTensor, ManagedTensorVersioned};
pub use layout::packing::Packing;
pub use layout::tensor_info::TensorInfo;
#[allow(unused_imports)] // used by the layers above safe/
pub(crate) use layout::{compact_strides, is_c_contiguous, tensor_info::Validated};
pub use packed::PackedSlice;
