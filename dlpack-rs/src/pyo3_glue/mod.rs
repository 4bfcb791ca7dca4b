//! The Python side of DLPack (feature `pyo3`): `__dlpack__` export and import.
//!
//! | job | door |
//! |---|---|
//! | a class that is a tensor | `#[derive(IntoDLPack)]` with `#[dlpack(pyclass)]` or `#[dlpack_rs::pymethods]` |
//! | a hand-written `__dlpack__` of any value | [`export_dlpack_value`] |
//! | a function's tensor result | [`Returned`]`<`[`Torch`]`>` (or [`Numpy`], [`Jax`], [`Framework`]); [`DLPackTensor`] for a neutral producer |
//! | a value as a bare capsule | [`IntoDLPack::into_capsule`] / [`IntoDLPack::into_capsule_versioned`] |
//! | any tensor in, owned | [`PyTensor`] (an argument, [`PyTensor::from_pyany`], [`ImportOptions`]) |
//! | a tensor argument of known type and shape | [`TensorView`] / [`TensorViewMut`] (and [`AnyOf`]) |
//!
//! Imports use a type's DLPack 1.3 C exchange table when it has one (torch, [`DLPackTensor`],
//! derived classes). Safe-layer errors become `BufferError` (`TypeError` for a dtype mismatch or
//! an unpacked dtype, `ValueError` for an unserializable one, `MemoryError` when out of memory).

mod compat_0_3;
pub(crate) mod export;
mod import;
mod numpy;
pub(crate) mod runtime;

/// The export trait [`dlpack_rs::IntoDLPack`](crate::IntoDLPack), also here by the Python glue.
pub use crate::into_dlpack::IntoDLPack;
#[allow(deprecated)]
pub use compat_0_3::DLPackVariant;
pub use export::class_export::export_dlpack_value;
pub use export::exchange_export::DLPackTensor;
pub use export::framework::{Framework, Jax, Numpy, Returned, Torch};
pub use import::any_of::{AnyOf, AnyOfMut};
pub use import::constraints::{
    AnyDevice, CContig, Cpu, Device, Dims, FContig, Layout, Shape, Strided, ANY,
};
pub use import::typed::{TensorView, TensorViewMut};
pub use import::{ImportOptions, PyTensor};
pub use runtime::keepalive::PyKeepalive;
#[cfg(feature = "test-counters")]
#[doc(hidden)]
pub use runtime::keepalive::{keepalive_counts, KeepaliveCounts};
#[cfg(feature = "inspect")]
#[cfg_attr(docsrs, doc(cfg(feature = "inspect")))]
pub use runtime::type_hints::TYPING_STUB;
