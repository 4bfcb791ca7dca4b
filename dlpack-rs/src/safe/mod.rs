//! The ownership model, without Python: export Rust memory as managed tensors, import managed
//! tensors as owned values with validated metadata and borrow-checked views.
//!
//! | question | file |
//! |---|---|
//! | what does an export describe? | [`TensorInfo`] |
//! | which memory can the safe route export? | [`Buffer`], [`Dim`], [`SharedBuffer`] |
//! | owned storage aligned for jax (64 bytes) | [`AlignedBuffer`] |
//! | memory Rust edits in place while Python views it (shared-mutable) | [`SharedMut`] |
//! | how do I export safely? | [`Export`] |
//! | how do I export a raw pointer (the seed route)? | [`pack`], [`pack_versioned`], `try_` forms |
//! | who owns an imported (or exported) managed tensor? | [`Managed`] ([`ManagedTensor`], [`ManagedTensorVersioned`], [`AnyManaged`]) |
//! | how are views kept from aliasing? | [`borrow`], [`ReadSlice`], [`WriteSlice`] |
//! | element types and devices | [`Element`], `dtype_*`, `*_device`, [`DtypeName`] |
//! | sub-byte and low-precision data (FP4, FP6, FP8 without a Rust type) | [`Packing`], [`Managed::as_packed`], [`PackedExport`] |
//!
//! With feature `ndarray`, [`ndarray`](mod@ndarray) adds `as_array` / `as_array_mut` views.

mod aligned;
mod block;
pub mod borrow;
mod buffer;
mod copy;
mod described;
mod dtype;
mod error;
mod export;
mod guard;
pub(crate) mod layout;
mod managed;
#[cfg(feature = "ndarray")]
#[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
pub mod ndarray;
mod pack;
mod packed;
mod shared_mut;
mod tensor_info;

pub use aligned::AlignedBuffer;
pub(crate) use block::Readers;
pub use buffer::{Buffer, Dim, SharedBuffer, StreamOrder};
pub(crate) use copy::{copy_described, AlignedBytes};
#[allow(unused_imports)] // used by the Python glue
pub(crate) use described::Described;
pub use dtype::*;
pub use error::Error;
pub use export::Export;
pub use guard::{ReadSlice, WriteSlice};
#[allow(unused_imports)] // used by the Python glue
pub(crate) use layout::Extent;
pub use layout::{compact_strides, is_c_contiguous, MAX_NDIM};
pub use managed::{
    AnyKind, AnyManaged, Kind, Legacy, Managed, ManagedTensor, ManagedTensorVersioned, Versioned,
};
#[allow(unused_imports)] // used by the Python glue
pub(crate) use managed::{External, ExternalApi};
pub use pack::{pack, pack_versioned, try_pack, try_pack_versioned};
#[allow(unused_imports)] // the export routes above this layer
pub(crate) use pack::{pack_owned, pack_validated, PackAs};
pub use packed::{PackedExport, PackedSlice, Packing};
pub use shared_mut::SharedMut;
pub use tensor_info::TensorInfo;
#[allow(unused_imports)] // used by the Python glue
pub(crate) use tensor_info::Validated;
