//! Portable Rust bindings for the DLPack tensor protocol.
//!
//! - [`ffi`]: the DLPack 1.3 C ABI, hand-written `#[repr(C)]` types and constants.
//! - [`safe`]: export ([`safe::Export`], [`safe::pack`], [`safe::pack_versioned`]) and import
//!   ([`safe::ManagedTensor`], [`safe::ManagedTensorVersioned`]) with checked, typed views.
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
//! Without features the crate is `#![no_std]` (it needs `alloc`) and has no dependencies. An
//! export is one heap block owning the *keepalive* (the Rust value that owns the memory), whose
//! deleter its holder calls once ([SAFETY.md](https://github.com/kornia/dlpack-rs/blob/main/SAFETY.md)).
//! The [README](https://github.com/kornia/dlpack-rs#feature-flags) describes the features (all
//! off by default) and [what numpy, torch, jax, pyarrow and array-api-strict take and
//! give](https://github.com/kornia/dlpack-rs#compatibility).
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

/// The image (0.25) this crate's `ImageBuffer` exports and views use.
#[cfg(feature = "image")]
#[cfg_attr(docsrs, doc(cfg(feature = "image")))]
pub use image;

/// Doctest holders: the README's and the guides' Rust examples, run with `--all-features`.
macro_rules! doctests {
    ($($name:ident = $file:literal;)*) => {$(
        #[cfg(all(doctest, feature = "pyo3", feature = "derive", feature = "ndarray"))]
        #[doc = include_str!($file)]
        pub struct $name;
    )*};
}

doctests! {
    ReadmeDoctests = "../../README.md";
    ExportGuideDoctests = "../../docs/export.md";
    ImportGuideDoctests = "../../docs/import.md";
    MigrationGuideDoctests = "../../docs/migrating-from-0.3.md";
}
