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
//! | how are views kept from aliasing? | [the borrow registry](#the-borrow-registry), [`ReadSlice`], [`WriteSlice`] |
//! | element types and devices | [`Element`], `dtype_*`, `*_device`, [`DtypeName`] |
//! | sub-byte and low-precision data (FP4, FP6, FP8 without a Rust type) | [`Packing`], [`Managed::as_packed`], [`PackedExport`] |
//!
//! With feature `ndarray`, [`ndarray`](mod@ndarray) adds `as_array` / `as_array_mut` views.
//!
//! # The borrow registry
//!
//! DLPack lets many owners describe one memory (two `__dlpack__` calls on one numpy array, a
//! torch tensor re-exporting a capsule of ours, a `#[pyclass]` that exports its own buffer), so
//! Rust's `&mut` cannot be checked by the borrow checker alone. Every view (`as_slice`,
//! `as_mut_slice`, `as_array`, `as_array_mut`) first registers the byte range it covers:
//!
//! - shared + shared over overlapping bytes is fine;
//! - exclusive + anything over overlapping bytes is refused with [`Error::AlreadyBorrowed`];
//! - dropping the view (its guard) releases the range.
//!
//! The registry is a small C table (`BorrowApi`, versioned) so that every extension module in
//! a process that uses this crate, whatever its release, can share one: the Python glue
//! publishes the first module's table and later modules adopt it. Without Python each copy of
//! the crate uses its own table.
//!
//! What a view registers is the set of bytes its elements address, as one progression: the
//! bytes from its lowest to its highest element that lie on the elements' period (the gcd of
//! its byte strides over the axes it steps along). Two borrows conflict only when they share a
//! byte of those sets, decided exactly (no enumeration of elements where the layout is regular;
//! at most 64 elements are walked where the overlap is shorter than the periods' lcm, and past
//! that the answer is "conflict"). So `z[::2]` and `z[1::2]` may be viewed mutably together,
//! as may the channels of an image. For one strided axis the set is exactly the elements'
//! bytes; for more axes it is a superset (rows a view skips still lie on its progression), so
//! two views of disjoint rows of one period conflict (a refusal, never an alias). Sub-byte
//! elements, contiguous views and exports register whole ranges; a shared table made by a copy
//! of this crate that knows only ranges (version 1) gets whole ranges too.
//!
//! The lock is a spin lock held only for a scan of the live borrows (no allocation of unbounded
//! size, no foreign code, no Python), so it cannot deadlock and needs no GIL.

pub(crate) mod borrow;
mod dtype;
mod error;
pub(crate) mod export;
pub(crate) mod import;

pub use export::aligned::AlignedBuffer;
pub(crate) use export::block::Readers;
pub use export::buffer::{Buffer, Dim, SharedBuffer, StreamOrder};
pub(crate) use export::copy::{copy_described, AlignedBytes};
#[allow(unused_imports)]
// crate API for the layers above safe/, none of which a featureless build has
pub(crate) use import::described::Described;
// Named one by one, so that what is public is a decision: the element traits, the dtype and
// device constructors, and the dtype rules (each with a doctest).
#[cfg(feature = "ndarray")]
#[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
pub use crate::interop::ndarray;
#[cfg(feature = "safetensors")]
#[cfg_attr(docsrs, doc(cfg(feature = "safetensors")))]
pub use crate::interop::safetensors::{serialize_safetensors, SafeTensorsFile};
pub use borrow::guard::{ReadSlice, WriteSlice};
pub use dtype::packed::{PackedExport, PackedSlice, Packing};
pub use dtype::{
    cpu_device, cuda_device, dtype_bool, dtype_f32, dtype_f64, dtype_i32, dtype_i64, dtype_rule,
    dtype_u16, dtype_u8, element_bits, validate_dtype, AnyBitPattern, DtypeName, Element,
};
pub use error::Error;
pub use export::pack::{pack, pack_versioned, try_pack, try_pack_versioned};
#[allow(unused_imports)] // the export routes above this layer
pub(crate) use export::pack::{pack_owned, pack_validated, PackAs};
pub use export::shared_mut::SharedMut;
pub use export::tensor_info::TensorInfo;
#[allow(unused_imports)]
// crate API for the layers above safe/, none of which a featureless build has
pub(crate) use export::tensor_info::Validated;
pub use export::Export;
#[allow(unused_imports)]
// crate API for the layers above safe/, none of which a featureless build has
pub(crate) use import::layout::Extent;
pub use import::layout::{compact_strides, is_c_contiguous, MAX_NDIM};
#[allow(unused_imports)]
// crate API for the layers above safe/, none of which a featureless build has
pub(crate) use import::views::{host_viewable, External, ExternalApi};
pub use import::{
    AnyKind, AnyManaged, Kind, Legacy, Managed, ManagedTensor, ManagedTensorVersioned, Versioned,
};
