//! Portable Rust bindings for the DLPack tensor protocol.
//!
//! - [`ffi`]: the DLPack 1.3 C ABI, hand-written `#[repr(C)]` types and constants.
//! - [`safe`]: ownership-correct export ([`safe::pack`], [`safe::pack_versioned`],
//!   [`safe::Export`]) and import ([`safe::ManagedTensor`], [`safe::ManagedTensorVersioned`])
//!   with validated metadata and typed views.
#![cfg_attr(
    feature = "pyo3",
    doc = "- [`pyo3_glue`]: the Python `__dlpack__` protocol (feature `pyo3`)."
)]
#![cfg_attr(
    feature = "derive",
    doc = "- [`macro@IntoDLPack`]: `#[derive(IntoDLPack)]` (feature `derive`), with its attribute reference."
)]
#![cfg_attr(
    feature = "cudarc",
    doc = "- [`cuda`]: CUDA memory through `cudarc` (feature `cudarc`)."
)]
#![cfg_attr(
    feature = "ndarray",
    doc = "- [`safe::Managed::as_array`]: ndarray views of imports, zero-copy `Array` export (feature `ndarray`)."
)]
//!
//! Without features the crate is `#![no_std]` (it needs `alloc`) and has no dependencies.
//!
//! # Ownership model
//!
//! An exported tensor is one heap block owning the *keepalive*, a Rust value that owns the
//! memory. Whoever holds the block's pointer owns it; its deleter frees it, exactly once.
//!
//! ```text
//!  EXPORT (Rust produces)                          IMPORT (Rust consumes)
//!
//!  keepalive K (Vec, Array, #[pyclass] ...)        producer's DLManagedTensor[Versioned]
//!     │ moved into                                    │ *mut handed over (capsule renamed
//!     ▼                                               │  to used_*, or a C call)
//!  ┌─ heap block ──────────────────────┐              ▼
//!  │ DLManagedTensor[Versioned]        │           ManagedTensor[Versioned] / PyTensor
//!  │   dl_tensor.data ──▶ K's memory   │             owns it: checks the major version
//!  │   shape, strides ──▶ Vecs below   │             first, validates once, hands out
//!  │   deleter = drop this block       │             views (&[T], ArrayViewD, ...)
//!  │ shape: Vec, strides: Vec, K       │              │ Drop
//!  └───────────────────────────────────┘              ▼
//!     │ pointer given to the consumer              producer's deleter(ptr), exactly once,
//!     │ (capsule, C call, Rust owner)              on whatever thread drops it
//!     ▼
//!  consumer reads dl_tensor while it needs it ... then calls deleter(ptr) once
//!     │
//!     ▼
//!  the block is freed and K dropped: the memory dies with the last user
//!
//!  Capsule not consumed (still "dltensor[_versioned]") ──▶ its destructor calls the deleter.
//!  Capsule consumed ("used_dltensor[_versioned]")      ──▶ its destructor does nothing.
//! ```
//!
//! A `#[pyclass]` export keeps the Python object alive instead; its deleter may run on any
//! thread, with or without the GIL, even at shutdown.
//!
//! # Feature flags
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `std` | no | deleters catch panics of a keepalive's `Drop` instead of aborting |
//! | `pyo3` | no | [`pyo3_glue`](crate#python-glue): `IntoDLPack` capsules, `PyTensor`, `dlpack_rs.Tensor` (implies `std`) |
//! | `derive` | no | `#[derive(IntoDLPack)]`, re-exported next to the trait |
//! | `half` | no | `half::f16` and `half::bf16` as [`safe::Element`]s |
//! | `float8` | no | `float8::F8E4M3` (`float8_e4m3fn`) and `float8::F8E5M2` (`float8_e5m2`) as [`safe::Element`]s (`no_std`) |
//! | `num-complex` | no | `Complex32` and `Complex64` as [`safe::Element`]s |
//! | `ndarray` | no | `as_array` / `as_array_mut` views, `Array` / `ArcArray` export and `Buffer` |
//! | `image` | no | `image` 0.25: `ImageBuffer` export as `(H, W, C)` and `TensorView::as_image` views (implies `std`) |
//! | `safetensors` | no | `safe::SafeTensorsFile` (zero-copy reads, and `serialize` to write; implies `std`) |
//! | `inspect` | no | pyo3's `experimental-inspect`: type hints in generated stubs (implies `pyo3`; see `pyo3_glue::TYPING_STUB`) |
//! | `cudarc` | no | `dlpack_rs::cuda`: `CudaSlice` export, `CudaTensor` import, stream ordering (implies `std`) |
//! | `abi3` | no | builds the pyo3 glue against CPython's stable ABI (Python >= 3.9, one wheel) |
//! | `candle` | no | candle-core 0.11 CPU tensors: `ManagedTensorVersioned::try_from(&tensor)` (one copy), `unsafe ManagedTensorVersioned::share_candle` (zero-copy, `READ_ONLY`), `Tensor::try_from(&managed)` (one copy) |
//!
//! # Python glue
//!
//! With feature `pyo3`, `pyo3_glue` implements the whole `__dlpack__` / `__dlpack_device__`
//! protocol, errors included.
//!
//! # Compatibility
//!
//! Tested in the interop suite (CPython 3.11 and 3.13; numpy also 3.9 to 3.12, abi3). "Legacy"
//! is the `dltensor` capsule, "versioned" `dltensor_versioned` (DLPack 1.x; we produce 1.3).
//!
//! | peer | takes from Rust | gives to Rust | notes |
//! |---|---|---|---|
//! | numpy 2.4 | versioned (asks `max_version=(1, 0)`) | legacy or versioned 1.0 | read-only exports stay read-only; no bfloat16, FP8, FP6 or FP4 (numpy 2.5: bfloat16 and FP8 with `ml_dtypes` installed) |
//! | numpy 2.0 (Python 3.9) | legacy only | legacy only | imports are read-only; cannot export read-only arrays |
//! | torch 2.15 | both, and bare capsules | legacy, or versioned 1.3 when asked | ignores `READ_ONLY`; no negative strides |
//! | jax 0.10 | legacy only | legacy only | needs `__dlpack_device__`; zero-copy only for 64-byte aligned data |
//! | pyarrow 26 | versioned 1.3 (no fallback) | versioned 1.3, `READ_ONLY` | 1-D arrays only; no bool |
//! | array-api-strict 2.6 | as numpy | as numpy | no float16 |
//!
//! Rust imports accept any DLPack 1.x minor version, NULL strides, any `byte_offset` and
//! negative strides, and refuse other major versions (calling the deleter, reading nothing else).
#![cfg_attr(not(feature = "std"), no_std)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

extern crate alloc;

pub mod ffi;
pub mod safe;

mod into_dlpack;
#[cfg_attr(feature = "pyo3", doc = include_str!("docs/pymethods.md"))]
#[cfg_attr(
    not(feature = "pyo3"),
    doc = "`#[dlpack_rs::pymethods]`: pyo3's `#[pymethods]` plus the DLPack protocol (features `derive` and `pyo3`)."
)]
#[cfg(feature = "derive")]
#[cfg_attr(docsrs, doc(cfg(all(feature = "derive", feature = "pyo3"))))]
pub use dlpack_rs_derive::pymethods;
#[cfg_attr(all(feature = "pyo3", feature = "ndarray"), doc = include_str!("docs/derive.md"))]
#[cfg_attr(
    not(all(feature = "pyo3", feature = "ndarray")),
    doc = "`#[derive(IntoDLPack)]` (feature `derive`): documented with its examples in a build with features `pyo3` and `ndarray`, as on docs.rs."
)]
#[cfg(feature = "derive")]
#[cfg_attr(docsrs, doc(cfg(feature = "derive")))]
pub use dlpack_rs_derive::IntoDLPack;
pub use into_dlpack::IntoDLPack;

/// What a typical extension module imports: `use dlpack_rs::prelude::*;`.
///
/// ```
/// use dlpack_rs::prelude::*;
///
/// let t = Export::new(vec![1.0f32, 2.0]).versioned()?;
/// assert_eq!(t.shape(), &[2]);
/// # Ok::<(), dlpack_rs::safe::Error>(())
/// ```
pub mod prelude {
    pub use crate::safe::{Element, Export};
    pub use crate::IntoDLPack;

    #[cfg(feature = "pyo3")]
    #[cfg_attr(docsrs, doc(cfg(feature = "pyo3")))]
    pub use crate::pyo3_glue::{Dims, PyTensor, Returned, TensorView, TensorViewMut, ANY};
}

/// What `#[derive(IntoDLPack)]` expands to calls; the path names the release the derive pins.
#[doc(hidden)]
pub mod __private_derive_v0_4 {
    pub use crate::derive_support::*;
}
mod derive_support;

#[cfg(feature = "pyo3")]
#[cfg_attr(docsrs, doc(cfg(feature = "pyo3")))]
pub mod pyo3_glue;

#[cfg(feature = "cudarc")]
#[cfg_attr(docsrs, doc(cfg(feature = "cudarc")))]
pub use interop::cudarc as cuda;

mod interop;

/// The pyo3 version this crate is built against (feature `pyo3`), for generated code.
#[cfg(feature = "pyo3")]
#[cfg_attr(docsrs, doc(cfg(feature = "pyo3")))]
pub use pyo3;

/// The ndarray (0.17) this crate's views and exports use, for code that names its types.
#[cfg(feature = "ndarray")]
#[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
pub use ndarray;

/// The image (0.25) this crate uses: an `ImageBuffer` of [`safe::Element`]s exports zero-copy as
/// `(height, width, channels)`, and `TensorView::as_image` views an argument as one.
#[cfg(feature = "image")]
#[cfg_attr(docsrs, doc(cfg(feature = "image")))]
pub use image;

/// The README's Rust examples, run as doctests with `--all-features`.
#[cfg(all(doctest, feature = "pyo3", feature = "derive", feature = "ndarray"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The export guide's examples.
#[cfg(all(doctest, feature = "pyo3", feature = "derive", feature = "ndarray"))]
#[doc = include_str!("../../docs/export.md")]
pub struct ExportGuideDoctests;

/// The import guide's examples.
#[cfg(all(doctest, feature = "pyo3", feature = "derive", feature = "ndarray"))]
#[doc = include_str!("../../docs/import.md")]
pub struct ImportGuideDoctests;

/// The migration guide's examples.
#[cfg(all(doctest, feature = "pyo3", feature = "derive", feature = "ndarray"))]
#[doc = include_str!("../../docs/migrating-from-0.3.md")]
pub struct MigrationGuideDoctests;
