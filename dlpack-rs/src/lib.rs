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
//!
//! Without features the crate is `#![no_std]` (it needs `alloc`) and has no dependencies.
//!
//! # Ownership model
//!
//! ```text
//!  producer (owns memory)                         consumer
//!  ───────────────────────                        ────────────────────────────
//!  keepalive K ──moved into──▶ heap block { DLManagedTensor[Versioned], shape, strides, K }
//!                                   │  *mut handed over (capsule, C call, ...)
//!                                   ▼
//!                             consumer reads dl_tensor ... then calls deleter(ptr) once
//!                                   │
//!                                   ▼
//!                             deleter drops the heap block and K, exactly once
//! ```
//!
//! On import, [`safe::ManagedTensor`] / [`safe::ManagedTensorVersioned`] own a producer's
//! tensor: their `Drop` calls the producer's deleter exactly once (never when it is NULL).
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

extern crate alloc;

pub mod ffi;
pub mod safe;

mod into_dlpack;
/// `#[derive(IntoDLPack)]` (feature `derive`): see the macro's documentation.
#[cfg(feature = "derive")]
pub use dlpack_rs_derive::IntoDLPack;
pub use into_dlpack::IntoDLPack;

#[doc(hidden)]
pub mod derive_support;

#[cfg(feature = "pyo3")]
pub mod pyo3_glue;

/// The pyo3 version this crate is built against (feature `pyo3`), for generated code.
#[cfg(feature = "pyo3")]
pub use pyo3;

/// The README's Rust examples, compiled and run as doctests (they use the pyo3 glue and the
/// derive, so they are checked with `--all-features`).
#[cfg(all(doctest, feature = "pyo3", feature = "derive"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
