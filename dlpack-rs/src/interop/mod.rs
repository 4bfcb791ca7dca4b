//! One place per foreign library, its Rust and Python sides together: `ndarray` (views of owners,
//! `Array` export), `image` (`ImageBuffer` export, typed arguments as images), `safetensors`
//! (a file's tensors, serialization), `cudarc` (CUDA memory). Each is reached at its public
//! path: `dlpack_rs::safe::ndarray`, `dlpack_rs::safe::{SafeTensorsFile, serialize_safetensors}`,
//! `dlpack_rs::cuda`; `image` adds trait impls and `TensorView::as_image`.

#[cfg(feature = "cudarc")]
pub mod cudarc;
#[cfg(feature = "image")]
mod image;
#[cfg(feature = "ndarray")]
pub mod ndarray;
#[cfg(feature = "safetensors")]
pub(crate) mod safetensors;
