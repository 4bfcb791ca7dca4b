//! The ownership model, without Python: export Rust memory as managed tensors, import
//! managed tensors as owned values with validated accessors and typed views.
//!
//! - Export, raw: [`TensorInfo`] + a keepalive → [`pack`] / [`pack_versioned`] (or the
//!   `try_` forms that return errors instead of panicking).
//! - Export, safe: [`Export`] over a [`Buffer`] (`Vec<T>`, `Box<[T]>`, `Arc<[T]>`) whose
//!   [`Element`] type decides the dtype; no raw pointer, no `unsafe`.
//! - Import: [`ManagedTensor`] / [`ManagedTensorVersioned`] own a producer's tensor, validate
//!   it once, and call its deleter exactly once on drop.
//! - `ndarray` (feature `ndarray`): typed `ArrayViewD` / `ArrayViewMutD` views of
//!   imported tensors, and `Array` / `ArcArray` exported without a copy.

mod dtype;
mod error;
mod export;
mod import;
mod layout;
#[cfg(feature = "ndarray")]
pub mod ndarray;

pub use dtype::*;
pub use error::Error;
pub use export::{
    pack, pack_versioned, try_pack, try_pack_versioned, Buffer, Dim, Export, TensorInfo,
};
pub(crate) use export::{pack_owned, pack_owned_versioned};
#[cfg(feature = "pyo3")]
pub(crate) use import::view_accessors;
pub use import::{ManagedTensor, ManagedTensorVersioned, TensorView};
pub use layout::{compact_strides, is_c_contiguous, MAX_NDIM};
