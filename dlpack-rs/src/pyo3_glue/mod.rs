//! The Python side of DLPack (feature `pyo3`): export with the `__dlpack__` protocol and import
//! of any object that implements it.
//!
//! - Export: implement [`IntoDLPack`] and call [`IntoDLPack::into_capsule`] /
//!   [`IntoDLPack::into_capsule_versioned`], or make a frozen `#[pyclass]` a full producer whose
//!   `__dlpack__` / `__dlpack_device__` delegate to [`export_dlpack`] /
//!   [`export_dlpack_device`] (the derive macro generates exactly that). [`DLPackTensor`]
//!   (`dlpack_rs.Tensor` in Python) is a ready-made producer owning any managed tensor.
//! - Import: [`PyTensor::from_pyany`] (or a `PyTensor` `#[pyfunction]` argument) takes a
//!   tensor from any object with `__dlpack__`; [`ImportOptions`] asks the producer for a device
//!   or a copy; [`TensorView`] / [`TensorViewMut`] are the typed arguments, one family whose
//!   parameters state the element type, the shape ([`Ndim`]`<2>`, [`Shape3`]`<ANY, ANY, 3>`),
//!   the layout ([`Strided`], [`CContig`], [`FContig`]) and the device ([`Cpu`],
//!   [`AnyDevice`]), holding their borrow from extraction on; [`AnyOf3`] takes one of several
//!   element types.
//! - Return values: [`Returned`]`<`[`Torch`]`>` (or [`Numpy`], [`Jax`]) states a result's
//!   framework in the signature, and `Returned<`[`Framework`]`>` hands it back as the caller's;
//!   torch gets it through its exchange table, without a capsule or a `from_dlpack` call.
//!   [`DLPackTensor`] (`dlpack_rs.Tensor`) is the result for a caller that wants a producer.
//! - Fast path: the DLPack 1.3 C exchange API (`__dlpack_c_exchange_api__`). Imports use a
//!   producer's table when its type has one (torch does), and [`DLPackTensor`] and derived
//!   classes publish one ([`exchange_api`], [`exchange_api_capsule`]).
//! - Capsule lifecycle: the consumer renames the capsule to `used_dltensor[_versioned]`
//!   before anything that can fail, then owns the tensor; our capsules' destructors call the
//!   deleter only while the capsule still has its unused name, and keep any pending Python
//!   exception intact.
//! - Threads: deleters of our exports may run on any thread, with or without the GIL, and
//!   during interpreter shutdown; a Python keepalive ([`PyKeepalive`]) is released by
//!   attaching when possible and leaked when the interpreter is going away.
//! - Errors: safe-layer errors become `BufferError` (or `TypeError` for a dtype mismatch);
//!   bad `__dlpack__` arguments `TypeError` / `ValueError`.
//!
//! ```
//! use dlpack_rs::pyo3_glue::{IntoDLPack, PyTensor};
//! use dlpack_rs::safe::{cpu_device, dtype_f32, TensorInfo};
//! use pyo3::prelude::*;
//! use std::ffi::c_void;
//!
//! struct MyTensor(Vec<f32>);
//!
//! // SAFETY: the Vec's heap buffer holds `len` f32s and stays in place when the Vec moves.
//! unsafe impl IntoDLPack for MyTensor {
//!     fn tensor_info(&self) -> TensorInfo {
//!         TensorInfo::contiguous(
//!             self.0.as_ptr() as *mut c_void,
//!             cpu_device(),
//!             dtype_f32(),
//!             vec![self.0.len() as i64],
//!         )
//!     }
//! }
//!
//! Python::initialize();
//! Python::attach(|py| {
//!     let t = MyTensor(vec![1.0, 2.0, 3.0]);
//!     let capsule = t.into_capsule(py).unwrap();
//!     // Round trip: import our own capsule. A bare capsule's name proves nothing, so taking
//!     // one is `unsafe`; this one we just made.
//!     // SAFETY: `into_capsule` made a "dltensor" capsule of a DLManagedTensor.
//!     let tensor = unsafe { PyTensor::from_capsule(&capsule) }.unwrap();
//!     assert_eq!(tensor.shape(), &[3]);
//!     assert_eq!(tensor.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0]);
//!     // Dropping `tensor` calls the deleter, which drops the MyTensor.
//! });
//! ```

mod compat_0_3;
pub(crate) mod export;
mod import;
mod numpy;
pub(crate) mod runtime;

/// The export trait at the seed's path (`dlpack_rs::pyo3_glue::IntoDLPack`): the very trait of
/// [`dlpack_rs::IntoDLPack`](crate::IntoDLPack), which also exists without feature `pyo3`.
pub use crate::into_dlpack::IntoDLPack;
#[allow(deprecated)]
pub use compat_0_3::DLPackVariant;
pub use export::class_export::{export_dlpack, export_dlpack_device, export_dlpack_value};
pub use export::class_table::{exchange_api, exchange_api_capsule};
pub use export::framework::{Framework, Jax, Numpy, ReturnTo, Returned, Torch};
pub use export::protocol::DLPackArgs;
pub use export::tensor::{register, DLPackTensor};
pub use import::any_of::{AnyOf2, AnyOf2Mut, AnyOf3, AnyOf3Mut};
pub use import::constraints::{
    AnyDevice, CContig, Cpu, Device, FContig, Layout, Ndim, Shape, Shape1, Shape2, Shape3, Shape4,
    Strided, ANY,
};
#[cfg(feature = "inspect")]
#[cfg_attr(docsrs, doc(cfg(feature = "inspect")))]
pub use import::type_hints::TYPING_STUB;
pub use import::typed::{TensorView, TensorViewMut};
pub use import::{ImportOptions, PyTensor};
pub use runtime::capsule::into_capsule;
pub use runtime::errors::dtype_name;
pub use runtime::keepalive::PyKeepalive;
#[cfg(feature = "test-counters")]
#[doc(hidden)]
pub use runtime::keepalive::{keepalive_counts, KeepaliveCounts};
